package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf/abi"
)

// A capture takes frames from a running program as they leave it, with
// what the program decided (bpf/capture.h): every exit tests one flag,
// and only a running capture pays for more. One capture at a time runs on
// a set of pins; a capture that ends, however it ends, leaves the
// datapath as it found it: the capture holds a lease on the hook that its
// process renews every second, and once its process is gone the program
// turns the hook off at the first frame after the lease ends (a few
// seconds), whatever the frame.

// CaptureFilter is what a capture keeps, decided in the kernel before a
// frame is copied out.
type CaptureFilter struct {
	Actions []int      // XDP actions kept (abi.XDPPass, abi.XDPTX...); none: all
	Reasons []int      // the counters kept (a pass reason, encapsulated...); none: any
	Table   int        // the slot of the only table kept; -1: any
	Backend netip.Addr // the only primary kept; invalid: any
	Snaplen int        // bytes kept of each frame; 0: all (65,535 at most)
	Rate    int        // frames a second each CPU keeps at most; 0: no cap
}

// CaptureRecord is one captured frame.
type CaptureRecord struct {
	Time    time.Time
	Action  int // the XDP action
	Reason  int // the counter it was counted under
	Table   int // the table's slot, -1: none
	Row     int
	Ifindex int // the interface it came in by
	Len     int // the frame's length as it left
	// QUIC is, for a UDP packet of a table with QUIC-LB routing, the
	// counter it was counted under (quic_routed or a fallback's); 0 for
	// any other.
	QUIC  int
	Frame []byte
}

// CaptureLoss is what a capture could not keep.
type CaptureLoss struct {
	RateCapped uint64 // over the rate cap
	Refused    uint64 // refused by the kernel's event buffer
	Lost       uint64 // lost between the buffer and this process (it read too slowly)
}

// Total is every frame lost.
func (l CaptureLoss) Total() uint64 { return l.RateCapped + l.Refused + l.Lost }

// Capture is a running capture.
type Capture struct {
	cfg, cpu *ebpf.Map
	rd       *perf.Reader
	lock     *os.File
	lost     uint64
	boot     time.Time // wall time of ktime 0
	closed   bool
	setting  abi.Capture   // what the hook is set to, renewed
	stop     chan struct{} // ends the flushing and the renewing
	stopped  chan struct{} // closed when they have ended
}

// leaseEnd is the end of a capture's lease taken now, in the hook's units.
func leaseEnd() (uint32, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint32(uint64(ts.Nano())>>abi.CaptureLeaseShift) + abi.CaptureLease, nil
}

type captureMaps struct{ cfg, events, cpu *ebpf.Map }

// ErrCaptureBusy is Capture's error when another capture runs on the pins.
var ErrCaptureBusy = errors.New("another capture runs on these pins")

// captureBuffer is each CPU's event buffer, in bytes.
const captureBuffer = 1 << 20

// Capture starts a capture of the director's frames.
func (d *Director) Capture(f CaptureFilter) (*Capture, error) {
	return startCapture(d.Dir, captureMaps{d.Maps.Capture, d.Maps.CaptureEvents, d.Maps.CaptureCpu}, f)
}

// Capture starts a capture of the backend program's frames.
func (b *BackendProgram) Capture(f CaptureFilter) (*Capture, error) {
	if b.maps.Capture == nil || b.maps.CaptureEvents == nil || b.maps.CaptureCpu == nil {
		return nil, fmt.Errorf("capture: the backend program pinned in %s predates live capture: load this version "+
			"(director backend attach IFACE) first", b.Dir)
	}
	return startCapture(b.Dir, captureMaps{b.maps.Capture, b.maps.CaptureEvents, b.maps.CaptureCpu}, f)
}

func startCapture(dir string, m captureMaps, f CaptureFilter) (_ *Capture, err error) {
	c := &Capture{cfg: m.cfg, cpu: m.cpu}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if dir != "" {
		// The lock is the capture map's pin: a second capture on the
		// same pins would overwrite the first's filter.
		if c.lock, err = os.Open(filepath.Join(dir, "capture")); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		if err := unix.Flock(int(c.lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return nil, fmt.Errorf("%w (%s)", ErrCaptureBusy, dir)
		}
	}
	v := abi.Capture{On: 1, Table: 0, Snaplen: 0xffff, Rate: uint32(f.Rate)}
	if f.Snaplen > 0 && f.Snaplen < 0xffff {
		v.Snaplen = uint32(f.Snaplen)
	}
	if f.Rate < 0 {
		return nil, fmt.Errorf("capture: rate %d", f.Rate)
	}
	for _, a := range f.Actions {
		v.Actions |= 1 << uint(a&31)
	}
	if len(f.Actions) == 0 {
		v.Actions = ^uint32(0)
	}
	for _, r := range f.Reasons {
		v.Reasons |= 1 << uint(r&31)
	}
	if f.Table >= 0 {
		v.Table = uint32(f.Table) + 1
	}
	if f.Backend.IsValid() {
		if f.Backend.Is4() {
			v.Family = uint32(abi.FamilyIPv4)
			a := f.Backend.As4()
			copy(v.Backend[:], a[:])
		} else {
			v.Family = uint32(abi.FamilyIPv6)
			v.Backend = f.Backend.As16()
		}
	}
	// Each CPU's window and losses start from zero.
	zero := make([]abi.CaptureCPU, runtime.NumCPU())
	if n, err := ebpf.PossibleCPU(); err == nil {
		zero = make([]abi.CaptureCPU, n)
	}
	if err := m.cpu.Put(uint32(0), zero); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	events := m.events
	if dir != "" {
		// The reader's own file of the map: the kernel drops the
		// buffers it puts in when that file goes, with this process
		// however it ends, and the program then turns the hook off.
		if events, err = ebpf.LoadPinnedMap(filepath.Join(dir, "capture_events"), nil); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		defer events.Close()
	}
	// Woken when a CPU's buffer is half full, not at each frame: a
	// wakeup (an interrupt the kernel raises on itself) costs the program
	// far more than the frame's copy; woken every 32 frames, the capped
	// frames cost the datapath 14% at line rate, against 2% this way. A
	// flush every 100 ms shows the rest.
	if c.rd, err = perf.NewReaderWithOptions(events, captureBuffer, perf.ReaderOptions{Watermark: captureBuffer / 2}); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return nil, err
	}
	c.boot = time.Now().Add(-time.Duration(ts.Nano()))
	if v.On, err = leaseEnd(); err != nil {
		return nil, err
	}
	if err := m.cfg.Put(uint32(0), &v); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	c.setting = v
	c.stop, c.stopped = make(chan struct{}), make(chan struct{})
	go c.tend()
	return c, nil
}

// tend flushes the reader every 100 ms and renews the lease every second,
// until stop.
func (c *Capture) tend() {
	defer close(c.stopped)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-c.stop:
			return
		case <-t.C:
			c.rd.Flush()
		}
		if i%10 == 0 {
			// The hook may have turned itself off meanwhile (a CPU's
			// buffer gone as this process closes it): then it stays off.
			var now abi.Capture
			if c.cfg.Lookup(uint32(0), &now) == nil && now.On != 0 {
				if end, err := leaseEnd(); err == nil {
					c.setting.On = end
					c.cfg.Put(uint32(0), &c.setting)
				}
			}
		}
	}
}

// SetDeadline makes Read return os.ErrDeadlineExceeded at t (zero: never).
func (c *Capture) SetDeadline(t time.Time) { c.rd.SetDeadline(t) }

// Read waits for the next frame. After Close it returns os.ErrClosed.
func (c *Capture) Read() (CaptureRecord, error) {
	for {
		rec, err := c.rd.Read()
		if errors.Is(err, perf.ErrFlushed) {
			continue
		}
		if err != nil {
			return CaptureRecord{}, err
		}
		if rec.LostSamples > 0 {
			c.lost += rec.LostSamples
			continue
		}
		var m abi.CaptureMeta
		raw := rec.RawSample
		metaLen, err := binary.Decode(raw, binary.NativeEndian, &m)
		if err != nil {
			continue // shorter than its header: not one of ours
		}
		n := min(int(m.CapLen), len(raw)-metaLen)
		r := CaptureRecord{Time: c.boot.Add(time.Duration(m.Ktime)), Action: int(m.Action), Reason: int(m.Reason), Table: int(m.Table) - 1,
			Row: int(m.Row), Ifindex: int(m.Ifindex), Len: int(m.Len), QUIC: int(m.Quic), Frame: append([]byte(nil), raw[metaLen:metaLen+n]...)}
		return r, nil
	}
}

// Close turns the hook off, stops reading and says what was lost.
func (c *Capture) Close() (CaptureLoss, error) {
	var loss CaptureLoss
	if c.closed {
		return loss, nil
	}
	c.closed = true
	c.stopTending() // no renewal after the hook is turned off
	off := abi.Capture{}
	err := c.cfg.Put(uint32(0), &off)
	var cpus []abi.CaptureCPU
	if e := c.cpu.Lookup(uint32(0), &cpus); e == nil {
		for _, p := range cpus {
			loss.RateCapped += p.Limited
			loss.Refused += p.Failed
		}
	} else if err == nil {
		err = e
	}
	loss.Lost = c.lost
	c.release()
	return loss, err
}

func (c *Capture) stopTending() {
	if c.stop != nil {
		close(c.stop)
		<-c.stopped
		c.stop = nil
	}
}

func (c *Capture) release() {
	c.stopTending()
	if c.rd != nil {
		c.rd.Close()
	}
	if c.lock != nil {
		c.lock.Close()
	}
}
