package testbed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
)

// The NIC tests run the director and the backend programs native in a
// real driver's XDP: the testbed on virtio-net NICs (Options.NICs), which the
// guests of 'make test-kernels' have (internal/lab/vmtest, nics.go). 'make
// test' leaves them to the guests: the host has no NICs to give them.

// nicBed is a testbed of three backends on the NICs given, serving them.
func nicBed(t *testing.T, nics []string) *Testbed {
	t.Helper()
	tb, err := New(Options{Backends: 3, NICs: nics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	apply(t, tb, BackendConfig(nil, nil, 3))
	return tb
}

// TestNICs: steering, second chance, capture, stats, and attaching and
// detaching under traffic, all native on virtio-net.
func TestNICs(t *testing.T) {
	nics := testenv.NICs(t, 6)
	tb := nicBed(t, nics)
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var atts []loader.Attachment
	tb.Director.Do(func() (err error) { atts, err = d.Attachments(); return })
	if len(atts) != 1 || atts[0].Mode != loader.ModeNative || atts[0].State != loader.StateAttached {
		t.Fatalf("the director's attachment: %+v", atts)
	}

	t.Run("steering", func(t *testing.T) {
		if got := spread(t, tb, 45); len(got) != 3 || got["backend1"] < 5 || got["backend2"] < 5 || got["backend3"] < 5 {
			t.Fatalf("45 connections spread as %v", got)
		}
	})

	t.Run("second chance", func(t *testing.T) {
		sessions := started(t, tb, 0, 12)
		drained := Busiest(sessions)
		apply(t, tb, BackendConfig(map[int]string{BackendIndex(drained): "draining"}, nil, 3))
		time.Sleep(testenv.Scaled(time.Second))
		if got := spread(t, tb, 30); got[drained] != 0 {
			t.Errorf("new connections reach draining %s: %v", drained, got)
		}
		for _, s := range sessions {
			s.Stop()
			if ok, failed, err := s.Result(); failed != 0 || ok == 0 {
				t.Errorf("connection %d to %s: %d ok, %d failed: %v", s.ID, s.Backend, ok, failed, err)
			}
		}
		// Packets of the drained backend's connections went to their new
		// primary, whose program sent them on (XDP_TX in its driver).
		forwarded := 0
		for i := range tb.Backends {
			b, err := loader.OpenBackend(tb.BackendBPFFS(i + 1))
			if err != nil {
				t.Fatal(err)
			}
			c, err := b.Counters()
			b.Close()
			if err != nil {
				t.Fatal(err)
			}
			forwarded += int(c["forwarded"] + c["forwarded_stack"])
		}
		if forwarded == 0 {
			t.Error("no backend program forwarded a packet: second chance was not exercised")
		}
		apply(t, tb, BackendConfig(nil, nil, 3))
	})

	t.Run("capture", func(t *testing.T) {
		var out, errOut bytes.Buffer
		cmd := exec.Command(directorBinary(t), "capture", "--bpffs", tb.BPFFS, "-c", "5", "--action", "tx", "--interface", "eth0")
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := tb.Director.Do(cmd.Start); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.After(testenv.Scaled(20 * time.Second))
	traffic:
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("capture: %v: %s", err, errOut.String())
				}
				break traffic
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("capture saw no 5 packets: %s%s", out.String(), errOut.String())
			default:
				spread(t, tb, 3)
			}
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 5 {
			t.Fatalf("capture -c 5 printed %d lines:\n%s", len(lines), out.String())
		}
		for _, l := range lines {
			if !strings.Contains(l, " eth0 tx encapsulated table vip ") || !strings.Contains(l, "gue proto 4") {
				t.Errorf("captured: %s", l)
			}
		}
	})

	t.Run("stats", func(t *testing.T) {
		spread(t, tb, 9)
		var out bytes.Buffer
		cmd := exec.Command(directorBinary(t), "stats", "--json", "--bpffs", tb.BPFFS)
		cmd.Stdout = &out
		if err := tb.Director.Do(cmd.Run); err != nil {
			t.Fatal(err)
		}
		var st loader.Stats
		if err := json.Unmarshal(out.Bytes(), &st); err != nil {
			t.Fatal(err)
		}
		if st.Global["encapsulated"] == 0 || len(st.Tables) != 1 {
			t.Fatalf("stats: %s", out.String())
		}
		for _, b := range st.Tables[0].Backends {
			if b.Packets == 0 {
				t.Errorf("backend %s: no packets counted", b.IP)
			}
		}
		if len(st.Interfaces) != 1 {
			t.Fatalf("interfaces: %+v", st.Interfaces)
		}
		i := st.Interfaces[0]
		if i.Interface != "eth0" || i.Driver != "virtio_net" || i.RxPackets == 0 {
			t.Errorf("interface: %+v", i)
		}
		// virtio_net counts the frames XDP dropped and those XDP_TX could
		// not send, per queue: stats sums them.
		if _, ok := i.DriverDrops["rx_xdp_drops"]; !ok {
			t.Errorf("no rx_xdp_drops among virtio_net's drop counters: %v", i.DriverDrops)
		}
		if n := i.DriverDrops["tx_xdp_tx_drops"]; n != 0 {
			t.Errorf("virtio_net dropped %d XDP_TX frames", n)
		}
		t.Logf("eth0's driver drops: %v", i.DriverDrops)
	})

	t.Run("attach and detach under traffic", func(t *testing.T) {
		sessions := started(t, tb, 200, 9)
		pause := func() { time.Sleep(testenv.Scaled(300 * time.Millisecond)) }
		// The director: detached and attached again at once by the
		// commands (between, its packets go to its stack, which drops
		// them: the VIP is not its), switched to generic and back; each
		// time the connections carry on, TCP sending again what was lost,
		// within their exchanges' second.
		cli := func(want string, args ...string) error {
			cmd := exec.Command(directorBinary(t), append([]string{args[0], "--bpffs", tb.BPFFS}, args[1:]...)...)
			var out []byte
			err := tb.Director.Do(func() (err error) { out, err = cmd.CombinedOutput(); return })
			if err != nil || !strings.Contains(string(out), want) {
				return fmt.Errorf("director %s: %v: %s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		for _, step := range []func() error{
			func() error {
				if err := cli("detached from eth0", "detach", "eth0"); err != nil {
					return err
				}
				return cli("attached to eth0 in native mode", "attach", "eth0", "--mode", "native")
			},
			func() error { _, err := d.Attach("eth0", loader.ModeGeneric); return err },
			func() error { _, err := d.Attach("eth0", loader.ModeNative); return err },
		} {
			pause()
			if err := tb.Director.Do(step); err != nil {
				t.Fatal(err)
			}
		}
		// A backend: its program detached (GUE reaches its stack, which
		// has no tunnel for it) and attached again.
		b, err := loader.OpenBackend(tb.BackendBPFFS(1))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		pause()
		err = tb.Backends[0].Do(func() error {
			if err := b.Detach("eth0"); err != nil {
				return err
			}
			_, err := b.Attach("eth0", loader.ModeNative)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(testenv.Scaled(time.Second))
		for _, s := range sessions {
			s.Stop()
			ok, failed, err := s.Result()
			if failed != 0 || ok == 0 {
				t.Errorf("connection %d to %s: %d ok, %d failed: %v", s.ID, s.Backend, ok, failed, err)
			}
			t.Logf("connection %d to %s: longest gap %v", s.ID, s.Backend, s.MaxGap().Round(time.Millisecond))
		}
		if got := spread(t, tb, 15); len(got) != 3 {
			t.Errorf("after it all, 15 connections spread as %v", got)
		}
	})
}

// TestNICQueues: the director native on a virtio-net NIC of one queue
// pair, fewer than the CPUs, so XDP_TX has no queues of its own. A kernel
// whose virtio_net predates its locked mode refuses the attachment, and
// the error says why and what to do; the others (Debian 11's 5.10 among
// them) take it, say that XDP_TX shares the stack's queues under a lock,
// and steer.
func TestNICQueues(t *testing.T) {
	nics := testenv.NICs(t, 6)
	single := testenv.SingleQueueNIC(t)
	tb, err := New(Options{Backends: 3, NICs: []string{nics[0], nics[1], single, nics[3], nics[4], nics[5]}})
	advice := "has 1 queue pairs, 1 in use by the stack; XDP_TX wants"
	if err != nil {
		if !errors.Is(err, unix.ENOMEM) || !strings.Contains(err.Error(), advice) {
			t.Fatalf("attaching native to a single-queue virtio-net NIC: %v", err)
		}
		t.Logf("refused, as a virtio_net without the locked mode does: %v", err)
		return
	}
	t.Cleanup(func() {
		if err := tb.Close(); err != nil {
			t.Error(err)
		}
	})
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var a *loader.Attachment
	if err := tb.Director.Do(func() (err error) { a, err = d.Attach("eth0", loader.ModeNative); return }); err != nil {
		t.Fatal(err)
	}
	if len(a.Warnings) != 1 || !strings.Contains(a.Warnings[0], advice) {
		t.Errorf("attached with warnings %q, want one saying %q", a.Warnings, advice)
	}
	apply(t, tb, BackendConfig(nil, nil, 3))
	if got := spread(t, tb, 30); len(got) != 3 {
		t.Errorf("30 connections spread as %v", got)
	}
	t.Logf("attached, XDP_TX in the locked mode: %s", a.Warnings)
}
