package testbed

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/datapath/model"
	"github.com/director/director/internal/lab/testenv"
)

// TestQUIC is QUIC-LB routing end to end, with quic-go on both sides:
// while 30 QUIC connections through the VIP exchange a line every 100 ms,
// backend1 is drained and then removed, half of the others move to a new
// local port (path migration), and backend2 goes down and comes back. No
// connection is lost but those on backend2 while it was down: the
// datapath sends each packet to the backend its connection ID names,
// whatever its 4-tuple and its row say.
func TestQUIC(t *testing.T) {
	r := quicRun(t, true)
	if r.drainLost != 0 || r.migrateLost != 0 || r.otherLost != 0 {
		t.Errorf("with QUIC-LB routing, connections were lost: %+v", r)
	}
	if r.routed == 0 || r.fallback == 0 {
		t.Errorf("the director counted %d packets routed by connection ID and %d by the row", r.routed, r.fallback)
	}
}

// TestQUICWithoutRoutingBreaks is TestQUIC's control: the same run without
// the quic block loses connections on the drain and on the migration
// (their packets follow the 4-tuple's row to a backend that does not
// know them), so TestQUIC can fail. The QUIC counters stay at zero.
func TestQUICWithoutRoutingBreaks(t *testing.T) {
	r := quicRun(t, false)
	if r.drainLost == 0 || r.migrateLost == 0 {
		t.Errorf("without QUIC-LB routing, the drain lost %d connections and the migration %d: the run cannot tell", r.drainLost, r.migrateLost)
	}
	if r.routed != 0 || r.fallback != 0 {
		t.Errorf("without a quic block, the director counted %d packets routed by connection ID and %d fallbacks", r.routed, r.fallback)
	}
}

type quicResult struct {
	drainLost, migrateLost, otherLost, downLost int
	routed, fallback                            uint64
}

func quicRun(t *testing.T, routing bool) quicResult {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeQUIC(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := func(states map[int]string, healthy map[int]bool) string {
		return QUICConfig(states, healthy, 3, routing)
	}
	apply(t, tb, cfg(nil, nil))
	var sessions []*Session
	t.Cleanup(func() {
		for _, s := range sessions {
			s.Stop()
		}
	})
	on := map[string]int{}
	for i := 0; i < 30; i++ {
		s, err := tb.OpenQUIC(i)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		sessions = append(sessions, s)
		on[s.Backend]++
	}
	if len(on) != 3 {
		t.Fatalf("30 QUIC connections landed on %v", on)
	}
	t.Logf("30 QUIC connections on %v", on)
	wait := func() { time.Sleep(testenv.Scaled(1500 * time.Millisecond)) }
	lost := func(s *Session) bool {
		_, failed, _ := s.Result()
		return failed > 0
	}
	var r quicResult

	// 1. Drain backend1: new connections avoid it, its own carry on and
	// then finish.
	apply(t, tb, cfg(map[int]string{1: "draining"}, nil))
	wait()
	if got, err := tb.SpreadQUIC(15); err != nil || got["backend1"] != 0 {
		t.Errorf("after draining backend1, 15 new QUIC connections landed on %v (%v)", got, err)
	}
	var kept []*Session
	for _, s := range sessions {
		if s.Backend != "backend1" {
			kept = append(kept, s)
			continue
		}
		s.Stop()
		if lost(s) {
			r.drainLost++
			_, _, err := s.Result()
			t.Logf("connection %d on draining backend1 lost: %v", s.ID, err)
		}
	}
	// 2. Remove it.
	apply(t, tb, cfg(map[int]string{1: "absent"}, nil))
	wait()

	// 3. Half of the others move to a new local port, all at once: a
	// move that fails waits out its probe's timeout, and without routing
	// most fail.
	migrated := map[*Session]int{} // the exchanges that worked before
	var moving []*Session
	for i, s := range kept {
		if i%2 != 0 {
			continue
		}
		ok, _, _ := s.Result()
		migrated[s] = ok
		moving = append(moving, s)
	}
	migrate(t, tb, moving)
	wait()

	// 4. backend2 goes down, its service with it, and comes back.
	tb.StopQUIC(2)
	apply(t, tb, cfg(map[int]string{1: "absent"}, map[int]bool{2: false}))
	wait()
	if err := tb.ServeQUIC(2); err != nil {
		t.Fatal(err)
	}
	apply(t, tb, cfg(map[int]string{1: "absent"}, nil))
	wait()

	for _, s := range kept {
		s.Stop()
		ok, failed, err := s.Result()
		before, moved := migrated[s]
		switch {
		case s.Backend == "backend2":
			if failed > 0 {
				r.downLost++
			}
		case failed > 0 && moved:
			r.migrateLost++
			t.Logf("migrated connection %d on %s lost: %v", s.ID, s.Backend, err)
		case failed > 0:
			r.otherLost++
			t.Logf("connection %d on %s lost: %v", s.ID, s.Backend, err)
		case moved && ok < before+10:
			t.Errorf("migrated connection %d on %s: %d exchanges before, %d in all", s.ID, s.Backend, before, ok)
		}
	}
	g := globalCounters(t, tb)
	r.routed = g[model.QUICRouted]
	for _, c := range []int{model.QUICShort, model.QUICCIDLen, model.QUICUnroutable, model.QUICOtherConfig, model.QUICUnknownID} {
		r.fallback += g[c]
	}
	var names []string
	for s := range migrated {
		names = append(names, fmt.Sprint(s.ID))
	}
	t.Logf("routing %v: %+v (migrated: %s)", routing, r, strings.Join(names, " "))
	return r
}
