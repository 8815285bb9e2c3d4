package loader

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf"
	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/table"
)

// testDir gives a test its own pin directory under /sys/fs/bpf and
// unloads everything in it when the test ends, pass or fail.
func testDir(t testing.TB) string {
	t.Helper()
	testenv.Kernel(t)
	dir := testenv.PinDir("director-test")
	t.Cleanup(func() {
		if err := Unload(dir); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return dir
}

func loadTest(t testing.TB) *Director {
	t.Helper()
	d, err := Load(testDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestLoadIsIdempotent(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	d2, err := Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	i1, _ := d.Prog.Info()
	i2, _ := d2.Prog.Info()
	id1, _ := i1.ID()
	id2, _ := i2.ID()
	if id1 != id2 {
		t.Fatalf("second load replaced the program (%d -> %d)", id1, id2)
	}
	// Every pin is root-only.
	filepath.Walk(d.Dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
		return nil
	})
	o, err := Open(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
}

func TestSharedTypeSizes(t *testing.T) {
	// Sizes fixed by director.h; a change there must show up here.
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"dir_config", unsafe.Sizeof(abi.Config{}), 24 + 16 + 8},
		{"dir_backend", unsafe.Sizeof(abi.Backend{}), 24 + 64},
		{"dir_bind", unsafe.Sizeof(abi.Bind{}), 24},
		{"dir_row", unsafe.Sizeof(abi.Row{}), 2},
		{"dir_bind_key", unsafe.Sizeof(abi.BindKey{}), 24},
		{"dir_table", unsafe.Sizeof(abi.Table{}), 16 + 64 + 4 + 4 + 4 + 4 + 256*(24+64) + 256*24 + 256*4 + 8 + 256*16 + 65536*2},
		{"dir_counters", unsafe.Sizeof(abi.Counters{}), 8 * 32}, // DIR_C_SLOTS: room for counters to come
		{"dir_registry", unsafe.Sizeof(abi.Registry{}), 32 + 32},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, want %d", c.name, c.got, c.want)
		}
	}
	if abi.NumCounters != len(CounterNames()) {
		t.Errorf("%d counter names for %d counters", len(CounterNames()), abi.NumCounters)
	}
}

// Maps pinned by a build with another layout are not silently reused: load
// refuses and says how to start over.
func TestLoadRefusesIncompatiblePins(t *testing.T) {
	testenv.Kernel(t)
	dir := testDir(t)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	old, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 24 * 8192, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Pin(filepath.Join(dir, bpf.DirectorMapBindExact)); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	if err == nil || !strings.Contains(err.Error(), "director unload") || !errors.Is(err, ebpf.ErrMapIncompatible) {
		t.Fatalf("load over an incompatible pin: %v", err)
	}
}

// A config entry an older version wrote (no csum_base) is brought up to
// date when a new program is loaded over it, before it steers a packet.
func TestLoadRefreshesConfig(t *testing.T) {
	testenv.Kernel(t)
	d := loadTest(t)
	dc := directorConfig()
	if _, err := d.applyChange(change{Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	var v abi.Config
	if err := d.Maps.Config.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	want := v.CsumBase
	if want == 0 || want != csumBase(v.SrcIp) {
		t.Fatalf("the apply wrote csum_base %#x", want)
	}
	v.CsumBase = 0
	if err := d.Maps.Config.Put(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	d2, err := Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := d2.Maps.Config.Lookup(uint32(0), &v); err != nil {
		t.Fatal(err)
	}
	if v.CsumBase != want {
		t.Fatalf("after load, csum_base is %#x, want %#x", v.CsumBase, want)
	}
}

// TestLoadServing: what serve puts in the maps (while the program is
// verified) is what the program then steers by, and serve's error fails
// the load.
func TestLoadServing(t *testing.T) {
	testenv.Kernel(t)
	dc := directorConfig()
	tabs := testTables(t, testConfig)
	m := model.New(dc, pkt.GatewayMAC, tabs)
	frame := pkt.Frame(pkt.IPv4(netip.MustParseAddr("203.0.113.9"), netip.MustParseAddr("10.20.0.1"), 6, pkt.TCP(40000, 80, 0x10, nil), pkt.V4Opts{}))
	want := m.Process(frame)
	if want.Verdict != model.XDPTX {
		t.Fatal("the frame is not steered")
	}
	served := false
	d, err := LoadServing(func(d *Director) error {
		served = true
		return d.Serve(&dc, tabs)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !served || d.Prog == nil {
		t.Fatalf("served %v, program %v", served, d.Prog)
	}
	v, out, err := testrun.Run(d.Prog, frame)
	if err != nil || int(v) != model.XDPTX || !bytes.Equal(out, want.Out) {
		t.Fatalf("verdict %d (%v), output %x, want %x", v, err, out, want.Out)
	}

	refused := errors.New("refused")
	if d, err := LoadServing(func(*Director) error { return refused }); !errors.Is(err, refused) || d != nil {
		t.Fatalf("serve's error: %v, director %v", err, d)
	}
}

// TestLoadRepairsPins: a map pin removed underneath, or replaced by a new
// map, is seen: the tools that read refuse with the way out, and load pins
// the program's own maps again, so the live table is read back as it was.
func TestLoadRepairsPins(t *testing.T) {
	d := loadTest(t)
	dc := directorConfig()
	tabs := testTables(t, testConfig)
	if _, err := d.applyChange(change{Tables: tabs, Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	want := table.Fingerprint(tabs[0])
	liveFP := func(d *Director) string {
		t.Helper()
		live, err := d.Live()
		if err != nil {
			t.Fatal(err)
		}
		return table.Fingerprint(live[0].Table)
	}
	// Removed: what 'rm /sys/fs/bpf/DIR/tables' does.
	if err := os.Remove(filepath.Join(d.Dir, bpf.DirectorMapTables)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(d.Dir); err == nil || !strings.Contains(err.Error(), "tables is missing") ||
		!strings.Contains(err.Error(), "'director load --bpffs "+d.Dir+"' pins the program's own maps again") {
		t.Fatalf("open with a pin removed: %v", err)
	}
	d2, err := Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if len(d2.Repaired) != 1 || !strings.Contains(d2.Repaired[0], "tables, which was missing") || liveFP(d2) != want {
		t.Fatalf("load after a pin was removed: %v", d2.Repaired)
	}
	// Replaced by another map of the same kind: it would be adopted as is.
	path := filepath.Join(d.Dir, bpf.DirectorMapConfig)
	ms := d.spec.Maps[bpf.DirectorMapConfig].Copy()
	ms.Pinning = ebpf.PinNone
	other, err := ebpf.NewMap(ms)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	os.Remove(path)
	if err := other.Pin(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(d.Dir); err == nil || !strings.Contains(err.Error(), "which the program does not use") {
		t.Fatalf("open with a pin replaced: %v", err)
	}
	d3, err := Load(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	if len(d3.Repaired) != 1 || !strings.Contains(d3.Repaired[0], "config, which was map") {
		t.Fatalf("load after a pin was replaced: %v", d3.Repaired)
	}
	lc, err := d3.LiveConfig()
	if err != nil || lc == nil || lc.SrcIP != dc.SrcIP || liveFP(d3) != want {
		t.Fatalf("after the repair: config %+v, %v", lc, err)
	}
	if d4, err := Open(d.Dir); err != nil {
		t.Fatalf("open after the repairs: %v", err)
	} else {
		d4.Close()
	}
}

// TestLiveReadSeesOutsideWrites: a live read answers from the bytes it
// decoded last only while the kernel holds those very bytes: a row
// written underneath, or a registry digest, is read and decoded anew.
func TestLiveReadSeesOutsideWrites(t *testing.T) {
	testenv.Kernel(t)
	d, _ := setupWith(t, directorConfig(), testConfig)
	first, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	if again[0].Table != first[0].Table {
		t.Fatal("an unchanged slot was not answered from what was decoded")
	}
	slot := first[0].Slot
	inner, err := d.slotMap(slot)
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	dt := new(abi.Table)
	if err := inner.Lookup(uint32(0), dt); err != nil {
		t.Fatal(err)
	}
	was := dt.Rows[7]
	dt.Rows[7].Primary = dt.Rows[7].Secondary
	dt.Rows[7].Secondary = was.Primary
	if err := inner.Put(uint32(0), dt); err != nil {
		t.Fatal(err)
	}
	after, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	if r := after[0].Table.Rows[7]; int(r.Primary) != int(was.Secondary) || int(r.Secondary) != int(was.Primary) {
		t.Fatalf("row 7 written underneath read as %+v (was %+v)", r, was)
	}
	var reg abi.Registry
	if err := d.Maps.Registry.Lookup(uint32(slot), &reg); err != nil {
		t.Fatal(err)
	}
	// The registry still claims the fingerprint written with the table:
	// read as a claim, not as the table's fingerprint, which is its rows'.
	if got := after[0].Table.Claimed; got != hex.EncodeToString(reg.Fingerprint[:]) || got == "" {
		t.Fatalf("claimed fingerprint %q, the registry holds %x", got, reg.Fingerprint)
	}
	if table.Fingerprint(after[0].Table) == after[0].Table.Claimed {
		t.Fatal("a table whose row was written underneath has the fingerprint its registry claims")
	}
	reg.Digest[0] ^= 0xff
	if err := d.Maps.Registry.Put(uint32(slot), &reg); err != nil {
		t.Fatal(err)
	}
	tampered, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	if tampered[0].Table.Digest != reg.Digest {
		t.Fatal("a registry digest written underneath was not read")
	}
}

// TestDirectorsShareWhatTheyRead: two Directors of one process on one
// directory answer an unchanged slot with the same decoded table (a
// command that opens the pins twice decodes and fingerprints once), and
// unloading the directory forgets it.
func TestDirectorsShareWhatTheyRead(t *testing.T) {
	d := loadTest(t)
	dc := directorConfig()
	if _, err := d.applyChange(change{Tables: testTables(t, testConfig), Config: &dc}, nil); err != nil {
		t.Fatal(err)
	}
	first, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	o, err := Open(d.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	second, err := o.Live()
	if err != nil {
		t.Fatal(err)
	}
	if second[0].Table != first[0].Table {
		t.Fatal("a second Director decoded an unchanged slot again")
	}
	if err := Unload(d.Dir); err != nil {
		t.Fatal(err)
	}
	cachesMu.Lock()
	_, kept := caches[filepath.Clean(d.Dir)]
	cachesMu.Unlock()
	if kept {
		t.Error("an unloaded directory's tables are still held")
	}
}
