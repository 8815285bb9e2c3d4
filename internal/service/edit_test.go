package service

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/director/director/internal/change"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// editInput is an input of tables, parsed as the service parses a config.
func editInput(t testing.TB, tables []table.TableConfig) *input {
	t.Helper()
	cfg := &table.Config{Tables: tables}
	return newInput(&change.Input{Path: "config.json", Config: cfg})
}

func editTables(rng *rand.Rand, n, backends int) []table.TableConfig {
	var out []table.TableConfig
	for i := 0; i < n; i++ {
		tc := table.TableConfig{Name: fmt.Sprint("t", i), Binds: []table.Bind{{Prefix: netip.MustParsePrefix(fmt.Sprintf("10.9.%d.1/32", i)),
			Proto: table.ProtoTCP, PortStart: 80, PortEnd: 80}}}
		for k := range tc.HashKey {
			tc.HashKey[k], tc.Seed[k] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		for k := 0; k < backends; k++ {
			tc.Backends = append(tc.Backends, table.Backend{IP: netip.AddrFrom4([4]byte{10, byte(i), byte(k >> 8), byte(k)}), State: table.StateActive, Healthy: true})
		}
		out = append(out, tc)
	}
	return out
}

// added numbers the backends edit adds, so that each is new.
var added int

// edit changes one table of ts in one of the ways a config edit does, and
// says which and how. Some edits are one backend (incremental), some more
// (a rebuild).
func edit(rng *rand.Rand, ts []table.TableConfig) (int, string, bool) {
	i := rng.IntN(len(ts))
	tc := &ts[i]
	tc.Backends = slices.Clone(tc.Backends)
	k := rng.IntN(len(tc.Backends))
	switch rng.IntN(8) {
	case 0:
		tc.Backends[k].State = table.StateDraining
		return i, "drain", true
	case 1:
		tc.Backends[k].Healthy = !tc.Backends[k].Healthy
		return i, "health", true
	case 2:
		added++
		ip := netip.AddrFrom4([4]byte{10, 200 + byte(i), byte(added >> 8), byte(added)})
		tc.Backends = slices.Insert(tc.Backends, k, table.Backend{IP: ip, State: table.StateActive, Healthy: true})
		return i, "add", true
	case 3:
		if len(tc.Backends) > 3 {
			tc.Backends = slices.Delete(tc.Backends, k, k+1)
			return i, "remove", true
		}
		return i, "none", true
	case 4:
		tc.Backends[k].Weight = uint16(1 + rng.IntN(4))
		return i, "weight", true
	case 5:
		tc.Binds = append(slices.Clone(tc.Binds), table.Bind{Prefix: netip.MustParsePrefix("10.8.0.1/32"), Proto: table.ProtoUDP, PortStart: 53, PortEnd: 53})
		return i, "bind", true
	case 6:
		tc.HashKey[0]++
		return i, "hash key", true
	default:
		if len(tc.Backends) > 4 {
			tc.Backends = slices.Delete(tc.Backends, 0, 2)
			return i, "two removed", false
		}
		return i, "none", true
	}
}

// TestConfigEditBuildsOnlyWhatChanged: a config edit takes over the
// served config's builders. The tables it did not change are not built
// again; one backend added, removed or changed, a bind or a key is
// applied incrementally; only more than that rebuilds, that table alone.
// Every table is what a full build makes.
func TestConfigEditBuildsOnlyWhatChanged(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	ts := editTables(rng, 6, 24)
	cur := editInput(t, slices.Clone(ts))
	for i := range cur.cfg().Tables {
		if _, _, err := cur.tables.Build(i, &cur.cfg().Tables[i]); err != nil {
			t.Fatal(err)
		}
	}
	for step := 0; step < 80/raceRuns; step++ {
		i, what, incremental := edit(rng, ts)
		next := editInput(t, slices.Clone(ts))
		was := make([]*table.Table, len(cur.cfg().Tables))
		for j := range was {
			was[j], _ = cur.tables.Built(j)
		}
		adopt(next, cur)
		before := next.tables.Stats.Full
		for j := range next.cfg().Tables {
			tc := next.cfg().Tables[j]
			prev := was[j]
			got, fp, err := next.tables.Build(j, &tc)
			if err != nil {
				t.Fatal(err)
			}
			if j != i {
				// Untouched: the very table built before.
				if prev == nil || got != prev {
					t.Fatalf("step %d (%s of table %d): table %d, unchanged, was built again", step, what, i, j)
				}
				continue
			}
			want, err := table.Build(&tc)
			if err != nil {
				t.Fatal(err)
			}
			if fp != table.Fingerprint(want) || table.Fingerprint(got) != fp {
				t.Fatalf("step %d (%s of table %d): the table differs from a full build", step, what, i)
			}
		}
		built := next.tables.Stats.Full - before
		if incremental && built != 0 || !incremental && built != 1 {
			t.Fatalf("step %d (%s of table %d): %d tables built from nothing", step, what, i, built)
		}
		// What was served shares the builders of the tables the edit left
		// as they were (its health flips stay incremental while the edit
		// is held), and gave up the changed one's.
		for j := range cur.cfg().Tables {
			if shared := cur.tables.Has(j); shared != (j != i || what == "none") || shared && !cur.tables.Shares(j, next.tables, j) {
				t.Fatalf("step %d (%s of table %d): table %d's builder shared %v", step, what, i, j, shared)
			}
		}
		cur = next
	}
}

// BenchmarkConfigEdit is a config edit of 32 tables of 256 backends, one
// backend of one table drained, from parse to every table built: what
// 'director run' spends before it plans the edit.
//
//	go test ./internal/service -run '^$' -bench ConfigEdit
func BenchmarkConfigEdit(b *testing.B) {
	rng := rand.New(rand.NewPCG(28, 2))
	ts := editTables(rng, 32, 256)
	cur := editInput(b, slices.Clone(ts))
	for i := range cur.cfg().Tables {
		if _, _, err := cur.tables.Build(i, &cur.cfg().Tables[i]); err != nil {
			b.Fatal(err)
		}
	}
	for n := 0; b.Loop(); n++ {
		ts[5].Backends = slices.Clone(ts[5].Backends)
		ts[5].Backends[n%256].State = []table.State{table.StateDraining, table.StateActive}[(n/256)%2]
		next := editInput(b, slices.Clone(ts))
		adopt(next, cur)
		for j := range next.cfg().Tables {
			if _, _, err := next.tables.Build(j, &next.cfg().Tables[j]); err != nil {
				b.Fatal(err)
			}
		}
		cur = next
	}
}

// BenchmarkConfigEditApplied is a 'director run' config edit of 32 tables
// of 256 backends, one backend of one table drained or put back, from the
// file's bytes to the tables applied in the kernel and read back: parse,
// the builders taken over, the one table rebuilt, the plan, the apply and
// its check, through the service's own path (issue 28's "under 50 ms").
//
//	go test ./internal/service -run '^$' -bench ConfigEditApplied
func BenchmarkConfigEditApplied(b *testing.B) {
	var docs [2][]byte
	for k := range docs {
		var ts []string
		for i := 0; i < 32; i++ {
			var bs []string
			for j := 0; j < 256; j++ {
				st := "active"
				if k == 1 && i == 5 && j == 17 {
					st = "draining"
				}
				bs = append(bs, fmt.Sprintf(`{"ip": "10.%d.%d.%d", "state": "%s", "healthy": true}`, 100+i, j/200, j%200+1, st))
			}
			ts = append(ts, fmt.Sprintf(`{"name": "t%d", "hash_key": "%032x", "seed": "%032x", "binds": [{"ip": "10.200.%d.1", "proto": "tcp", "port": 80}], "backends": [%s]}`,
				i, 0xabc0+i, 0x5eed0+i, i, strings.Join(bs, ", ")))
		}
		docs[k] = []byte(`{"tables": [` + strings.Join(ts, ",\n") + `]}`)
	}
	parse := func(data []byte) *input {
		cfg, err := config.ParseLimit(data, mapimage.Limit)
		if err != nil {
			b.Fatal(err)
		}
		return newInput(&change.Input{Path: "config.json", Data: data, Config: cfg})
	}
	s := benchService(b, parse(docs[0]))
	applied := s.m.applies.WithLabelValues("applied")
	for i := 0; b.Loop(); i++ {
		n := testutil.ToFloat64(applied)
		in := parse(docs[(i+1)%2])
		adopt(in, s.cur)
		s.pending = in
		if err := s.reconcile("config", false); err != nil {
			b.Fatal(err)
		}
		if testutil.ToFloat64(applied) != n+1 || s.pending != nil {
			b.Fatalf("edit %d was not applied", i)
		}
	}
}
