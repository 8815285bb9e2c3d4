package table

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/director/director/internal/lab/golden"
)

// The structs below transcribe GLB's packed C structs (cli/main.c);
// binary.Write lays Go structs out without padding, so they give an
// independent encoding of the format to compare WriteGLB against.
type glbHeader struct {
	Magic                                        [4]byte
	Version, NumTables, Entries, MaxBe, MaxBinds uint32
}

type glbBackendEntry struct {
	Family        uint32
	IP            [16]byte
	State, Health uint16
}

type glbBindEntry struct {
	Family                   uint32
	IP                       [16]byte
	Bits, PortStart, PortEnd uint16
	Proto, Reserved          uint8
}

type glbRowEntry struct{ Primary, Secondary uint32 }

// glbEncode writes what GLB's build-config writes for a config, with rows
// from glbRow (GLB's rule over the reference SipHash).
func glbEncode(t *testing.T, c *Config) []byte {
	var buf bytes.Buffer
	le := binary.LittleEndian
	w := func(v any) {
		if err := binary.Write(&buf, le, v); err != nil {
			t.Fatal(err)
		}
	}
	w(glbHeader{[4]byte{'G', 'L', 'B', 'D'}, 2, uint32(len(c.Tables)), 65536, 256, 256})
	addr := func(a netip.Addr) (uint32, [16]byte) {
		var ip [16]byte
		if a.Is4() {
			v := a.As4()
			copy(ip[:], v[:])
			return 1, ip
		}
		return 2, a.As16()
	}
	for _, tc := range c.Tables {
		w(uint32(len(tc.Backends)))
		bes := make([]glbBackendEntry, 256)
		for i, b := range tc.Backends {
			f, ip := addr(b.IP)
			st := map[State]uint16{StateFilling: 0, StateActive: 1, StateDraining: 2, StateInactive: 2}[b.State]
			var h uint16
			if b.Healthy {
				h = 1
			}
			bes[i] = glbBackendEntry{f, ip, st, h}
		}
		w(bes)
		w(uint32(len(tc.Binds)))
		bis := make([]glbBindEntry, 256)
		for i, b := range tc.Binds {
			f, ip := addr(b.Prefix.Addr())
			bis[i] = glbBindEntry{f, ip, uint16(b.Prefix.Bits()), b.PortStart, b.PortEnd, uint8(b.Proto), 0}
		}
		w(bis)
		w(tc.HashKey)
		rows := make([]glbRowEntry, Rows)
		for r := range rows {
			row := glbRow(tc.Seed, uint32(r), tc.Backends)
			rows[r] = glbRowEntry{row.Primary, row.Secondary}
		}
		w(rows)
	}
	return buf.Bytes()
}

// glbCompatConfig keeps GLB's invariant (at most one backend not active and
// healthy) and uses every field shape: IPv4 and IPv6 backends and binds,
// prefixes, port ranges, an inactive backend, several tables.
const glbCompatConfig = `{"tables": [
 {"hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80},
            {"ip": "10.10.20.0/24", "proto": "udp", "port_start": 1000, "port_end": 2000},
            {"ip": "fdb4:98ce:52d4::42", "proto": "tcp", "port": 443},
            {"ip": "fdb4:98ce:52d4::/48", "proto": "udp", "port": 53}],
  "backends": [{"ip": "192.168.50.10", "state": "active", "healthy": true},
               {"ip": "192.168.50.11", "state": "active", "healthy": true},
               {"ip": "fd00::12", "state": "active", "healthy": true},
               {"ip": "192.168.50.13", "state": "draining", "healthy": true},
               {"ip": "192.168.50.14", "state": "active", "healthy": true}]},
 {"hash_key": "abcdefabcdefabcdefabcdefabcdef01", "seed": "0f0e0d0c0b0a09080706050403020100",
  "binds": [{"ip": "10.10.30.1", "proto": "tcp", "port": 22}],
  "backends": [{"ip": "192.168.60.1", "state": "active", "healthy": true},
               {"ip": "192.168.60.2", "state": "active", "healthy": false},
               {"ip": "192.168.60.3", "state": "active", "healthy": true}]},
 {"hash_key": "00000000000000000000000000000001", "seed": "ffffffffffffffffffffffffffffffff",
  "binds": [{"ip": "10.10.40.1", "proto": "tcp", "port": 8080}],
  "backends": [{"ip": "192.168.70.1", "state": "inactive", "healthy": true},
               {"ip": "192.168.70.2", "state": "active", "healthy": true},
               {"ip": "192.168.70.3", "state": "filling", "healthy": true}]}
]}`

func TestWriteGLBIsByteIdentical(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]byte(glbCompatConfig))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteGLB(&got, tabs); err != nil {
		t.Fatal(err)
	}
	want := glbEncode(t, c)
	if len(got.Bytes()) != len(want) {
		t.Fatalf("wrote %d bytes, GLB writes %d", got.Len(), len(want))
	}
	if i := firstDiff(got.Bytes(), want); i >= 0 {
		t.Fatalf("first difference at byte %d: %x, GLB %x", i, got.Bytes()[i], want[i])
	}

	// And a golden digest, so a change to both encoders at once still shows.
	sum := sha256.Sum256(got.Bytes())
	golden.Check(t, "glb-compat.bin.sha256", []byte(hex.EncodeToString(sum[:])+"\n"))
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return i
		}
	}
	if len(b) > len(a) {
		return len(a)
	}
	return -1
}

func TestReadGLBRoundTrip(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]byte(glbCompatConfig))
	if err != nil {
		t.Fatal(err)
	}
	tabs, _ := BuildAll(c)
	path := filepath.Join(t.TempDir(), "table.bin")
	if err := WriteGLBFile(path, tabs); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !IsGLBBinary(data) {
		t.Fatal("what WriteGLBFile wrote is not a GLB binary")
	}
	back, err := ReadGLB(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(tabs) {
		t.Fatalf("read back %d tables", len(back))
	}
	for i, got := range back {
		want := tabs[i]
		if Fingerprint(got) != Fingerprint(want) || got.HashKey != want.HashKey {
			t.Errorf("table %d: fingerprint or key differs after round trip", i)
		}
		if len(got.Binds) != len(want.Binds) {
			t.Fatalf("table %d: %d binds, want %d", i, len(got.Binds), len(want.Binds))
		}
		for j := range want.Binds {
			if got.Binds[j] != want.Binds[j] {
				t.Errorf("table %d bind %d: %v, want %v", i, j, got.Binds[j], want.Binds[j])
			}
		}
		for j, b := range want.Backends {
			g := got.Backends[j]
			if g.IP != b.IP || g.Healthy != b.Healthy || !g.State.SameAs(b.State) {
				t.Errorf("table %d backend %d: %+v, want %+v", i, j, g, b)
			}
		}
		if d := Compare([]*Table{want}, []*Table{got}); d.Changed {
			t.Errorf("table %d: diff against its own binary reports changes: %+v", i, d.Tables[0])
		}
	}
}

func TestReadGLBRejectsCorruption(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tabs, _ := BuildAll(c)
	var buf bytes.Buffer
	WriteGLB(&buf, tabs[:1])
	good := buf.Bytes()
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	rowOff := GLBHeaderSize + 4 + MaxBackends*glbBackendSize + 4 + MaxBinds*glbBindSize + 16
	for name, data := range map[string][]byte{
		"empty":       {},
		"magic":       mod(func(b []byte) []byte { b[0] = 'X'; return b }),
		"version":     mod(func(b []byte) []byte { b[4] = 3; return b }),
		"truncated":   good[:len(good)-1],
		"extra":       append(append([]byte(nil), good...), 0),
		"table count": mod(func(b []byte) []byte { b[8] = 2; return b }),
		"row index":   mod(func(b []byte) []byte { b[rowOff] = 200; return b }),
		"family":      mod(func(b []byte) []byte { b[GLBHeaderSize+4] = 9; return b }),
		"state":       mod(func(b []byte) []byte { b[GLBHeaderSize+4+20] = 7; return b }),
		"no backends": mod(func(b []byte) []byte { b[GLBHeaderSize] = 0; return b }),
	} {
		if _, err := ReadGLB(data); err == nil {
			t.Errorf("%s: corrupt table accepted", name)
		}
	}
	if _, err := ReadGLB(good); err != nil {
		t.Fatalf("good table rejected: %v", err)
	}
}

func FuzzReadGLB(f *testing.F) {
	c, _ := parseConfig([]byte(glbCompatConfig))
	tabs, _ := BuildAll(c)
	var buf bytes.Buffer
	WriteGLB(&buf, tabs[1:2])
	f.Add(buf.Bytes()[:4096])
	f.Fuzz(func(t *testing.T, data []byte) {
		ReadGLB(data) // must not panic
	})
}

// TestReadGLBAppliesConfigRules: what a JSON config may not contain, a
// binary may not either; each error names the table, the entry and its
// byte offset.
func TestReadGLBAppliesConfigRules(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tabs, _ := BuildAll(c)
	var buf bytes.Buffer
	WriteGLB(&buf, tabs[:2])
	good := buf.Bytes()
	le := binary.LittleEndian
	mod := func(f func(b []byte)) []byte { b := append([]byte(nil), good...); f(b); return b }
	be := func(ti, i int) int { return GLBHeaderSize + ti*GLBTableSize + 4 + i*glbBackendSize }
	bindCount := func(ti int) int { return GLBHeaderSize + ti*GLBTableSize + 4 + MaxBackends*glbBackendSize }
	bi := func(ti, i int) int { return bindCount(ti) + 4 + i*glbBindSize }
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"duplicate backend", mod(func(b []byte) { copy(b[be(0, 1):be(0, 1)+20], b[be(0, 0):be(0, 0)+20]) }),
			fmt.Sprintf("tables[0].backends[1] (byte %d): address %s is also backends[0]", be(0, 1), tabs[0].Backends[0].IP)},
		{"ports reversed", mod(func(b []byte) { le.PutUint16(b[bi(1, 0)+22:], 9000); le.PutUint16(b[bi(1, 0)+24:], 8000) }),
			fmt.Sprintf("tables[1].binds[0] (byte %d): port_start 9000 is greater than port_end 8000", bi(1, 0)+22)},
		{"no binds", mod(func(b []byte) { le.PutUint32(b[bindCount(0):], 0) }),
			fmt.Sprintf("tables[0].binds (byte %d): bind count 0: a table needs at least one bind", bindCount(0))},
		{"duplicate bind", mod(func(b []byte) { copy(b[bi(0, 1):bi(0, 1)+glbBindSize], b[bi(0, 0):bi(0, 0)+glbBindSize]) }),
			fmt.Sprintf("tables[0].binds[1] (byte %d): same bind as binds[0]", bi(0, 1))},
		{"binds of two tables overlap", mod(func(b []byte) { copy(b[bi(1, 0):bi(1, 0)+glbBindSize], b[bi(0, 0):bi(0, 0)+glbBindSize]) }),
			"tables[1].binds[0]: " + tabs[0].Binds[0].String() + " overlaps tables[0].binds[0]"},
	} {
		if len(tabs[0].Binds) < 2 || len(tabs[0].Backends) < 2 {
			t.Fatal("the example needs two binds and two backends in its first table")
		}
		_, err := ReadGLB(c.data)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestGLBBinaryJudgedAsJSON: a GLB binary whose rows all send new
// connections to its one unhealthy backend is judged as a built table
// would be: every row counts as having no good backend, and replacing a
// good table with it is unsafe.
func TestGLBBinaryJudgedAsJSON(t *testing.T) {
	t.Parallel()
	tc := &TableConfig{Name: "api", Binds: []Bind{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: 6, PortStart: 80, PortEnd: 80}},
		Backends: []Backend{{IP: netip.MustParseAddr("10.1.0.1"), State: StateActive, Healthy: false},
			{IP: netip.MustParseAddr("10.1.0.2"), State: StateActive, Healthy: true}}}
	good, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	if good.NoGoodRows != 0 {
		t.Fatalf("built: %d rows without a good primary", good.NoGoodRows)
	}
	bad := &Table{Name: "api", HashKey: good.HashKey, Binds: good.Binds, Backends: good.Backends, Rows: make([]Row, Rows)}
	for r := range bad.Rows {
		bad.Rows[r] = Row{Primary: 0, Secondary: 1}
	}
	var buf bytes.Buffer
	if err := WriteGLB(&buf, []*Table{bad}); err != nil {
		t.Fatal(err)
	}
	read, err := ReadGLB(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if read[0].NoGoodRows != Rows {
		t.Fatalf("read: no_good_rows %d, want %d", read[0].NoGoodRows, Rows)
	}
	if safe, reasons := Verdict(Compare([]*Table{good}, read)); safe || !strings.Contains(strings.Join(reasons, " "), "rows have no active healthy backend as primary") {
		t.Fatalf("verdict safe %v: %v", safe, reasons)
	}
}

// TestGLBWriterHoldsItsHeader: a GLB binary written a table at a time is
// the one WriteGLB writes, and a writer given fewer or more tables than
// its header says fails rather than leave a file that says otherwise.
func TestGLBWriterHoldsItsHeader(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]byte(glbCompatConfig))
	if err != nil {
		t.Fatal(err)
	}
	tabs, _ := BuildAll(c)
	var whole, each bytes.Buffer
	if err := WriteGLB(&whole, tabs); err != nil {
		t.Fatal(err)
	}
	gw := NewGLBWriter(&each, len(tabs))
	for _, tb := range tabs {
		if err := gw.Write(tb); err != nil {
			t.Fatal(err)
		}
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole.Bytes(), each.Bytes()) || each.Len() != GLBHeaderSize+len(tabs)*GLBTableSize {
		t.Errorf("a table at a time: %d bytes, WriteGLB's %d, differing", each.Len(), whole.Len())
	}
	short := NewGLBWriter(io.Discard, len(tabs)+1)
	for _, tb := range tabs {
		short.Write(tb)
	}
	if err := short.Close(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d tables written; the file's header says %d", len(tabs), len(tabs)+1)) {
		t.Errorf("closing a file short of its header: %v", err)
	}
	long := NewGLBWriter(io.Discard, 1)
	long.Write(tabs[0])
	if err := long.Write(tabs[0]); err == nil || !strings.Contains(err.Error(), "tables[1]: the file's header holds 1") {
		t.Errorf("a table past the header's count: %v", err)
	}
}
