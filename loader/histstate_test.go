package loader

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/director/director/table"
)

// TestHistoryOutlivesARestart: a host restarts (its pins gone) while the
// backends keep their connections. The first apply after it takes the
// tables saved before, so the history it writes is the one the kernel
// held (entries past the window aside), and the change, judged against
// them, strands nothing; a saved file that does not check out is left
// aside with a warning, never used.
func TestHistoryOutlivesARestart(t *testing.T) {
	state := t.TempDir()
	now := time.Unix(1_900_000_000, 0)
	open := func(dir string) *Director {
		d, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		d.StateDir, d.Clock = state, func() time.Time { return now }
		t.Cleanup(func() { d.Close() })
		return d
	}
	dir := testDir(t)
	d := open(dir)
	a := testTables(t, testConfig)
	b := testTables(t, configB)
	for _, tabs := range [][]*table.Table{a, b} {
		now = now.Add(5 * time.Second)
		if _, err := d.apply(tabs, nil); err != nil {
			t.Fatal(err)
		}
	}
	before, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	if before[0].History.Empty() {
		t.Fatal("the change left no history to keep")
	}
	// The restart: the pins go (not through unload, which forgets).
	d.Close()
	removePins(t, dir)

	now = now.Add(time.Minute)
	d = open(dir)
	plan, err := d.Plan(&Proposal{Tables: b})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Safe || plan.Diff.Tables[0].History == nil || plan.Diff.Tables[0].History.Rows == 0 {
		t.Fatalf("the plan after the restart: safe %v, history %+v (%v)", plan.Safe, plan.Diff.Tables[0].History, d.StateWarnings)
	}
	if _, err := d.apply(b, nil); err != nil {
		t.Fatal(err)
	}
	after, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	for i := range after {
		if !after[i].History.Equal(before[i].History) {
			t.Errorf("table %d: the history after the restart is not the one before", i)
		}
	}

	// A saved file edited underneath: left aside, with a warning.
	d.Close()
	removePins(t, dir)
	files, _ := filepath.Glob(filepath.Join(state, "tables", "*", "web.table"))
	if len(files) != 1 {
		t.Fatalf("saved files: %v", files)
	}
	data, _ := os.ReadFile(files[0])
	data[len(data)/2] ^= 0xff
	os.WriteFile(files[0], data, 0o600)
	d = open(dir)
	plan, err = d.Plan(&Proposal{Tables: b})
	if err != nil {
		t.Fatal(err)
	}
	if h := plan.Diff.Tables[0].History; h != nil && h.Rows != 0 {
		t.Fatalf("a corrupt saved table was used: %+v", h)
	}
	if len(d.StateWarnings) != 1 || !strings.Contains(d.StateWarnings[0], "web.table: not used: ") {
		t.Fatalf("warnings: %q", d.StateWarnings)
	}
}

// removePins removes a director's pins as a restart of the host does,
// leaving what is saved elsewhere.
func removePins(t *testing.T, dir string) {
	t.Helper()
	if _, err := unload(dir, KindNone); err != nil {
		t.Fatal(err)
	}
}
