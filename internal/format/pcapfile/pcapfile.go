// Package pcapfile reads packet captures (pcap with microsecond or
// nanosecond timestamps, and pcapng) through gopacket's pcapgo, and turns
// every packet into an Ethernet frame, as the director's XDP program would
// receive it: raw IPv4/IPv6, BSD loopback and Linux cooked (SLL, SLL2)
// packets get an Ethernet header. It also writes captures, and makes
// synthetic ones (gen.go).
package pcapfile

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// MACs put on packets that had no Ethernet header.
var (
	SrcMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	DstMAC = [6]byte{0x02, 0, 0, 0, 0, 0x02}
)

// Packet is one captured packet as an Ethernet frame.
type Packet struct {
	N         int // 1-based position in the capture
	Time      time.Time
	Frame     []byte
	Truncated bool // the capture kept less than the packet's length
	Length    int  // the packet's length on the wire
}

// Reader reads packets from a capture file.
type Reader struct {
	f          *os.File
	mem        []byte        // the file, when it is mapped
	br         *bufio.Reader // what pcapgo reads from
	pcap       *pcapgo.Reader
	ng         *pcapgo.NgReader
	n          int
	FileFormat string // "pcap" or "pcapng"
	links      map[int]layers.LinkType
	arena      []byte       // frames are copied here: one allocation per megabyte, not per packet
	frame      []byte       // Next's frames with an Ethernet header added, reused
	populated  atomic.Int64 // how much of mem Populate has done
}

// Open opens a pcap or pcapng file; the format is read from its magic. A
// regular file is mapped into memory rather than read, which saves a
// system call and a copy per megabyte.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	var rd io.Reader = f
	mem, merr := mapFile(f)
	if merr == nil && mem != nil {
		rd = bytes.NewReader(mem)
	}
	r, err := NewReader(rd)
	if err != nil {
		unmapFile(mem)
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.f, r.mem = f, mem
	return r, nil
}

// Populate maps the next megabyte of a mapped capture into the page table
// (Linux's MADV_POPULATE_READ), so that reading it takes no page faults,
// and reports whether there was any to do. Goroutines that would otherwise
// wait may call it while the reader reads: a fault costs the reader more
// than the same pages cost here, in one batch, on another CPU. It must not
// be called after Close.
func (r *Reader) Populate() bool {
	const step = 1 << 20
	if r.mem == nil {
		return false
	}
	off := r.populated.Add(step) - step
	if off >= int64(len(r.mem)) {
		return false
	}
	if !populate(r.mem[off:min(off+step, int64(len(r.mem)))]) {
		r.populated.Store(int64(len(r.mem))) // no use trying again
		return false
	}
	return true
}

// NewReader reads a capture from rd.
func NewReader(rd io.Reader) (*Reader, error) {
	// A large buffer saves system calls on files; over a mapping there
	// are none to save, and a small one stays in the CPU's cache.
	size := 1 << 20
	if _, ok := rd.(*bytes.Reader); ok {
		size = 16 << 10
	}
	br := bufio.NewReaderSize(rd, size)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("not a capture file: too short")
	}
	r := &Reader{br: br, links: map[int]layers.LinkType{}}
	if binary.LittleEndian.Uint32(magic) == 0x0a0d0d0a {
		r.FileFormat = "pcapng"
		if r.ng, err = pcapgo.NewNgReader(br, pcapgo.NgReaderOptions{WantMixedLinkType: true, SkipUnknownVersion: true}); err != nil {
			return nil, fmt.Errorf("reading pcapng: %w", err)
		}
		for i := 0; i < r.ng.NInterfaces(); i++ {
			if err := r.checkLink(i); err != nil {
				return nil, err
			}
		}
		return r, nil
	}
	r.FileFormat = "pcap"
	if r.pcap, err = pcapgo.NewReader(br); err != nil {
		return nil, fmt.Errorf("not a pcap or pcapng file: %w", err)
	}
	if _, err := wrapTo(nil, r.pcap.LinkType(), nil); errors.Is(err, errUnsupported) {
		return nil, fmt.Errorf("link type %d (%s) is not supported (Ethernet, raw IPv4/IPv6, BSD loopback, Linux SLL and SLL2 are)", r.pcap.LinkType(), r.pcap.LinkType())
	}
	return r, nil
}

func (r *Reader) checkLink(i int) error {
	ifc, err := r.ng.Interface(i)
	if err != nil {
		return err
	}
	if _, err := wrapTo(nil, ifc.LinkType, nil); errors.Is(err, errUnsupported) {
		return fmt.Errorf("interface %d: link type %d (%s) is not supported (Ethernet, raw IPv4/IPv6, BSD loopback, Linux SLL and SLL2 are)", i, ifc.LinkType, ifc.LinkType)
	}
	r.links[i] = ifc.LinkType
	return nil
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.mem != nil {
		unmapFile(r.mem)
		r.mem = nil
	}
	if r.f != nil {
		return r.f.Close()
	}
	return nil
}

// Read returns the next packet, or io.EOF at the end. Any other error means
// the capture is truncated or corrupt; Count says how many packets were read.
// A mapped file that shrinks while it is read faults: read under Guard.
func (r *Reader) Read() (Packet, error) { return r.read(false) }

// Next is Read for a reader that is done with each packet before it asks
// for the next: the frame it returns is valid only until then, and is
// never copied.
func (r *Reader) Next() (Packet, error) { return r.read(true) }

func (r *Reader) read(transient bool) (Packet, error) {
	var data []byte
	var ci gopacket.CaptureInfo
	var err error
	link := layers.LinkTypeEthernet
	if r.ng != nil {
		data, ci, err = r.ng.ZeroCopyReadPacketData()
		if err == nil {
			lt, ok := r.links[ci.InterfaceIndex]
			if !ok {
				if cerr := r.checkLink(ci.InterfaceIndex); cerr != nil {
					return Packet{}, fmt.Errorf("packet %d: %w", r.n+1, cerr)
				}
				lt = r.links[ci.InterfaceIndex]
			}
			link = lt
		}
	} else {
		// pcapgo reads a record's header and its data with two
		// io.ReadFulls, so a file cut right after a header ends in a
		// plain io.EOF, as a complete file does. Whether any byte was
		// left before the record tells them apart. (pcapgo's pcapng
		// reader reads whole blocks and reports a cut as such.)
		if r.br.Buffered() == 0 {
			if _, perr := r.br.Peek(1); perr == io.EOF {
				return Packet{}, io.EOF
			}
		}
		data, ci, err = r.pcap.ZeroCopyReadPacketData()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		link = r.pcap.LinkType()
	}
	if err == io.EOF {
		return Packet{}, io.EOF
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Packet{}, fmt.Errorf("the capture ends in the middle of packet %d (truncated file)", r.n+1)
		}
		return Packet{}, fmt.Errorf("packet %d: %w", r.n+1, err)
	}
	r.n++
	p := Packet{N: r.n, Time: ci.Timestamp, Truncated: ci.CaptureLength < ci.Length, Length: ci.Length}
	if transient { // the frame is pcapgo's buffer, or r.frame
		p.Frame, err = wrapTo(r.frame[:0], link, data)
		if err == nil && link != layers.LinkTypeEthernet {
			r.frame = p.Frame
		}
	} else {
		p.Frame, err = wrapTo(nil, link, data)
	}
	if err != nil {
		return Packet{}, fmt.Errorf("packet %d: %w", r.n, err)
	}
	if transient || link != layers.LinkTypeEthernet {
		return p, nil
	}
	// data is the reader's buffer: keep a copy.
	if len(r.arena)+len(p.Frame) > cap(r.arena) {
		r.arena = make([]byte, 0, max(1<<20, len(p.Frame)))
	}
	start := len(r.arena)
	r.arena = append(r.arena, p.Frame...)
	p.Frame = r.arena[start:len(r.arena):len(r.arena)]
	return p, nil
}

// Count is how many packets have been read.
func (r *Reader) Count() int { return r.n }

var errUnsupported = errors.New("unsupported link type")

// Link types pcapgo's constants do not all name.
const (
	linkNull    = 0
	linkRawBSD1 = 12 // DLT_RAW on most BSDs
	linkRawBSD2 = 14 // DLT_RAW on OpenBSD
	linkLoop    = 108
	linkSLL2    = 276
)

// wrapTo turns a packet of a link type into an Ethernet frame: the packet
// itself for Ethernet, else one built in dst's memory (appended to dst[:0]).
// With data nil it only checks the link type.
func wrapTo(dst []byte, lt layers.LinkType, data []byte) ([]byte, error) {
	switch lt {
	case layers.LinkTypeEthernet:
		return data, nil
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6, linkRawBSD1, linkRawBSD2:
		if data == nil {
			return nil, nil
		}
		return ethernet(dst, etherTypeOf(data), data), nil
	case linkNull, linkLoop:
		if data == nil {
			return nil, nil
		}
		if len(data) < 4 {
			return ethernet(dst, 0, nil), nil
		}
		return ethernet(dst, etherTypeOf(data[4:]), data[4:]), nil
	case layers.LinkTypeLinuxSLL:
		if data == nil {
			return nil, nil
		}
		if len(data) < 16 {
			return ethernet(dst, 0, nil), nil
		}
		return ethernet(dst, binary.BigEndian.Uint16(data[14:]), data[16:]), nil
	case linkSLL2:
		if data == nil {
			return nil, nil
		}
		if len(data) < 20 {
			return ethernet(dst, 0, nil), nil
		}
		return ethernet(dst, binary.BigEndian.Uint16(data[0:]), data[20:]), nil
	}
	return nil, errUnsupported
}

// etherTypeOf guesses an IP packet's EtherType from its version nibble.
func etherTypeOf(ip []byte) uint16 {
	if len(ip) > 0 && ip[0]>>4 == 6 {
		return 0x86dd
	}
	return 0x0800
}

func ethernet(dst []byte, etype uint16, payload []byte) []byte {
	if cap(dst) < 14+len(payload) {
		dst = make([]byte, 0, max(14+len(payload), 2*cap(dst)))
	}
	f := append(dst[:0], DstMAC[:]...)
	f = append(f, SrcMAC[:]...)
	f = binary.BigEndian.AppendUint16(f, etype)
	return append(f, payload...)
}

// Writer writes Ethernet frames to a pcap file with nanosecond timestamps.
type Writer struct {
	bw *bufio.Writer
	w  *pcapgo.Writer
}

// NewWriter starts a pcap on w.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return &Writer{bw: bw, w: pw}, nil
}

// Write adds one frame.
func (w *Writer) Write(t time.Time, frame []byte) error {
	return w.w.WritePacket(gopacket.CaptureInfo{Timestamp: t, CaptureLength: len(frame), Length: len(frame)}, frame)
}

// Flush writes out what is buffered.
func (w *Writer) Flush() error { return w.bw.Flush() }
