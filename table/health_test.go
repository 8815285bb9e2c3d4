package table

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestTransitionPutsNoRowAtRisk: from a table with several backends down
// to one with some back (a change with rows at risk), the transition puts
// none at risk, and from it the change itself moves no primary.
func TestTransitionPutsNoRowAtRisk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 20; trial++ {
		tc := &TableConfig{Name: "t"}
		for j := range tc.Seed {
			tc.Seed[j] = byte(rng.Uint32())
		}
		for i := 0; i < 8; i++ {
			tc.Backends = append(tc.Backends, Backend{IP: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), State: StateActive, Healthy: i < 2})
		}
		live := buildCfg(t, tc)
		up := *tc
		up.Backends = append([]Backend(nil), tc.Backends...)
		for i := 2; i < 2+1+rng.IntN(6); i++ {
			up.Backends[i].Healthy = true
		}
		target := buildCfg(t, &up)
		if d := Compare([]*Table{live}, []*Table{target}); d.Tables[0].Rows.AtRisk == 0 {
			continue // nothing for a transition to do
		}
		tr := Transition(live, target)
		if tr == nil {
			t.Fatalf("trial %d: no transition for a change with rows at risk", trial)
		}
		if d := Compare([]*Table{live}, []*Table{tr}); d.Tables[0].Rows.AtRisk != 0 {
			t.Fatalf("trial %d: the transition puts %d rows at risk", trial, d.Tables[0].Rows.AtRisk)
		}
		d := Compare([]*Table{tr}, []*Table{target})
		if d.Tables[0].Rows.PrimaryChanged != 0 || d.Tables[0].Rows.AtRisk != 0 {
			t.Fatalf("trial %d: from the transition, the change moves %d primaries", trial, d.Tables[0].Rows.PrimaryChanged)
		}
		if safe, why := Verdict(d); !safe {
			t.Fatalf("trial %d: from the transition, the change is unsafe: %v", trial, why)
		}
		if Transition(tr, target) != nil {
			t.Fatalf("trial %d: a transition from the transition", trial)
		}
	}
}
