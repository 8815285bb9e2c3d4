package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestBuildOfManyTablesHoldsAFew (issue 49): build takes as many tables as
// the table tools read (1,024), and builds, writes and lets go of them one
// at a time: the process's peak memory is that of a few tables, where
// 1,024 tables' rows alone are 512 MiB. What it writes is what building
// each table alone writes, and the fingerprints it prints are theirs.
func TestBuildOfManyTablesHoldsAFew(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	var b bytes.Buffer
	b.WriteString(`{"tables": [`)
	for i := 0; i < table.MaxTables; i++ {
		if i > 0 {
			b.WriteString(",\n")
		}
		fmt.Fprintf(&b, `{"name": "svc-%04d", "hash_key": "%032x", "seed": "%032x",
		  "binds": [{"ip": "10.%d.%d.1", "proto": "tcp", "port": 443}], "backends": [`, i, i+1, i+7, i/256, i%256)
		for j := 0; j < 4; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, `{"ip": "192.168.%d.%d", "state": "active", "healthy": true}`, i%4, j+1)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	cfg, out := filepath.Join(tmp, "many.json"), filepath.Join(tmp, "many.bin")
	if err := os.WriteFile(cfg, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := asDirector(os.Args[0], "build", cfg, "-o", out)
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, stdout)
	}
	peak := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	// 448 MiB: what 1,024 tables' rows alone would take (512 MiB) cannot
	// fit under it; a build alone peaks near 100 MiB, and under a loaded
	// machine's late collections it was seen at 289.
	if peak > 448<<20 {
		t.Errorf("building %d tables took %d MiB at its peak", table.MaxTables, peak>>20)
	}
	t.Logf("%d tables built in %v of CPU, %d MiB at the peak", table.MaxTables, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime(), peak>>20)
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	if len(lines) != 1+table.MaxTables || lines[0] != fmt.Sprintf("wrote %s: %d tables", out, table.MaxTables) {
		t.Fatalf("build said %d lines, starting %q", len(lines), lines[0])
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != table.GLBHeaderSize+table.MaxTables*table.GLBTableSize || binary.LittleEndian.Uint32(data[8:]) != uint32(table.MaxTables) {
		t.Fatalf("%d bytes, for %d tables", len(data), binary.LittleEndian.Uint32(data[8:]))
	}
	c, err := config.ParseConfigSource(cfg, b.Bytes(), table.ToolLimit)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 511, table.MaxTables - 1} {
		alone, err := table.Build(&c.Tables[i])
		if err != nil {
			t.Fatal(err)
		}
		var one bytes.Buffer
		table.WriteGLB(&one, []*table.Table{alone})
		at := table.GLBHeaderSize + i*table.GLBTableSize
		if !bytes.Equal(data[at:at+table.GLBTableSize], one.Bytes()[table.GLBHeaderSize:]) {
			t.Errorf("tables[%d]: not the bytes of the table built alone", i)
		}
		want := fmt.Sprintf("  %s  fingerprint %s", tableLabel(alone, i), table.ShortFingerprint(table.Fingerprint(alone)))
		if lines[1+i] != want {
			t.Errorf("line for tables[%d]: %q, want %q", i, lines[1+i], want)
		}
	}
}
