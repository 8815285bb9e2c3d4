package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/table/config"
)

var (
	ip4 = pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(1000, 80, 2, nil), pkt.V4Opts{})
	ip6 = pkt.IPv6(netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fd00::1"), 17, pkt.UDP(1000, 53, []byte("q")))
)

// pcapOf writes packets of one link type as pcap.
func pcapOf(t *testing.T, lt layers.LinkType, nanos bool, pkts ...[]byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	if nanos {
		w = pcapgo.NewWriterNanos(&b)
	}
	if err := w.WriteFileHeader(65535, lt); err != nil {
		t.Fatal(err)
	}
	for i, p := range pkts {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, int64(i)), CaptureLength: len(p), Length: len(p)}
		if err := w.WritePacket(ci, p); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// readAll reads a capture with Read, and checks that Next gives the same.
func readAll(t *testing.T, data []byte) []Packet {
	t.Helper()
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var out []Packet
	for {
		p, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	r, err = NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		p, err := r.Next()
		if err == io.EOF {
			if i != len(out) {
				t.Fatalf("Next read %d packets, Read %d", i, len(out))
			}
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(out) || !bytes.Equal(p.Frame, out[i].Frame) || p.N != out[i].N || !p.Time.Equal(out[i].Time) ||
			p.Length != out[i].Length || p.Truncated != out[i].Truncated {
			t.Fatalf("packet %d: Next gives %+v, Read %+v", i+1, p, out[i])
		}
	}
}

func sll(proto uint16, payload []byte) []byte {
	h := make([]byte, 16)
	binary.BigEndian.PutUint16(h[2:], 1)
	binary.BigEndian.PutUint16(h[4:], 6)
	binary.BigEndian.PutUint16(h[14:], proto)
	return append(h, payload...)
}

func sll2(proto uint16, payload []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h, proto)
	binary.BigEndian.PutUint32(h[4:], 2)
	return append(h, payload...)
}

func null(af uint32, payload []byte) []byte {
	h := make([]byte, 4)
	binary.LittleEndian.PutUint32(h, af)
	return append(h, payload...)
}

func TestLinkTypesBecomeEthernet(t *testing.T) {
	for _, c := range []struct {
		name string
		lt   layers.LinkType
		in   [][]byte
	}{
		{"ethernet", layers.LinkTypeEthernet, [][]byte{pkt.Frame(ip4), pkt.Frame(ip6)}},
		{"raw", layers.LinkTypeRaw, [][]byte{ip4, ip6}},
		{"ipv4/ipv6", layers.LinkTypeIPv4, [][]byte{ip4, ip6}},
		{"dlt-raw", 12, [][]byte{ip4, ip6}},
		{"sll", layers.LinkTypeLinuxSLL, [][]byte{sll(0x0800, ip4), sll(0x86dd, ip6)}},
		{"sll2", 276, [][]byte{sll2(0x0800, ip4), sll2(0x86dd, ip6)}},
		{"null", 0, [][]byte{null(2, ip4), null(30, ip6)}},
	} {
		for _, nanos := range []bool{false, true} {
			got := readAll(t, pcapOf(t, c.lt, nanos, c.in...))
			if len(got) != 2 {
				t.Fatalf("%s: %d packets", c.name, len(got))
			}
			for i, want := range [][]byte{ip4, ip6} {
				f := got[i].Frame
				etype := binary.BigEndian.Uint16(f[12:])
				if !bytes.Equal(f[14:], want) || etype != map[int]uint16{0: 0x0800, 1: 0x86dd}[i] {
					t.Errorf("%s packet %d: frame %x", c.name, i, f)
				}
			}
			if nanos && got[1].Time.Nanosecond() != 1 {
				t.Errorf("%s: nanosecond timestamp lost: %v", c.name, got[1].Time)
			}
		}
	}
}

func TestPcapNG(t *testing.T) {
	var b bytes.Buffer
	w, err := pcapgo.NewNgWriter(&b, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := w.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkTypeRaw, SnapLength: 65535})
	if err != nil {
		t.Fatal(err)
	}
	w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(ip4) + 14, Length: len(ip4) + 14}, pkt.Frame(ip4))
	w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(2, 0), CaptureLength: len(ip6), Length: len(ip6), InterfaceIndex: raw}, ip6)
	w.Flush()
	got := readAll(t, b.Bytes())
	if len(got) != 2 || !bytes.Equal(got[0].Frame[14:], ip4) || !bytes.Equal(got[1].Frame[14:], ip6) {
		t.Fatalf("pcapng packets: %+v", got)
	}
}

func TestSnapLengthTruncation(t *testing.T) {
	var b bytes.Buffer
	w := pcapgo.NewWriter(&b)
	w.WriteFileHeader(40, layers.LinkTypeEthernet)
	f := pkt.Frame(ip4)
	w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: 40, Length: len(f)}, f[:40])
	got := readAll(t, b.Bytes())
	if len(got) != 1 || !got[0].Truncated || len(got[0].Frame) != 40 || got[0].Length != len(f) {
		t.Fatalf("snap-length packet: %+v", got)
	}
}

func TestBrokenCaptures(t *testing.T) {
	good := pcapOf(t, layers.LinkTypeEthernet, false, pkt.Frame(ip4), pkt.Frame(ip6), pkt.Frame(ip4))
	for _, c := range []struct {
		name  string
		data  []byte
		open  string // error at open
		read  string // error while reading
		count int    // packets read before it
	}{
		{"empty", nil, "too short", "", 0},
		{"garbage", []byte("this is not a capture at all, just some text"), "not a pcap or pcapng file", "", 0},
		{"unsupported link type", pcapOf(t, layers.LinkTypeIEEE802_11, false), "link type 105 (802.11) is not supported", "", 0},
		{"truncated in a packet", good[:len(good)-10], "", "ends in the middle of packet 3", 2},
		{"truncated in a header", good[:24+16+len(pkt.Frame(ip4))+8], "", "packet 2", 1},
	} {
		r, err := NewReader(bytes.NewReader(c.data))
		if c.open != "" {
			if err == nil || !strings.Contains(err.Error(), c.open) {
				t.Errorf("%s: open error %v, want %q", c.name, err, c.open)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var rerr error
		for {
			if _, rerr = r.Read(); rerr != nil {
				break
			}
		}
		if rerr == io.EOF || !strings.Contains(rerr.Error(), c.read) || r.Count() != c.count {
			t.Errorf("%s: error %v after %d packets, want %q after %d", c.name, rerr, r.Count(), c.read, c.count)
		}
	}
}

// TestCutAtEveryByte: a capture cut anywhere but at the end of a packet
// is truncated, whatever the format and wherever in a record it is cut
// (right after a pcap record header included); cut at the end of a
// packet, it is a shorter, complete capture.
func TestCutAtEveryByte(t *testing.T) {
	frames := [][]byte{pkt.Frame(ip4), pkt.Frame(ip6), pkt.Frame(ip4)}
	var pcapBuf bytes.Buffer
	pw := pcapgo.NewWriterNanos(&pcapBuf)
	pw.WriteFileHeader(65535, layers.LinkTypeEthernet)
	pcapEnds := []int{pcapBuf.Len()}
	var ngBuf bytes.Buffer
	nw, err := pcapgo.NewNgWriter(&ngBuf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	nw.Flush()
	ngEnds := []int{ngBuf.Len()}
	for _, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(f), Length: len(f)}
		pw.WritePacket(ci, f)
		pcapEnds = append(pcapEnds, pcapBuf.Len())
		nw.WritePacket(ci, f)
		nw.Flush()
		ngEnds = append(ngEnds, ngBuf.Len())
	}
	for _, c := range []struct {
		name string
		data []byte
		ends []int // where a complete capture of i packets ends
	}{{"pcap", pcapBuf.Bytes(), pcapEnds}, {"pcapng", ngBuf.Bytes(), ngEnds}} {
		for n := c.ends[0]; n <= len(c.data); n++ {
			r, err := NewReader(bytes.NewReader(c.data[:n]))
			if err != nil {
				t.Fatalf("%s cut at %d: %v", c.name, n, err)
			}
			var rerr error
			for rerr == nil {
				_, rerr = r.Read()
			}
			complete := -1
			for i, e := range c.ends {
				if e == n {
					complete = i
				}
			}
			switch {
			case complete >= 0 && (rerr != io.EOF || r.Count() != complete):
				t.Errorf("%s cut after packet %d (byte %d): %v after %d packets, want the end", c.name, complete, n, rerr, r.Count())
			case complete < 0 && (rerr == io.EOF || !strings.Contains(rerr.Error(), fmt.Sprintf("the capture ends in the middle of packet %d (truncated file)", r.Count()+1))):
				t.Errorf("%s cut at byte %d, after %d packets: %v, want truncated", c.name, n, r.Count(), rerr)
			}
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add(pcapOf(&testing.T{}, layers.LinkTypeLinuxSLL, true, sll(0x0800, ip4)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for i := 0; i < 1000; i++ {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	})
}

func TestGenerateIsDeterministic(t *testing.T) {
	c, err := config.ParseFile("../../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	gen := func(seed uint64) []byte {
		var b bytes.Buffer
		w, _ := NewWriter(&b)
		if _, err := Generate(c, GenOptions{Flows: 3000, Seed: seed}, w.Write); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		return b.Bytes()
	}
	a, b, other := gen(5), gen(5), gen(6)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed gave different captures")
	}
	if bytes.Equal(a, other) {
		t.Fatal("different seeds gave the same capture")
	}
	pkts := readAll(t, a)
	kinds := map[string]int{}
	for _, p := range pkts {
		f := p.Frame
		switch {
		case f[12] == 0x08 && f[13] == 0x06:
			kinds["arp"]++
		case f[12] == 0x86:
			kinds["ipv6"]++
			if f[14+6] == 58 {
				kinds["icmpv6"]++
			}
		default:
			kinds["ipv4"]++
			switch f[14+9] {
			case 1:
				kinds["icmp"]++
			case 17:
				kinds["udp"]++
			}
		}
	}
	for _, k := range []string{"arp", "ipv6", "ipv4", "icmp", "udp", "icmpv6"} {
		if kinds[k] == 0 {
			t.Errorf("no %s packets in %v", k, kinds)
		}
	}
}

// A mapped capture that shrinks under the reader is an error under Guard,
// not a crash.
func TestGuardShrinkingCapture(t *testing.T) {
	var frames [][]byte
	for i := 0; i < 200; i++ {
		frames = append(frames, pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.20.0.1"), 17, pkt.UDP(uint16(i), 53, make([]byte, 1000)), pkt.V4Opts{})))
	}
	path := t.TempDir() + "/c.pcap"
	if err := os.WriteFile(path, pcapOf(t, layers.LinkTypeEthernet, false, frames...), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	err = r.Guard(func() {
		for {
			if _, err := r.Read(); err != nil {
				t.Fatalf("reading a shrunk capture returned %v instead of faulting", err)
			}
		}
	})
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("reading a shrunk capture: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Guard swallowed a fault outside the mapping")
			}
		}()
		r.Guard(func() {
			var p *Packet
			_ = p.N // a fault outside the mapping: a bug, not the capture
		})
	}()
}

// Next reads a mapped file as Read does, and copies nothing: a frame that
// needs an Ethernet header is built in one buffer.
func TestNext(t *testing.T) {
	var raw [][]byte
	for i := 0; i < 2000; i++ {
		raw = append(raw, pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.20.0.1"), 17, pkt.UDP(uint16(i), 53, bytes.Repeat([]byte{byte(i)}, (i*37)%1400)), pkt.V4Opts{}))
	}
	for _, lt := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw} {
		in := raw
		if lt == layers.LinkTypeEthernet {
			in = nil
			for _, p := range raw {
				in = append(in, pkt.Frame(p))
			}
		}
		data := pcapOf(t, lt, true, in...)
		want := readAll(t, data)
		path := t.TempDir() + "/c.pcap"
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if r.mem == nil {
			t.Fatal("a regular file was not mapped")
		}
		for i := range want {
			p, err := r.Next()
			if err != nil {
				t.Fatalf("%v packet %d: %v", lt, i+1, err)
			}
			if !bytes.Equal(p.Frame, want[i].Frame) || p.N != want[i].N {
				t.Fatalf("%v packet %d differs from Read's", lt, i+1)
			}
		}
		if _, err := r.Next(); err != io.EOF {
			t.Fatalf("%v after the last packet: %v", lt, err)
		}
		r.Close()
		r, err = Open(path)
		if err != nil {
			t.Fatal(err)
		}
		r.Next() // buffers are sized by now
		if n := testing.AllocsPerRun(500, func() {
			if _, err := r.Next(); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%v: Next allocates %.1f times per packet", lt, n)
		}
		r.Close()
	}
}

// TestGenerateCountsAddUp: the flows Generate reports are its TCP, UDP and
// echo flows, and its packets are what it wrote.
func TestGenerateCountsAddUp(t *testing.T) {
	c, err := config.ParseFile("../../../testdata/configs/medium.json")
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	st, err := Generate(c, GenOptions{Flows: 2000, Seed: 1}, func(time.Time, []byte) error { written++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Flows != 2000 || st.TCPFlows+st.UDPFlows+st.QUICFlows+st.EchoFlows != st.Flows || st.EchoFlows == 0 || st.Packets != written {
		t.Fatalf("%+v, %d packets written", st, written)
	}
}
