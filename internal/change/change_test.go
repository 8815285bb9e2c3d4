package change

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDiffBuildsOnlyWhatChanged: of two configs that differ in one table
// of three, Diff leaves the other two unbuilt (or, asked to build every
// table, takes them from OLD) and says so in its Stats.
func TestDiffBuildsOnlyWhatChanged(t *testing.T) {
	old := "../../testdata/configs/medium.json"
	data, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	// One backend of the last table drained.
	i := strings.LastIndex(string(data), `"active"`)
	changed := filepath.Join(t.TempDir(), "changed.json")
	if err := os.WriteFile(changed, []byte(string(data[:i])+`"draining"`+string(data[i+len(`"active"`):])), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		skipSame bool
		want     Stats
	}{
		{true, Stats{Unbuilt: 2, Full: 2}},
		{false, Stats{Other: 2, Full: 4}},
	} {
		o, n, st, err := Diff(old, changed, c.skipSame)
		if err != nil {
			t.Fatal(err)
		}
		if st != c.want || len(o.Tables) != 3 || len(n.Tables) != 3 {
			t.Errorf("skipSame %v: %+v, want %+v", c.skipSame, st, c.want)
		}
	}
	if _, _, st, err := Diff(old, old, true); err != nil || st != (Stats{Unbuilt: 3}) {
		t.Errorf("a config against itself: %+v, %v", st, err)
	}
}
