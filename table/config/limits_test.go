package config

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/director/director/table"
)

// manyTables is a config of n small tables, each with its own bind.
func manyTables(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"tables": [`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"hash_key": "%s", "seed": "%s", "binds": [{"ip": "10.%d.%d.1", "proto": "tcp", "port": 80}],
		  "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}, {"ip": "192.168.0.2", "state": "active", "healthy": true}]}`,
			testKey, testSeed, i/256, i%256)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// allocated runs f and returns how many bytes it allocated.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestTooManyTablesRefusedBeforeBuilding: a config or binary with more
// tables than its reader holds is refused before any table is built, so
// cheaply: in time and memory that do not grow with what would be built.
func TestTooManyTablesRefusedBeforeBuilding(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "many.json")
	if err := os.WriteFile(cfgPath, manyTables(2000), 0o600); err != nil {
		t.Fatal(err)
	}
	// A binary whose header claims 2000 tables: refused from the header.
	bin := make([]byte, table.GLBHeaderSize+table.GLBTableSize)
	copy(bin, "GLBD")
	le := binary.LittleEndian
	le.PutUint32(bin[4:], 2) // the version
	le.PutUint32(bin[8:], 2000)
	le.PutUint32(bin[12:], table.Rows)
	le.PutUint32(bin[16:], table.MaxBackends)
	le.PutUint32(bin[20:], table.MaxBinds)
	binPath := filepath.Join(dir, "many.bin")
	if err := os.WriteFile(binPath, bin, 0o600); err != nil {
		t.Fatal(err)
	}
	datapath := table.Limit{Tables: 32, Holder: "the datapath holds"}
	for _, c := range []struct {
		path string
		lim  table.Limit
		want string
	}{
		{cfgPath, table.ToolLimit, "tables: 2000 tables; the table tools read at most 1024"},
		{cfgPath, datapath, "tables: 2000 tables; the datapath holds at most 32"},
		{binPath, table.ToolLimit, "tables: 2000 tables; the table tools read at most 1024"},
		{binPath, datapath, "tables: 2000 tables; the datapath holds at most 32"},
	} {
		var err error
		start := time.Now()
		// The config's bytes and their parse tree are all it may cost:
		// 2000 built tables would be over a gigabyte.
		n := allocated(func() { _, err = LoadLimit(c.path, c.lim) })
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", filepath.Base(c.path), err, c.want)
		}
		if !strings.HasPrefix(err.Error(), c.path+": ") {
			t.Errorf("%s: error does not name the file: %v", filepath.Base(c.path), err)
		}
		if n > 64<<20 {
			t.Errorf("%s: refusing it allocated %d MB", filepath.Base(c.path), n>>20)
		}
		if took > time.Second {
			t.Errorf("%s: refusing it took %v", filepath.Base(c.path), took)
		}
	}
	// At the limit, it loads.
	os.WriteFile(cfgPath, manyTables(32), 0o600)
	if _, err := LoadLimit(cfgPath, datapath); err != nil {
		t.Fatalf("32 tables: %v", err)
	}
	// The table tools' limit admits its 1,024 (parsed, not built: build's
	// test builds them).
	many := manyTables(table.MaxTables)
	if _, err := ParseConfigSource(cfgPath, many, table.ToolLimit); err != nil {
		t.Fatalf("%d tables: %v", table.MaxTables, err)
	}
}

// TestOversizedConfigRefusedUnread: a config over its reader's bound
// (MaxJSONBytes: 16 MiB for the datapath's tables, 256 MiB for the table
// tools' 1,024) is refused by its size, before it is read, and so is one
// that never ends.
func TestOversizedConfigRefusedUnread(t *testing.T) {
	datapath := table.Limit{Tables: 32, Holder: "the datapath holds"}
	if got := MaxJSONBytes(datapath); got != 16<<20 {
		t.Errorf("a datapath reader's bound: %d bytes, want 16 MiB", got)
	}
	if got := MaxJSONBytes(table.ToolLimit); got != 256<<20 {
		t.Errorf("the table tools' bound: %d bytes, want 256 MiB", got)
	}
	path := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, c := range []struct {
		lim  table.Limit
		load func(string) error
	}{
		{table.ToolLimit, func(p string) error { _, err := Load(p); return err }},
		{table.ToolLimit, func(p string) error { _, err := ParseFile(p); return err }},
		{datapath, func(p string) error { _, err := LoadLimit(p, datapath); return err }},
	} {
		max := MaxJSONBytes(c.lim)
		if err := os.Truncate(path, int64(max)+1); err != nil {
			t.Fatal(err)
		}
		var err error
		n := allocated(func() { err = c.load(path) })
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes; a JSON config may be at most %d bytes (%d MiB)", max+1, max, max>>20)) {
			t.Errorf("oversized config for %d tables: %v", c.lim.Tables, err)
		}
		if n > 1<<20 {
			t.Errorf("refusing an oversized config allocated %d bytes", n)
		}
	}
	// apply also takes plans, which may be larger: a file over a plan's
	// limit is refused unread, one under it refused once read.
	os.Truncate(path, MaxConfigBytes+1)
	if _, err := ReadApplyInput(path, datapath); err == nil || !strings.Contains(err.Error(), "a JSON config may be at most") {
		t.Errorf("apply of an oversized config: %v", err)
	}
	os.Truncate(path, 100<<20)
	if _, err := ReadApplyInput(path, datapath); err == nil || !strings.Contains(err.Error(), "a plan may be at most") {
		t.Errorf("apply of a 100 MB config: %v", err)
	}
	// Not a regular file, so no size to go by: reading stops at the limit.
	if _, err := LoadLimit("/dev/zero", datapath); err == nil || !strings.Contains(err.Error(), "more than 16777216 bytes") {
		t.Errorf("/dev/zero: %v", err)
	}
	dc := filepath.Join(t.TempDir(), "director.conf")
	os.WriteFile(dc, bytes.Repeat([]byte(" "), 2<<20), 0o600)
	if _, err := ParseDirectorFile(dc); err == nil || !strings.Contains(err.Error(), "a director config may be at most") {
		t.Errorf("oversized director config: %v", err)
	}
}

// TestBuildEachIsBuildSource: building a table at a time gives the tables
// and the warnings, in their order, that building them all at once gives,
// and stops at use's error.
func TestBuildEachIsBuildSource(t *testing.T) {
	t.Parallel()
	// Three tables: one of mixed families (unservable), one with a
	// draining and an unhealthy backend, one plain. The second's warnings
	// come before the first's unservability.
	data := []byte(fmt.Sprintf(`{"tables": [
	 {"hash_key": "%[1]s", "seed": "%[2]s", "binds": [{"ip": "10.0.0.2", "proto": "tcp", "port": 80}],
	  "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}, {"ip": "fd00::1", "state": "active", "healthy": true}]},
	 {"hash_key": "%[1]s", "seed": "%[2]s", "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}],
	  "backends": [{"ip": "192.168.0.1", "state": "draining", "healthy": true}, {"ip": "192.168.0.2", "state": "active", "healthy": false},
	               {"ip": "192.168.0.3", "state": "active", "healthy": true}]},
	 {"hash_key": "%[1]s", "seed": "%[2]s", "binds": [{"ip": "10.0.0.3", "proto": "tcp", "port": 80}],
	  "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}]}]}`, testKey, testSeed))
	whole, err := ParseSource("c.json", data, table.ToolLimit)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfigSource("c.json", data, table.ToolLimit)
	if err != nil {
		t.Fatal(err)
	}
	var fps []string
	warnings, err := BuildEach("c.json", c, func(i int, tb *table.Table) error {
		if i != len(fps) {
			t.Errorf("table %d given after %d", i, len(fps))
		}
		fps = append(fps, table.Fingerprint(tb))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, tb := range whole.Tables {
		if i >= len(fps) || fps[i] != table.Fingerprint(tb) {
			t.Errorf("table %d: not the table BuildSource builds", i)
		}
	}
	if len(whole.Warnings) < 2 || strings.Join(warnings, "\n") != strings.Join(whole.Warnings, "\n") {
		t.Errorf("warnings:\n%s\nBuildSource's:\n%s", strings.Join(warnings, "\n"), strings.Join(whole.Warnings, "\n"))
	}
	stop := fmt.Errorf("stop")
	n := 0
	if _, err := BuildEach("c.json", c, func(int, *table.Table) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("use's error: %v after %d tables", err, n)
	}
}
