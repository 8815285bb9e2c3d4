package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/vishvananda/netlink"
)

// TestLoadReplacesAnOlderProgram pins another program in the director's
// place and attaches it, as an older version would be, then loads: the new
// program must take over the attached interface through the same link (no
// moment without a program), and frames must be steered again.
func TestLoadReplacesAnOlderProgram(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("up0", "up1"); err != nil {
			return err
		}
		d, err := Load(dir)
		if err != nil {
			return err
		}
		dc := directorConfig()
		if _, err := d.applyChange(change{Tables: testTables(nil, testConfig), Config: &dc}, nil); err != nil {
			return err
		}
		// The "old version": a program that passes everything, pinned and
		// attached where the director's would be.
		old, err := testrun.PassAll()
		if err != nil {
			return err
		}
		defer old.Close()
		d.Close()
		if err := os.Remove(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		if err := old.Pin(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		a, err := attachPinned(dir, old, "up0", ModeGeneric)
		if err != nil {
			return err
		}
		oldInfo, _ := old.Info()
		oldID, _ := oldInfo.ID()
		if a.ProgramID != uint32(oldID) {
			return fmt.Errorf("attached program %d, want the old %d", a.ProgramID, oldID)
		}
		sock, err := testrun.Listen("up1")
		if err != nil {
			return err
		}
		defer sock.Close()
		g := &gen{rng: rngFor(3)}
		sock.Send(pkt.Frame(g.steeredIP()))
		if _, err := sock.Recv(300*time.Millisecond, isGUE); err == nil {
			return fmt.Errorf("the old program steered a frame")
		}

		// The new version is loaded.
		d, err = Load(dir)
		if err != nil {
			return err
		}
		defer d.Close()
		atts, err := d.Attachments()
		if err != nil || len(atts) != 1 {
			return fmt.Errorf("attachments %v, %v", atts, err)
		}
		newInfo, _ := d.Prog.Info()
		newID, _ := newInfo.ID()
		if atts[0].LinkID != a.LinkID || atts[0].ProgramID != uint32(newID) {
			return fmt.Errorf("after load: link %d program %d; want link %d program %d", atts[0].LinkID, atts[0].ProgramID, a.LinkID, newID)
		}
		if err := sock.Send(pkt.Frame(g.steeredIP())); err != nil {
			return err
		}
		if _, err := sock.Recv(2*time.Second, isGUE); err != nil {
			return fmt.Errorf("the new program does not steer: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoadBackendReplacesAnOlderProgram: the backend program takes the
// director's load path, so a new version reaches interfaces that are
// already attached, through the same link.
func TestLoadBackendReplacesAnOlderProgram(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("bu0", "bu1"); err != nil {
			return err
		}
		// The "old version", pinned and attached where the backend
		// program would be.
		old, err := testrun.PassAll()
		if err != nil {
			return err
		}
		defer old.Close()
		if err := ensureDir(dir); err != nil {
			return err
		}
		if err := old.Pin(filepath.Join(dir, pinProgram)); err != nil {
			return err
		}
		a, err := attachPinned(dir, old, "bu0", ModeGeneric)
		if err != nil {
			return err
		}
		b, err := LoadBackend(dir)
		if err != nil {
			return err
		}
		defer b.Close()
		atts, err := b.Attachments()
		if err != nil || len(atts) != 1 {
			return fmt.Errorf("attachments %v, %v", atts, err)
		}
		info, _ := b.Prog().Info()
		id, _ := info.ID()
		if atts[0].LinkID != a.LinkID || atts[0].ProgramID != uint32(id) || atts[0].State != StateAttached {
			return fmt.Errorf("after load: link %d program %d (%s); want link %d program %d", atts[0].LinkID, atts[0].ProgramID, atts[0].State, a.LinkID, id)
		}
		// Loading the same version again changes nothing.
		b2, err := LoadBackend(dir)
		if err != nil {
			return err
		}
		defer b2.Close()
		info2, _ := b2.Prog().Info()
		if id2, _ := info2.ID(); id2 != id {
			return fmt.Errorf("loading the same version again replaced program %d with %d", id, id2)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoadAdoptsAnOlderCaptureMap pins the capture setting as builds before
// the global pinned it (an ordinary array map named capture), then loads:
// the program must read that very map, so that a capture started through
// the pin reaches the datapath.
func TestLoadAdoptsAnOlderCaptureMap(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Name: bpf.CaptureMap, Type: ebpf.Array, KeySize: 4,
		ValueSize: uint32(binary.Size(abi.Capture{})), MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Pin(filepath.Join(dir, bpf.CaptureMap)); err != nil {
		t.Fatal(err)
	}
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info, _ := old.Info()
	oldID, _ := info.ID()
	progInfo, err := d.Prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := progInfo.MapIDs()
	if !slices.Contains(ids, oldID) {
		t.Fatalf("the program reads maps %v, not the pinned capture map %d", ids, oldID)
	}
}

// TestLoadRemakesCountersOfAnotherLayout: pins left by a build with fewer
// backend counters (and its program) are upgraded, the counters made
// again, rather than the load refused until an unload.
func TestLoadRemakesCountersOfAnotherLayout(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	b, err := LoadBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	stats := filepath.Join(dir, bpf.BackendMapBeStats)
	pinEarlierBuild(t, dir, stats, &ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8 * 11, MaxEntries: 1})
	b, err = LoadBackend(dir)
	if err != nil {
		t.Fatalf("load over counters of another layout: %v", err)
	}
	defer b.Close()
	if len(b.Repaired) != 1 || !strings.Contains(b.Repaired[0], "start again from zero") {
		t.Errorf("repaired: %q", b.Repaired)
	}
	m, err := ebpf.LoadPinnedMap(stats, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if want := uint32(8 * len(BackendCounterNames())); m.ValueSize() != want {
		t.Errorf("be_stats value size %d, want %d", m.ValueSize(), want)
	}
	if _, err := b.Counters(); err != nil {
		t.Errorf("counters: %v", err)
	}
}

// TestLoadRetiresExactAddressMaps: a backend loaded over an earlier
// build's pins (exact addresses in be_local, before prefixes, issue 46
// item 5) takes GUE for the host's local prefixes from its first packet,
// and the earlier build's map is unpinned.
func TestLoadRetiresExactAddressMaps(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	err := testrun.InNetns(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		netlink.LinkSetUp(lo)
		ad, _ := netlink.ParseAddr("10.86.0.0/24")
		if err := netlink.AddrAdd(lo, ad); err != nil {
			return err
		}
		b, err := LoadBackend(dir)
		if err != nil {
			return err
		}
		b.Close()
		old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 1, MaxEntries: 64})
		if err != nil {
			return err
		}
		defer old.Close()
		if err := old.Pin(filepath.Join(dir, "be_local")); err != nil {
			return err
		}
		b, err = LoadBackend(dir)
		if err != nil {
			return err
		}
		defer b.Close()
		if _, err := os.Stat(filepath.Join(dir, "be_local")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("be_local still pinned: %v", err)
		}
		if !slices.ContainsFunc(b.Repaired, func(s string) bool { return strings.Contains(s, "be_local: an earlier build's map, unpinned") }) {
			return fmt.Errorf("repaired: %q", b.Repaired)
		}
		acc, err := b.Accepted()
		if err != nil || !slices.Contains(acc, pf("10.86.0.0/24")) || slices.Contains(acc, pf("10.86.0.0/32")) {
			return fmt.Errorf("accepted at load: %v %v", acc, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoadGivesLiveTablesCounters: pins left by a build that kept every
// table's backend traffic in one per-CPU array (before the per-table
// inner maps, issue 49) are upgraded with tables live: the load remakes
// backend_traffic and gives each live table its counters at once, so that
// the next packet counts without waiting for an apply.
func TestLoadGivesLiveTablesCounters(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	d, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	dc := directorConfig()
	if _, err := d.applyChange(change{Tables: testTables(nil, testConfig), Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	d.Close()
	pinEarlierBuild(t, dir, filepath.Join(dir, bpf.DirectorMapBackendTraffic),
		&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: 64 * 256})
	d, err = Load(dir)
	if err != nil {
		t.Fatalf("load over a flat backend_traffic: %v", err)
	}
	defer d.Close()
	if !slices.ContainsFunc(d.Repaired, func(s string) bool { return strings.Contains(s, "backend_traffic: the counters") }) {
		t.Errorf("repaired: %q", d.Repaired)
	}
	g := &gen{rng: rngFor(5)}
	sent := 0
	for range 20 {
		v, _, err := testrun.Run(d.Prog, pkt.Frame(g.steeredIP()))
		if err != nil {
			t.Fatal(err)
		}
		if v == 3 { // XDP_TX
			sent++
		}
	}
	st, err := d.Stats()
	if err != nil {
		t.Fatal(err)
	}
	var counted uint64
	for _, ts := range st.Tables {
		counted += ts.Traffic.Packets
	}
	if sent == 0 || counted != uint64(sent) {
		t.Errorf("%d packets steered, %d counted by the live tables' backends", sent, counted)
	}
}

// pinEarlierBuild makes dir's pins an earlier build's: its program (one
// that passes everything and reads no maps stands in for it) and, at
// path, a map as that build laid it out (spec). Both stay pinned; the
// test's directory goes with them.
func pinEarlierBuild(t *testing.T, dir, path string, spec *ebpf.MapSpec) {
	t.Helper()
	old, err := testrun.PassAll()
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	for _, p := range []string{filepath.Join(dir, pinProgram), path} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Pin(filepath.Join(dir, pinProgram)); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Pin(path); err != nil {
		t.Fatal(err)
	}
}
