package loader

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/loader/xdpbuild"
)

// bigFrames are frames around and beyond the first buffer BPF_PROG_RUN
// gives the program (model.FirstBuffer): jumbo frames from 3,400 to 9,000
// bytes and more, IPv4 and IPv6, TCP and UDP, tagged and not; frames whose
// headers straddle the first buffer's end; 64 KiB GRO frames, some too big
// to encapsulate.
func bigFrames() [][]byte {
	c4, c6 := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("2001:db8::7")
	v4, v6 := netip.MustParseAddr("10.20.0.1"), netip.MustParseAddr("fd00:20::1")
	v6r := netip.MustParseAddr("fd00:30::1234")
	var out [][]byte
	add := func(ip []byte, vlan int) {
		out = append(out, pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, vlan, pkt.EtherType(ip), ip))
	}
	sizes := []int{3400, 3450, 3480, 3490, 3500, 3505, 3506, 3510, 3519, 3520, 3521, 3530, 3534, 3538, 3600, 4095, 4096, 4097,
		5000, 7000, 7632, 7633, 8192, 8999, 9000, 11000, 16384, 32768}
	for _, size := range sizes {
		for vlan := 0; vlan <= 7; vlan += 7 {
			l2 := 14
			if vlan > 0 {
				l2 = 18
			}
			// Frame sizes, headers included.
			add(pkt.IPv4(c4, v4, 6, pkt.TCP(40000, 80, 0x10, make([]byte, size-l2-40)), pkt.V4Opts{}), vlan)
			add(pkt.IPv4(c4, v4, 17, pkt.UDP(40000, 1500, make([]byte, size-l2-28)), pkt.V4Opts{}), vlan)
			add(pkt.IPv6(c6, v6, 6, pkt.TCP(40000, 443, 0x10, make([]byte, size-l2-60))), vlan)
			add(pkt.IPv6(c6, v6r, 17, pkt.UDP(40000, 53, make([]byte, size-l2-48))), vlan)
			// A frame longer than the IP packet in it: padding after it.
			add(append(pkt.IPv4(c4, v4, 6, pkt.TCP(40000, 80, 0x10, make([]byte, 100)), pkt.V4Opts{}), make([]byte, size)...), vlan)
			// An IP length longer than the frame: malformed, however big.
			ip := pkt.IPv4(c4, v4, 6, pkt.TCP(40000, 80, 0x10, make([]byte, size-l2-40)), pkt.V4Opts{})
			out = append(out, pkt.Eth(pkt.DirectorMAC, pkt.ClientMAC, vlan, 0x0800, ip[:len(ip)-1]))
		}
	}
	// IPv6 extension headers that put the TCP header, or the ports, at
	// every place around the end of the first buffer: split, or not.
	for pad := model.FirstBuffer - 14 - 40 - 2048 - 30; pad < model.FirstBuffer-14-40-2048+10; pad++ {
		exts := []pkt.Ext{{Type: 60, Body: make([]byte, 2046)}, {Type: 0, Body: make([]byte, pad-2)}}
		ip := pkt.IPv6(c6, v6, 6, pkt.TCP(40000, 443, 0x10, make([]byte, 2000)), exts...)
		add(ip, 0)
		// The same headers with too short a packet behind them.
		short := pkt.IPv6(c6, v6, 6, pkt.TCP(40000, 443, 0x10, nil), exts...)
		add(append(short[:len(short)-10], make([]byte, 4000)...), 0)
	}
	// An ICMP packet-too-big whose quoted packet straddles the first
	// buffer, and a fragmentation-needed with IPv4 options doing the same.
	for pad := model.FirstBuffer - 14 - 40 - 8 - 2048 - 50; pad < model.FirstBuffer-14-40-8-2048+10; pad += 4 {
		quoted := pkt.IPv6(v6, c6, 6, pkt.TCP(443, 40000, 0x10, make([]byte, 64)))
		exts := []pkt.Ext{{Type: 60, Body: make([]byte, 2046)}, {Type: 0, Body: make([]byte, pad-2)}}
		add(pkt.IPv6(netip.MustParseAddr("2001:db8::1"), v6, 58, pkt.ICMP(2, 0, 1280, append(quoted, make([]byte, 2000)...)), exts...), 0)
	}
	// 64 KiB GRO frames: the largest that can be encapsulated, and larger.
	for _, tot := range []int{65000, 65487, 65488, 65535} {
		add(pkt.IPv4(c4, v4, 6, pkt.TCP(40000, 80, 0x10, make([]byte, tot-40)), pkt.V4Opts{}), 0)
		add(pkt.IPv4(c4, v4, 17, pkt.UDP(40000, 1500, make([]byte, tot-28)), pkt.V4Opts{}), 0)
		// A too-big packet to no VIP is too big all the same.
		add(pkt.IPv4(c4, netip.MustParseAddr("10.99.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, tot-40)), pkt.V4Opts{}), 0)
	}
	for _, plen := range []int{65000, 65447, 65448, 65535} {
		add(pkt.IPv6(c6, v6, 6, pkt.TCP(40000, 443, 0x10, make([]byte, plen-20))), 0)
	}
	return out
}

// TestMultiBufferFramesMatchModel runs frames larger than one buffer
// through the program (in BPF_PROG_RUN they arrive as multi-buffer XDP
// frames) and through the model: verdicts, reasons, bytes and counters
// must all agree. On a kernel without multi-buffer XDP (the single-buffer
// build), BPF_PROG_RUN refuses every frame over one buffer, as its drivers
// never deliver one in native mode: the frames that fit are compared, and
// the others must be refused so.
func TestMultiBufferFramesMatchModel(t *testing.T) {
	testenv.Kernel(t)
	// The kernel's lack, not the build's: a kernel that has multi-buffer
	// XDP runs them for a single-buffer program too (DIRECTOR_BUILD).
	noFrags := len(xdpbuild.Lacking()) > 0
	for _, alt := range []bool{false, true} {
		t.Run(fmt.Sprintf("alt=%v", alt), func(t *testing.T) {
			dc := directorConfig()
			if alt {
				dc.AltHashFields = dc.HashFields | 4
			}
			d, m := setup(t, dc)
			tl := &tally{tablePackets: map[int]uint64{}, backendPackets: map[string]uint64{}, exact: exactSet(m.Tables)}
			seen := map[string]int{}
			for i, f := range bigFrames() {
				if noFrags && len(f) > model.FirstBuffer {
					if _, _, err := testrun.Run(d.Prog, f); !errors.Is(err, unix.EMSGSIZE) && !errors.Is(err, unix.EINVAL) {
						t.Fatalf("frame %d (%d bytes): BPF_PROG_RUN of the single-buffer build: %v, want it refused", i, len(f), err)
					}
					seen["refused"]++
					continue
				}
				if diff := compare(d, m, f, tl); diff != "" {
					t.Fatalf("frame %d (%d bytes, %s...): %s", i, len(f), hex.EncodeToString(f[:80]), diff)
				}
				r := m.Process(f)
				if r.Verdict == model.XDPTX {
					seen["tx"]++
					if len(f) > model.FirstBuffer {
						seen["tx multi-buffer"]++
					}
				} else {
					seen[CounterNames()[r.Reason]]++
				}
			}
			checkCounters(t, d, tl)
			// Every case the frames are there for was met.
			cases := []string{"tx multi-buffer", "pass_headers_split", "pass_too_big", "pass_malformed", "pass_no_bind"}
			if noFrags {
				cases = []string{"refused", "pass_malformed"}
			}
			for _, k := range cases {
				if seen[k] == 0 {
					t.Errorf("no frame was %s: %v", k, seen)
				}
			}
			t.Logf("%v", seen)
		})
	}
}

// TestReplayerFramesBeyondAnyBuffer: a frame longer than the first buffer
// and every fragment together (no interface delivers it; BPF_PROG_RUN
// refuses it) is passed as too big, as the model says, rather than
// failing the replay.
func TestReplayerFramesBeyondAnyBuffer(t *testing.T) {
	r, m, small := replayerOnTestConfig(t)
	huge := append(append([]byte(nil), small...), make([]byte, model.MaxFrame)...)
	frames := [][]byte{small, huge, small[:model.MaxFrame%len(small)]}
	out := make([]testrun.Outcome, len(frames))
	if err := r.Run(frames, out); err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		want := m.Process(f)
		if int(out[i].Verdict) != want.Verdict || (want.Verdict == model.XDPPass && out[i].Reason != want.Reason) {
			t.Errorf("frame %d (%d bytes): kernel %d/%d, model %d/%d", i, len(f), out[i].Verdict, out[i].Reason, want.Verdict, want.Reason)
		}
	}
	if m.Process(huge).Reason != abi.CPassTooBig {
		t.Errorf("the model does not call a %d-byte frame too big", len(huge))
	}
}

// TestVethJumboFrames: on a veth pair with a 9,000-byte MTU (the program
// must be multi-buffer capable to attach natively at all), frames of up to
// 9,000 bytes are steered, and what comes back is what the model builds.
// On a kernel without multi-buffer XDP, native mode is refused, and the
// error says why and what to do; generic mode steers them.
func TestVethJumboFrames(t *testing.T) {
	testenv.Kernel(t)
	for _, mode := range []string{ModeNative, ModeGeneric} {
		t.Run(mode, func(t *testing.T) {
			dir := testDir(t)
			if err := testrun.InNetns(func() error { return vethJumbo(dir, mode) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func vethJumbo(dir, mode string) error {
	if err := testrun.Veth("dir0", "peer0"); err != nil {
		return err
	}
	// The encapsulated frame is 40 bytes longer than what came in.
	for _, n := range []string{"dir0", "peer0"} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetMTU(l, 9100); err != nil {
			return err
		}
	}
	d, m, err := loadServingTest(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	_, err = d.Attach("dir0", mode)
	if build, _ := xdpbuild.Current(); build == xdpbuild.SingleBuffer && mode == ModeNative {
		if err == nil || !strings.Contains(err.Error(), "dir0's MTU is 9100; lower it under about 3,500, or attach in generic mode") {
			return fmt.Errorf("native on a 9,100-byte MTU with the single-buffer build: %v, want it refused, saying why", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if mode == ModeNative {
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
	c4, c6 := netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("2001:db8::7")
	for _, size := range []int{1500, 3400, 3520, 3521, 4096, 6000, 9000, 9014} {
		for _, ip := range [][]byte{
			pkt.IPv4(c4, netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, make([]byte, size-14-40)), pkt.V4Opts{}),
			pkt.IPv6(c6, netip.MustParseAddr("fd00:20::1"), 6, pkt.TCP(40000, 443, 0x10, make([]byte, size-14-60))),
		} {
			frame := pkt.Frame(ip)
			want := m.Process(frame)
			if want.Verdict != model.XDPTX {
				return fmt.Errorf("%d-byte frame is not steered by the model", len(frame))
			}
			if err := sock.Send(frame); err != nil {
				return fmt.Errorf("sending %d bytes: %w", len(frame), err)
			}
			got, err := sock.Recv(2*time.Second, isGUE)
			if err != nil {
				return fmt.Errorf("%d-byte frame: no GUE packet came back: %w", len(frame), err)
			}
			if !bytes.Equal(got, want.Out) {
				return fmt.Errorf("%d-byte frame: %d bytes came back, want %d (or other bytes)", len(frame), len(got), len(want.Out))
			}
		}
	}
	return nil
}

// TestReplayerLeavesThreadsUnpinned: a replay's workers pin their threads
// to one CPU each; a thread handed back to the Go scheduler still pinned
// would keep the goroutines it runs next off the other CPUs.
func TestReplayerLeavesThreadsUnpinned(t *testing.T) {
	r, _, small := replayerOnTestConfig(t)
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, 4096)
	for i := range frames {
		frames[i] = small
	}
	if err := r.Run(frames, make([]testrun.Outcome, len(frames))); err != nil {
		t.Fatal(err)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); err != nil {
			continue // the thread has gone
		}
		if set != allowed {
			t.Errorf("thread %d may run on %d CPUs after a replay, the process on %d", tid, set.Count(), allowed.Count())
		}
	}
}

// replayerOnTestConfig loads testConfig into a private director and returns
// a replayer on it, the model of the same tables and one TCP frame to a bind.
func replayerOnTestConfig(t *testing.T) (*testrun.Replayer, *model.Datapath, []byte) {
	t.Helper()
	testenv.Kernel(t)
	dc := directorConfig()
	tabs := testTables(t, testConfig)
	d, err := Private(&dc, tabs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r, err := testrun.NewReplayer(d.Prog, d.Maps.Counters)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	m := model.New(dc, pkt.GatewayMAC, tabs)
	small := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, nil), pkt.V4Opts{}))
	return r, m, small
}
