package loader

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestCapture captures real traffic on a veth the director is attached
// to: every steered frame as it left (the GUE packet, byte for byte what
// the model says the program sends, with its table's slot and row), every
// passed one with its reason; the kernel's prefilters (action, table,
// backend) and rate cap, with what they refused counted; and the hook off
// afterwards, whether the capture is closed or its process just goes.
func TestCapture(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	err := testrun.InNetns(func() error {
		// No IPv6 on the links: nothing but the test's frames crosses them
		// (no neighbour or router solicitations to capture).
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0o644); err != nil {
				return err
			}
		}
		if err := testrun.Veth("dir0", "peer0"); err != nil {
			return err
		}
		d, m, err := loadServingTest(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		if _, err := d.Attach("dir0", ModeNative); err != nil {
			return err
		}
		detach, err := testrun.AttachPassAll("peer0", link.XDPDriverMode)
		if err != nil {
			return err
		}
		defer detach()
		sock, err := testrun.Listen("peer0")
		if err != nil {
			return err
		}
		defer sock.Close()
		live, err := d.Live()
		if err != nil {
			return err
		}
		slotOf := map[int]int{}
		for _, lt := range live {
			slotOf[lt.Index] = lt.Slot
		}
		g := &gen{rng: rngFor(11)}
		var frames [][]byte
		for len(frames) < 60 {
			f := pkt.Frame(g.steeredIP())
			if len(f) <= 14+1400 { // every one fits the veth once encapsulated
				frames = append(frames, f)
			}
		}
		passed := pkt.Frame(pkt.IPv4(client4, a("10.99.0.1"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{})) // no bind
		arp := pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, 0, 0x0806, make([]byte, 28))
		send := func(fs ...[]byte) error {
			for _, f := range fs {
				if err := sock.Send(f); err != nil {
					return err
				}
			}
			return nil
		}

		// Everything.
		c, err := d.Capture(CaptureFilter{Table: -1})
		if err != nil {
			return err
		}
		if _, err := d.Capture(CaptureFilter{Table: -1}); !errors.Is(err, ErrCaptureBusy) {
			return fmt.Errorf("a second capture on the same pins: %v", err)
		}
		if err := send(append(frames, passed, arp)...); err != nil {
			return err
		}
		// Each CPU has its own ring, so frames the program saw on
		// different CPUs may be read in any order: all are read, then
		// each expected one is found among them.
		all := append(frames, passed, arp)
		var recs []CaptureRecord
		for range all {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			r, err := c.Read()
			if err != nil {
				return fmt.Errorf("%d of %d frames captured: %w", len(recs), len(all), err)
			}
			recs = append(recs, r)
		}
		used := make([]bool, len(recs))
		for i, f := range all {
			want := m.Process(f)
			k := slices.IndexFunc(recs, func(r CaptureRecord) bool { return bytes.Equal(r.Frame, want.Out) })
			for k >= 0 && used[k] {
				next := slices.IndexFunc(recs[k+1:], func(r CaptureRecord) bool { return bytes.Equal(r.Frame, want.Out) })
				if next < 0 {
					k = -1
				} else {
					k += 1 + next
				}
			}
			if k < 0 {
				return fmt.Errorf("frame %d: not captured as the model sends it: %s %s", i, CounterNames()[want.Reason], hex.EncodeToString(want.Out))
			}
			used[k] = true
			r := recs[k]
			if r.Action != want.Verdict || !bytes.Equal(r.Frame, want.Out) || r.Len != len(want.Out) {
				return fmt.Errorf("frame %d: captured %s %d bytes %s\n want %s %s", i, CounterNames()[r.Reason], r.Action,
					hex.EncodeToString(r.Frame), CounterNames()[want.Reason], hex.EncodeToString(want.Out))
			}
			if want.Verdict == model.XDPTX && (r.Reason != abi.CEncapsulated || r.Table != slotOf[want.Table] || r.Row != want.Row) {
				return fmt.Errorf("frame %d: captured as %s, table slot %d row %#x; want encapsulated, slot %d row %#x", i,
					CounterNames()[r.Reason], r.Table, r.Row, slotOf[want.Table], want.Row)
			}
			if want.Verdict == model.XDPPass && (r.Reason != want.Reason || r.Table != -1) {
				return fmt.Errorf("frame %d: passed as %s, want %s", i, CounterNames()[r.Reason], CounterNames()[want.Reason])
			}
			if r.Time.Before(time.Now().Add(-time.Minute)) || r.Time.After(time.Now().Add(time.Second)) {
				return fmt.Errorf("frame %d: captured at %v", i, r.Time)
			}
		}
		if loss, err := c.Close(); err != nil || loss.Total() != 0 {
			return fmt.Errorf("closing: %+v, %v", loss, err)
		}
		if err := hookOff(d); err != nil {
			return err
		}

		// Prefilters, in the kernel: passed frames only; one table's; one
		// backend's.
		first := m.Process(frames[0])
		primary := first.HopList[0]
		for _, f := range []struct {
			name   string
			filter CaptureFilter
			keep   func(model.Result) bool
		}{
			{"pass", CaptureFilter{Actions: []int{model.XDPPass}, Table: -1}, func(r model.Result) bool { return r.Verdict == model.XDPPass }},
			{"table", CaptureFilter{Table: slotOf[first.Table]}, func(r model.Result) bool { return r.Verdict == model.XDPTX && r.Table == first.Table }},
			{"backend", CaptureFilter{Table: -1, Backend: primary}, func(r model.Result) bool { return r.Verdict == model.XDPTX && r.HopList[0] == primary }},
		} {
			c, err := d.Capture(f.filter)
			if err != nil {
				return err
			}
			want := 0
			for _, fr := range append(frames, passed, arp) {
				if f.keep(m.Process(fr)) {
					want++
				}
			}
			if err := send(append(frames, passed, arp)...); err != nil {
				return err
			}
			got := drain(c)
			c.Close()
			if got != want || want == 0 {
				return fmt.Errorf("%s prefilter: %d frames captured, want %d", f.name, got, want)
			}
		}

		// The rate cap: what it refuses is counted.
		c, err = d.Capture(CaptureFilter{Table: -1, Rate: 5})
		if err != nil {
			return err
		}
		sent := time.Now()
		if err := send(frames...); err != nil {
			return err
		}
		// Each CPU keeps 5 a one-second window: more windows where the
		// sending took longer (a slow guest).
		windows := int(time.Since(sent)/time.Second) + 1
		got := drain(c)
		loss, err := c.Close()
		if err != nil || got == 0 || got > 5*cpus()*windows || uint64(got)+loss.RateCapped != uint64(len(frames)) {
			return fmt.Errorf("rate 5: %d captured, loss %+v (%v) of %d", got, loss, err, len(frames))
		}

		// A frame the program fails on is captured too, with its error: a
		// director whose config says it is not configured passes a
		// steered frame untouched.
		var cfgNow abi.Config
		if err := d.Maps.Config.Lookup(uint32(0), &cfgNow); err != nil {
			return err
		}
		unconfigured := cfgNow
		unconfigured.Configured = 0
		if err := d.Maps.Config.Put(uint32(0), &unconfigured); err != nil {
			return err
		}
		c, err = d.Capture(CaptureFilter{Table: -1})
		if err != nil {
			return err
		}
		sendErr := send(frames[0])
		c.SetDeadline(time.Now().Add(2 * time.Second))
		r, readErr := c.Read()
		c.Close()
		if err := d.Maps.Config.Put(uint32(0), &cfgNow); err != nil {
			return err
		}
		if sendErr != nil || readErr != nil {
			return fmt.Errorf("an error pass: %v, %v", sendErr, readErr)
		}
		if r.Action != model.XDPPass || r.Reason != abi.CErrNoConfig || !bytes.Equal(r.Frame, frames[0]) {
			return fmt.Errorf("an error pass: captured %s %d bytes %x, want %s untouched", CounterNames()[r.Reason], r.Action, r.Frame, CounterNames()[abi.CErrNoConfig])
		}

		// A capture whose process goes without closing it: the program
		// turns the hook off at the next frame.
		c, err = d.Capture(CaptureFilter{Table: -1})
		if err != nil {
			return err
		}
		c.release() // what the process's exit does: its reader and lock are gone, the filter stays
		if on, err := captureOn(d); err != nil || !on {
			return fmt.Errorf("the filter should still be on: %v", err)
		}
		if err := send(frames[:2]...); err != nil {
			return err
		}
		if err := untilHookOff(d, time.Now().Add(2*time.Second), 10*time.Millisecond, nil); err != nil {
			return fmt.Errorf("the hook stayed on after its capture's process went: %w", err)
		}

		// A running capture renews its lease every second.
		c, err = d.Capture(CaptureFilter{Table: 7})
		if err != nil {
			return err
		}
		var taken, renewed abi.Capture
		d.Maps.Capture.Lookup(uint32(0), &taken)
		// The lease counts in units of 1.07 s: two renewals are at least one apart.
		time.Sleep(2300 * time.Millisecond)
		d.Maps.Capture.Lookup(uint32(0), &renewed)
		c.Close()
		if renewed.On <= taken.On {
			return fmt.Errorf("the lease was not renewed: %d, then %d", taken.On, renewed.On)
		}

		// One whose filter takes none of the frames that come: the lease,
		// no longer renewed, runs out, and the next frame turns it off.
		c, err = d.Capture(CaptureFilter{Table: 7})
		if err != nil {
			return err
		}
		start := time.Now()
		c.release()
		deadline := start.Add(time.Duration(abi.CaptureLease+2) << abi.CaptureLeaseShift)
		if err := untilHookOff(d, deadline, 50*time.Millisecond, func() error { return send(frames[:1]...) }); err != nil {
			return fmt.Errorf("the hook stayed on after its capture's process went, no frame matching its filter: %w", err)
		}
		if took := time.Since(start); took < time.Duration(abi.CaptureLease-1)<<abi.CaptureLeaseShift {
			return fmt.Errorf("the hook went off %v after its capture started: before the lease ended", took)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// drain reads c until 300 ms pass without a frame, and counts them.
func drain(c *Capture) int {
	n := 0
	for {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Read(); err != nil {
			return n
		}
		n++
	}
}

// untilHookOff waits for the capture hook to go off by deadline, looking
// every period, after tick (if any) each time.
func untilHookOff(d *Director, deadline time.Time, every time.Duration, tick func() error) error {
	for {
		if tick != nil {
			if err := tick(); err != nil {
				return err
			}
		}
		on, err := captureOn(d)
		if err != nil || !on {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("still on at the deadline")
		}
		time.Sleep(every)
	}
}

func captureOn(d *Director) (bool, error) {
	var v abi.Capture
	err := d.Maps.Capture.Lookup(uint32(0), &v)
	return v.On != 0, err
}

// hookOff checks the capture left nothing behind: the hook is off.
func hookOff(d *Director) error {
	on, err := captureOn(d)
	if err != nil {
		return err
	}
	if on {
		return errors.New("the capture hook is still on")
	}
	return nil
}

func cpus() int {
	n, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 64
	}
	var lo, hi int
	if _, err := fmt.Sscanf(string(n), "%d-%d", &lo, &hi); err == nil {
		return hi + 1
	}
	return 1
}
