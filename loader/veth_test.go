package loader

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// isGUE reports whether a frame is IPv4/UDP to GLB's GUE port.
func isGUE(f []byte) bool {
	return len(f) > 14+28 && f[12] == 0x08 && f[13] == 0 && f[14+9] == 17 && f[14+22] == 0x4c && f[14+23] == 0x43
}

// isTooBig reports whether a frame is an ICMP fragmentation-needed or an
// ICMPv6 packet-too-big.
func isTooBig(f []byte) bool {
	return len(f) > 14+48 && (f[12] == 0x08 && f[13] == 0 && f[14+9] == 1 && f[14+20] == 3 && f[14+21] == 4 ||
		f[12] == 0x86 && f[13] == 0xdd && f[14+6] == 58 && f[14+40] == 2)
}

// drainGUE takes the GUE frames sock has already, and counts them.
func drainGUE(sock *testrun.Socket) int {
	n := 0
	for {
		if _, err := sock.Recv(200*time.Millisecond, isGUE); err != nil {
			return n
		}
		n++
	}
}

// TestVethSteering attaches the director to one end of a veth pair in a
// private namespace, in native and in generic mode, sends real frames from
// the other end and captures what the program sends back with XDP_TX.
func TestVethSteering(t *testing.T) {
	testenv.Kernel(t)
	for _, mode := range []string{ModeNative, ModeGeneric} {
		t.Run(mode, func(t *testing.T) {
			dir := testDir(t)
			err := testrun.InNetns(func() error { return vethSteering(dir, mode) })
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func vethSteering(dir, mode string) error {
	if err := testrun.Veth("dir0", "peer0"); err != nil {
		return err
	}
	d, m, err := loadServingTest(dir)
	if err != nil {
		return err
	}
	defer d.Close()

	a, err := d.Attach("dir0", mode)
	if err != nil {
		return err
	}
	if a.Mode != mode {
		return fmt.Errorf("attached in %s mode, asked for %s", a.Mode, mode)
	}
	if again, err := d.Attach("dir0", mode); err != nil || again.LinkID != a.LinkID {
		return fmt.Errorf("attaching twice: %v (link %d, then %d)", err, a.LinkID, again.LinkID)
	}
	if mode == ModeNative {
		// XDP_TX'd frames reach the peer only if it runs NAPI: give it a
		// program that passes everything.
		detach, err := testrun.AttachPassAll("peer0", link.XDPDriverMode)
		if err != nil {
			return err
		}
		defer detach()
	}

	sock, err := testrun.Listen("peer0")
	if err != nil {
		return err
	}
	defer sock.Close()
	g := &gen{rng: rngFor(7)}
	m.DeviceMTU = 1500 // a veth's: large frames are answered too big
	sent, tooBig, encapBig := 0, 0, 0
	for i := 0; i < 200; i++ {
		frame := pkt.Frame(g.steeredIP())
		if len(frame) > 14+1500 {
			continue // the peer cannot send it
		}
		want := m.Process(frame)
		if want.Verdict != model.XDPTX {
			return fmt.Errorf("generated frame %x is not steered", frame)
		}
		if err := sock.Send(frame); err != nil {
			return err
		}
		if want.TooBig == abi.CICMPTooBig {
			got, err := sock.Recv(2*time.Second, isTooBig)
			if err != nil {
				return fmt.Errorf("frame %d (%d bytes): no too-big reply came back: %w", i, len(frame), err)
			}
			if !bytes.Equal(got, want.Out) {
				return fmt.Errorf("frame %d's reply:\n got  %s\n want %s", i, hex.EncodeToString(got), hex.EncodeToString(want.Out))
			}
			tooBig++
			continue
		}
		if want.TooBig == abi.CTooBigEncap {
			// Encapsulated all the same (no DF): over the veth's MTU,
			// so it does not arrive.
			encapBig++
			continue
		}
		got, err := sock.Recv(2*time.Second, isGUE)
		if err != nil {
			return fmt.Errorf("frame %d: no GUE packet came back: %w", i, err)
		}
		if !bytes.Equal(got, want.Out) {
			return fmt.Errorf("frame %d:\n got  %s\n want %s", i, hex.EncodeToString(got), hex.EncodeToString(want.Out))
		}
		// The outer destination is the primary the table names for the
		// client: check it from the table, independently of the model.
		tab := m.Tables[want.Table]
		client := clientOf(frame)
		_, p, _ := tab.Lookup(flowHashOf(tab, client))
		if dst := fmt.Sprintf("%d.%d.%d.%d", got[30], got[31], got[32], got[33]); dst != p.IP.String() {
			return fmt.Errorf("frame %d: sent to %s, table says %s", i, dst, p.IP)
		}
		sent++
	}
	// GUE frames not yet taken, which the checks below would take for
	// theirs: the ones over the veth's MTU, where a kernel's veth carries
	// them all the same.
	if late := drainGUE(sock); late > 0 {
		log.Printf("vethSteering: %d GUE frames not taken above (%d were sent over the veth's MTU)", late, encapBig)
	}
	// The control plane goes away: every handle is closed. The pinned link
	// keeps the program attached, and a new handle adopts it all.
	d.Close()
	d, err = Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	atts, err := d.Attachments()
	if err != nil || len(atts) != 1 || atts[0].Interface != "dir0" || atts[0].Mode != mode {
		return fmt.Errorf("attachments: %+v, %v", atts, err)
	}
	if err := sock.Send(pkt.Frame(g.steeredIP())); err != nil {
		return err
	}
	if _, err := sock.Recv(2*time.Second, isGUE); err != nil {
		return fmt.Errorf("after the control plane closed, frames are no longer steered: %w", err)
	}
	sent++
	st, err := d.Stats()
	if err != nil {
		return err
	}
	if st.Global["encapsulated"] < uint64(sent+encapBig) || st.Global["too_big_encapsulated"] != uint64(encapBig) {
		return fmt.Errorf("too_big_encapsulated %d after %d such frames", st.Global["too_big_encapsulated"], encapBig)
	}
	if st.Global["encapsulated"] < uint64(sent) {
		return fmt.Errorf("encapsulated counter %d after %d frames", st.Global["encapsulated"], sent)
	}
	if tooBig == 0 || st.Global["icmp_too_big"] != uint64(tooBig) {
		return fmt.Errorf("%d frames too big for the veth's MTU, icmp_too_big %d", tooBig, st.Global["icmp_too_big"])
	}

	// Detached, the interface no longer bounces anything back.
	if err := d.Detach("dir0"); err != nil {
		return err
	}
	if err := d.Detach("dir0"); !errors.Is(err, ErrNotAttached) {
		return fmt.Errorf("second detach: %v, want an error that it is not attached", err)
	}
	if err := sock.Send(pkt.Frame(g.steeredIP())); err != nil {
		return err
	}
	if _, err := sock.Recv(300*time.Millisecond, isGUE); !errors.Is(err, testrun.ErrTimeout) {
		return fmt.Errorf("after detach a GUE packet still came back (%v)", err)
	}
	return nil
}
