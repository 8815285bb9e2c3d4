package main

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// TestStatusCountsQuietTables (issue 49): past listTables tables, status
// lists those with a problem, each problem said, and counts the rest in
// one line; --all, or a few tables, lists every one.
func TestStatusCountsQuietTables(t *testing.T) {
	t.Parallel()
	st := &status.Status{
		Backends:   []status.Backend{{IP: "192.168.0.1", Up: true, Passing: true}, {IP: "192.168.0.2", Up: false}},
		FailStatic: []string{"svc-07"},
		Held:       []status.Held{{Tables: []table.PlanTable{{Name: "svc-09"}}}},
	}
	doc := func(n int) *statusDoc {
		d := &statusDoc{Tables: []statusTable{}, Kernel: &loader.KernelSupport{Release: "6.18"}}
		for i := 0; i < n; i++ {
			tb := &table.Table{Backends: []table.Backend{{IP: netip.MustParseAddr("192.168.0.1"), Healthy: true}}}
			if i == 3 {
				tb.Backends = append(tb.Backends, table.Backend{IP: netip.MustParseAddr("192.168.0.2"), Healthy: true})
			}
			name := fmt.Sprintf("svc-%02d", i)
			d.Tables = append(d.Tables, statusTable{Index: i, Name: name, Binds: []string{}, Problems: st.Problems(tb, name)})
		}
		return d
	}
	print := func(d *statusDoc, all bool) string {
		var b strings.Builder
		printStatus(&env{stdout: &b}, d, all)
		return b.String()
	}
	out := print(doc(40), false)
	for _, want := range []string{
		"table        svc-03  ", "  problem    1 backends down by the checks (192.168.0.2)\n",
		"table        svc-07  ", "  problem    fail-static: its health changes are held\n",
		"table        svc-09  ", "  problem    in a held change\n",
		"tables       37 more live, none with a problem (status --all lists them)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("40 tables: no %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "table        "); n != 3 {
		t.Errorf("40 tables, 3 with a problem: %d listed\n%s", n, out)
	}
	for _, c := range []struct {
		n   int
		all bool
	}{{40, true}, {listTables, false}} {
		out := print(doc(c.n), c.all)
		if n := strings.Count(out, "table        "); n != c.n || strings.Contains(out, "more live") {
			t.Errorf("%d tables, --all %v: %d listed\n%s", c.n, c.all, n, out)
		}
	}
	// Without a service, nothing is known to be wrong.
	var none *status.Status
	if p := none.Problems(&table.Table{Backends: []table.Backend{{IP: netip.MustParseAddr("192.168.0.2")}}}, "svc"); p != nil {
		t.Errorf("problems without a service: %v", p)
	}
}
