package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/director/director/table"
)

// TestDiffCountsQuietTables (issue 49): a diff of many tables names the
// tables that change and counts the rest in one line; up to listQuiet
// unchanged tables are named each.
func TestDiffCountsQuietTables(t *testing.T) {
	t.Parallel()
	// n tables; the second drains a backend on the new side.
	config := func(n int, drain bool) string {
		var b strings.Builder
		b.WriteString(`{"tables": [`)
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteString(",\n")
			}
			state := "active"
			if i == 1 && drain {
				state = "draining"
			}
			fmt.Fprintf(&b, `{"name": "svc-%02d", "hash_key": "%032x", "seed": "%032x", "binds": [{"ip": "10.0.%d.1", "proto": "tcp", "port": 80}],
			  "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}, {"ip": "192.168.0.2", "state": "%s", "healthy": true},
			               {"ip": "192.168.0.3", "state": "active", "healthy": true}]}`, i, i+1, i+7, i, state)
		}
		b.WriteString("]}")
		return b.String()
	}
	tmp := t.TempDir()
	for _, c := range []struct {
		n      int
		counts bool
	}{{9, false}, {10, true}, {40, true}} {
		old, new := filepath.Join(tmp, fmt.Sprintf("old%d.json", c.n)), filepath.Join(tmp, fmt.Sprintf("new%d.json", c.n))
		os.WriteFile(old, []byte(config(c.n, false)), 0o600)
		os.WriteFile(new, []byte(config(c.n, true)), 0o600)
		out, errOut, code := runCmd("diff", old, new)
		if code != exitChanges {
			t.Fatalf("%d tables: exit %d: %s", c.n, code, errOut)
		}
		named := strings.Count(out, ": unchanged (")
		quietLine := fmt.Sprintf("%d tables unchanged (--all shows them whole)", c.n-1)
		switch {
		case !strings.Contains(out, "table svc-01: changed"):
			t.Errorf("%d tables: the changed table is not shown:\n%s", c.n, out)
		case c.counts && (named != 0 || !strings.HasSuffix(out, "\n\n"+quietLine+"\n")):
			t.Errorf("%d tables: %d named unchanged, and no count of the %d others at the end:\n%s", c.n, named, c.n-1, out)
		case !c.counts && (named != c.n-1 || strings.Contains(out, "tables unchanged (")):
			t.Errorf("%d tables: %d of %d unchanged named:\n%s", c.n, named, c.n-1, out)
		}
	}
}

// TestDiffNamesQuietTablesWithWarnings: among many unchanged tables, one
// with a warning is named, with it, and not counted with the rest.
func TestDiffNamesQuietTablesWithWarnings(t *testing.T) {
	t.Parallel()
	d := &table.Diff{}
	for i := 0; i < 12; i++ {
		td := table.TableDiff{Name: fmt.Sprintf("svc-%02d", i), Status: table.StatusUnchanged, Brief: true}
		if i == 3 {
			td.Warnings = []string{"2 backends are not active and healthy"}
		}
		d.Tables = append(d.Tables, td)
	}
	var b strings.Builder
	printDiff(&b, d, "no changes")
	out := b.String()
	if !strings.HasPrefix(out, "table svc-03: unchanged (") || !strings.Contains(out, "  ! 2 backends are not active and healthy\n") ||
		strings.Count(out, ": unchanged (") != 1 || !strings.Contains(out, "\n\n11 tables unchanged (--all shows them whole)\n\nno changes\n") {
		t.Errorf("diff of 12 unchanged tables, one with a warning:\n%s", out)
	}
}
