package table

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func buildCfg(t *testing.T, tc *TableConfig) *Table {
	t.Helper()
	tab, err := Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func primaryRows(t *Table, ip netip.Addr) int {
	n := 0
	for _, r := range t.Rows {
		if t.Backends[r.Primary].IP == ip {
			n++
		}
	}
	return n
}

func TestDiffDrain(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tc := c.Tables[1] // three backends, one unhealthy
	tc.Backends[1].Healthy = true
	old := buildCfg(t, &tc)
	drained := tc
	drained.Backends = slices.Clone(tc.Backends)
	drained.Backends[0].State = StateDraining
	new := buildCfg(t, &drained)

	d := Compare([]*Table{old}, []*Table{new})
	if !d.Changed || len(d.Tables) != 1 {
		t.Fatalf("diff = %+v", d)
	}
	td := d.Tables[0]
	moved := primaryRows(old, tc.Backends[0].IP)
	if td.Rows.PrimaryChanged != moved || td.Rows.Swapped != moved || td.Rows.AtRisk != 0 {
		t.Fatalf("drain of a backend with %d primary rows: %+v", moved, td.Rows)
	}
	if !td.Rows.Minimal || td.Rows.MinimalPrimaryMoves != moved {
		t.Fatalf("drain is minimal by construction: %+v", td.Rows)
	}
	if td.Backends[0].Change != ChangeChanged || td.Backends[0].New.State != "draining" || td.Backends[0].New.PrimaryRows != 0 {
		t.Fatalf("backend change = %+v %+v", td.Backends[0], td.Backends[0].New)
	}
}

func TestDiffRemoveIsAtRisk(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tc := c.Tables[0]
	old := buildCfg(t, &tc)
	rm := tc
	rm.Backends = slices.Delete(slices.Clone(tc.Backends), 0, 1)
	rm.History.NoHops = true
	new := buildCfg(t, &rm)
	td := Compare([]*Table{old}, []*Table{new}).Tables[0]
	// Removing a backend outright, with GLB's two hops: its rows'
	// connections have nowhere to go, which is why one drains first.
	if want := primaryRows(old, tc.Backends[0].IP); td.Rows.AtRisk != want {
		t.Fatalf("at risk %d, want the removed backend's %d primary rows", td.Rows.AtRisk, want)
	}
	// With the earlier primaries in the packets, the removed backend
	// stays in its rows' hops for the window: a removal is a drain.
	rm.History.NoHops = false
	if with := Compare([]*Table{old}, []*Table{buildCfg(t, &rm)}).Tables[0]; with.Rows.AtRisk != 0 || with.History.HopRows == 0 {
		t.Fatalf("with history: %d at risk, history %+v", with.Rows.AtRisk, with.History)
	}
	if td.Backends[len(td.Backends)-1].Change != ChangeRemoved {
		t.Fatalf("removed backend not listed last: %+v", td.Backends)
	}
	if !hasWarning(td, "rows at risk") {
		t.Fatalf("no at-risk warning: %v", td.Warnings)
	}
}

func TestDiffAddIsMinimal(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tc := c.Tables[1]
	tc.Backends[1].Healthy = true
	old := buildCfg(t, &tc)
	add := tc
	add.Backends = append(slices.Clone(tc.Backends), Backend{IP: netip.MustParseAddr("192.168.60.9"), State: StateActive, Healthy: true})
	new := buildCfg(t, &add)
	td := Compare([]*Table{old}, []*Table{new}).Tables[0]
	gained := primaryRows(new, netip.MustParseAddr("192.168.60.9"))
	if td.Rows.PrimaryChanged != gained || !td.Rows.Minimal {
		t.Fatalf("add: %+v, new backend took %d rows", td.Rows, gained)
	}
	if td.Rows.AtRisk != 0 {
		t.Fatalf("adding a backend keeps the old primary as secondary, so nothing is at risk: %+v", td.Rows)
	}
}

func TestDiffWarnings(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tc := c.Tables[0]
	old := buildCfg(t, &tc)
	bad := tc
	bad.HashKey[0] ^= 1
	bad.Binds = tc.Binds[1:]
	bad.Backends = slices.Clone(tc.Backends)
	bad.Backends[0].Healthy = false // now two bad backends with the draining one
	bad.History.NoHops = true       // GLB's two hops: the new key strands connections
	new := buildCfg(t, &bad)
	td := Compare([]*Table{old}, []*Table{new}).Tables[0]
	for _, w := range []string{"hash_key changed", "binds removed", "not active and healthy"} {
		if !hasWarning(td, w) {
			t.Errorf("no %q warning in %v", w, td.Warnings)
		}
	}
	if !td.HashKeyChanged || len(td.BindsRemoved) != 1 {
		t.Errorf("diff = %+v", td)
	}
}

func TestDiffPairsTables(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	tabs, _ := BuildAll(c)
	for i, n := range []string{"a", "b", "c"} {
		tabs[i].Name = n
	}
	// By name: reordering tables is no change, dropping one is a removal.
	d := Compare(tabs, []*Table{tabs[2], tabs[0], tabs[1]})
	if d.Changed {
		t.Fatalf("reordered named tables reported as changed")
	}
	d = Compare(tabs, []*Table{tabs[0], tabs[2]})
	if !d.Changed || d.Tables[1].Status != StatusRemoved || d.Tables[1].Name != "b" {
		t.Fatalf("removal: %+v", d.Tables)
	}
	d = Compare(tabs[:1], tabs)
	if d.Tables[1].Status != StatusAdded || d.Tables[2].Status != StatusAdded {
		t.Fatalf("additions: %+v", d.Tables)
	}
}

func hasWarning(td TableDiff, s string) bool {
	return slices.ContainsFunc(td.Warnings, func(w string) bool { return strings.Contains(w, s) })
}

// TestVerdictStateChangesNotHealth: GLB's one-at-a-time rule is about
// draining and filling, an operator's choice; backends the checks found
// down do not make a change unsafe by their number (rows at risk and rows
// with no good backend still do).
func TestVerdictStateChangesNotHealth(t *testing.T) {
	t.Parallel()
	c, err := parseConfig([]byte(`{"tables": [{"hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}], "backends": [
	  {"ip": "10.1.0.1", "state": "active", "healthy": true}, {"ip": "10.1.0.2", "state": "active", "healthy": true},
	  {"ip": "10.1.0.3", "state": "active", "healthy": true}, {"ip": "10.1.0.4", "state": "active", "healthy": true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// GLB's two hops (history_hops false): GLB's rules.
	build := func(edit func(bs []Backend)) []*Table {
		tc := c.Tables[0]
		tc.Backends = append([]Backend(nil), tc.Backends...)
		tc.History.NoHops = true
		edit(tc.Backends)
		tb, err := Build(&tc)
		if err != nil {
			t.Fatal(err)
		}
		return []*Table{tb}
	}
	base := build(func([]Backend) {})
	twoDown := build(func(bs []Backend) { bs[0].Healthy, bs[1].Healthy = false, false })
	if safe, reasons := Verdict(Compare(base, twoDown)); !safe {
		t.Errorf("two backends found down: unsafe %v", reasons)
	}
	twoDraining := build(func(bs []Backend) { bs[0].State, bs[1].State = StateDraining, StateDraining })
	if safe, reasons := Verdict(Compare(base, twoDraining)); safe || !strings.Contains(strings.Join(reasons, ";"), "2 backends draining or filling at once") {
		t.Errorf("two draining: %v %v", safe, reasons)
	}
	allDown := build(func(bs []Backend) {
		for i := range bs {
			bs[i].Healthy = false
		}
	})
	if safe, reasons := Verdict(Compare(base, allDown)); safe || !strings.Contains(strings.Join(reasons, ";"), "rows have no active healthy backend") {
		t.Errorf("all down: %v %v", safe, reasons)
	}
	// While one drains, another going down leaves rows whose earlier
	// primary is down: not counted, its connections go with it.
	draining := build(func(bs []Backend) { bs[0].State = StateDraining })
	downWhileDraining := build(func(bs []Backend) { bs[0].State, bs[1].Healthy = StateDraining, false })
	d := Compare(draining, downWhileDraining)
	if r := d.Tables[0].Rows; r.AtRiskDown == 0 {
		t.Errorf("down while draining: %d rows at risk, %d with an earlier primary down", r.AtRisk, r.AtRiskDown)
	}
	if safe, reasons := Verdict(d); !safe {
		t.Errorf("a backend found down while another drains: unsafe %v", reasons)
	}
	// With history in the packets, GLB's rule of one drain at a time has
	// no reason left: two at once strand nothing.
	withHistory := func(ts []*Table) []*Table {
		ts[0].History.NoHops = false
		return ts
	}
	if safe, reasons := Verdict(Compare(withHistory(base), withHistory(twoDraining))); !safe {
		t.Errorf("two draining with history: unsafe %v", reasons)
	}
}

// TestSameTableIsTheGeneralPath checks compareTable's shortcut for one
// table on both sides, or two copies of it, against the general
// comparison of the two copies, for tables with draining, unhealthy and weighted backends,
// failure domains and a balance factor.
func TestSameTableIsTheGeneralPath(t *testing.T) {
	t.Parallel()
	c, _ := parseConfig([]byte(glbCompatConfig))
	var tcs []TableConfig
	for _, tc := range c.Tables {
		tcs = append(tcs, tc)
	}
	var wide TableConfig
	wide.Name = "wide"
	for j := range 40 {
		b := Backend{IP: netip.AddrFrom4([4]byte{10, 9, 0, byte(j + 1)}), State: StateActive, Healthy: j%7 != 3,
			Weight: uint16(1 + j%3), Domain: []string{"a", "b", "c"}[j%3]}
		if j == 5 {
			b.State = StateDraining
		}
		wide.Backends = append(wide.Backends, b)
	}
	balanced := wide
	balanced.Name, balanced.Balance = "balanced", 1050
	balanced.Backends = slices.Clone(wide.Backends)
	for j := range balanced.Backends {
		balanced.Backends[j].Domain, balanced.Backends[j].Weight = "", 0
	}
	tcs = append(tcs, wide, balanced)
	for _, tc := range tcs {
		tab, cp := buildCfg(t, &tc), buildCfg(t, &tc) // equal, and two
		if !sameTables(tab, cp) {
			t.Fatalf("%s: two builds of one config are not the same table", tc.Name)
		}
		td := TableDiff{Name: tc.Name, BindsAdded: []string{}, BindsRemoved: []string{}, Warnings: []string{}}
		td.Rows.Total = Rows
		got, _ := compareTable(tc.Name, 0, 0, tab, tab, nil, time.Time{})
		if other, _ := compareTable(tc.Name, 0, 0, tab, cp, nil, time.Time{}); !reflect.DeepEqual(got, other) {
			t.Errorf("%s: one table and its copy compare unlike", tc.Name)
		}
		want := compareGeneral(td, tab, cp)
		want.History = historyDiff(tab.History, nil, HistoryRisk{}, time.Time{})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the shortcut gives\n%+v\nthe general path\n%+v", tc.Name, got, want)
		}
		if got.Status != StatusUnchanged {
			t.Errorf("%s: %s", tc.Name, got.Status)
		}
		drained := tc
		drained.Backends = slices.Clone(tc.Backends)
		drained.Backends[0].State = StateDraining
		reseeded := tc
		reseeded.Seed[0]++
		for what, other := range map[string]*TableConfig{"a backend drained": &drained, "another seed": &reseeded} {
			if sameTables(tab, buildCfg(t, other)) {
				t.Errorf("%s: %s is taken for the same table", tc.Name, what)
			}
		}
	}
}
