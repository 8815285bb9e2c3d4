package change

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/director/director/table"
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

// TestBuildersSeeWhichBackends: an edit that swaps one backend for another
// of the same state, health and weight (one removed, another added back)
// builds the edit's table, not the one built before; and so does one that
// changes only the seed or the history settings.
func TestBuildersSeeWhichBackends(t *testing.T) {
	mk := func(ids ...int) *table.TableConfig {
		tc := &table.TableConfig{Name: "vip", History: table.DefaultHistory()}
		copy(tc.Seed[:], "00112233445566778899aabbccddeeff")
		for _, i := range ids {
			tc.Backends = append(tc.Backends, table.Backend{IP: netip.AddrFrom4([4]byte{10, 50, 0, byte(10 + i)}), State: table.StateActive,
				Healthy: true, Weight: 1000})
		}
		return tc
	}
	bs := NewBuilders(&table.Config{Tables: []table.TableConfig{*mk(1, 2, 3, 4, 6)}})
	check := func(tc *table.TableConfig, what string) {
		t.Helper()
		got, fp, err := bs.Build(0, tc)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := table.Build(tc)
		if fp != table.Fingerprint(want) || got.History != tc.History {
			t.Fatalf("%s: the builders gave the table built before", what)
		}
	}
	check(mk(1, 2, 3, 4, 6), "the first build")
	check(mk(1, 2, 3, 4, 5), "6 removed and 5 added back")
	seed := mk(1, 2, 3, 4, 5)
	seed.Seed[0] ^= 1
	check(seed, "a new seed")
	hist := mk(1, 2, 3, 4, 5)
	hist.History.NoHops = true
	check(hist, "history_hops false")
	// A QUIC-LB key decides no row, but the table carries it.
	keyed := func(k byte) *table.TableConfig {
		tc := mk(1, 2, 3, 4, 5)
		tc.QUIC = table.QUIC{QUICConfig: table.QUICConfig{ConfigID: 1, ServerIDLen: 1, NonceLen: 6, Encrypted: true, Key: table.Key{k}}}
		for i := range tc.Backends {
			tc.Backends[i].ServerID = table.ServerID([]byte{byte(i + 1)})
		}
		return tc
	}
	check(keyed(1), "a QUIC key")
	check(keyed(2), "another QUIC key")
}
