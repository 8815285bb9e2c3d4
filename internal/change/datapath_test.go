package change

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/director/director/table"
)

// TestServiceBuildsAsApplyDoes: the service's way in (Read once, then
// Build with the health its checks judge, through its builders) gives the
// tables apply's (ForDatapath) gives for the same config with that health
// written in; rebuilding after a health flip is incremental; and both end
// in the datapath's check, whose error names the file.
func TestServiceBuildsAsApplyDoes(t *testing.T) {
	const path = "../../testdata/configs/medium.json"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fingerprints := func(ts []*table.Table) (out []string) {
		for _, tb := range ts {
			out = append(out, table.Fingerprint(tb))
		}
		return out
	}
	apply := func(data []byte) []string {
		t.Helper()
		src, _, _, err := ForDatapath(path, data, Against{})
		if err != nil {
			t.Fatal(err)
		}
		return fingerprints(src.Tables)
	}
	// The second backend of the first table, down.
	i := strings.Index(string(data), `"healthy": true`)
	i += strings.Index(string(data[i+1:]), `"healthy": true`) + 1
	down := []byte(string(data[:i]) + `"healthy": false` + string(data[i+len(`"healthy": true`):]))

	in, err := Read(path, data)
	if err != nil {
		t.Fatal(err)
	}
	bs := NewBuilders(in.Config)
	healthy := true
	judge := func(i int, tc *table.TableConfig) {
		if i == 0 {
			tc.Backends = append([]table.Backend(nil), tc.Backends...)
			tc.Backends[1].Healthy = healthy
		}
	}
	build := func(want []string, wantStats Stats, what string) []*table.Table {
		t.Helper()
		src, st, _, err := in.Build(Against{Judge: judge, Builders: bs})
		if err != nil {
			t.Fatal(err)
		}
		if got := fingerprints(src.Tables); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: the service built %v, apply %v", what, got, want)
		}
		if st != wantStats {
			t.Errorf("%s: %+v, want %+v", what, st, wantStats)
		}
		return src.Tables
	}
	healthy = false
	first := build(apply(down), Stats{Full: 3}, "the first build, one backend down")
	healthy = true
	build(apply(data), Stats{Incremental: 1}, "the backend up again")

	// The downs-only step: the tables it names are taken, the rest built.
	src, st, _, err := in.Build(Against{Judge: judge, Reuse: func(i int, _ *table.TableConfig) *table.Table {
		if i == 2 {
			return first[2]
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st != (Stats{Live: 1, Full: 2}) || src.Tables[2] != first[2] {
		t.Errorf("with Reuse: %+v", st)
	}

	// What the datapath cannot hold is refused, naming the file.
	small := errors.New("more than this datapath holds")
	for _, a := range []Against{{Judge: judge, Builders: bs, Holds: func([]*table.Table) error { return small }}, {Holds: func([]*table.Table) error { return small }}} {
		_, _, _, err := in.Build(a)
		if !errors.Is(err, small) || !strings.Contains(err.Error(), path) {
			t.Errorf("a datapath too small: %v", err)
		}
	}
}

// TestReadNamesThePlace: a bad config is refused by Read, for the service
// and apply alike, with the file and the field.
func TestReadNamesThePlace(t *testing.T) {
	_, err := Read("bad.json", []byte(`{"tables": [{"name": "a", "hash_key": "00"}]}`))
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "tables[0].hash_key") {
		t.Fatalf("got %v", err)
	}
}
