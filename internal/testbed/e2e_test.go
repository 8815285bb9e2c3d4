package testbed

import (
	"fmt"
	"testing"
	"time"

	"github.com/director/director/internal/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

func newTestbed(t *testing.T) *Testbed {
	t.Helper()
	testenv.Kernel(t)
	tb, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// apply makes a config live through the pinned director, as `director
// apply` does, after the plan's review: the change must be judged safe.
func apply(t *testing.T, tb *Testbed, cfg string) {
	t.Helper()
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, _, err = d.Commit(&loader.Proposal{Tables: tabs}, func(_ loader.State, plan *table.Plan) error {
		if !plan.Safe {
			return fmt.Errorf("the plan is unsafe: %v", plan.Reasons)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, tb *Testbed, id int) *Session {
	t.Helper()
	s, err := tb.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func spread(t *testing.T, tb *Testbed, n int) map[string]int {
	t.Helper()
	got, err := tb.Spread(n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestDrainWithoutBreakingConnections is GLB's promise, end to end: while
// long-lived connections exchange messages, a backend is drained, removed,
// added back, another goes unhealthy, and the control plane restarts.
// Connections whose backend stays in service never fail; new connections
// avoid draining and unhealthy backends and spread over the others.
func TestDrainWithoutBreakingConnections(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	apply(t, tb, BackendConfig(nil, nil, 3))
	if got := spread(t, tb, 60); len(got) != 3 || got["backend1"] < 8 || got["backend2"] < 8 || got["backend3"] < 8 {
		t.Fatalf("60 new connections spread as %v", got)
	}
	var sessions []*Session
	for i := 0; i < 24; i++ {
		s := open(t, tb, i)
		s.Start()
		sessions = append(sessions, s)
	}
	defer func() {
		for _, s := range sessions {
			s.Stop()
		}
	}()
	drained := Busiest(sessions)
	x := BackendIndex(drained)
	wait := func() { time.Sleep(1200 * time.Millisecond) }

	// 1. Drain x: its connections continue through second chance.
	apply(t, tb, BackendConfig(map[int]string{x: "draining"}, nil, 3))
	wait()
	if got := spread(t, tb, 30); got[drained] != 0 {
		t.Errorf("after draining %s, new connections landed on it: %v", drained, got)
	}
	// The drain completes: x's clients finish and go.
	var kept []*Session
	for _, s := range sessions {
		if s.Backend != drained {
			kept = append(kept, s)
			continue
		}
		s.Stop()
		if ok, failed, err := s.Result(); failed > 0 || ok < 8 {
			t.Errorf("connection %d on draining %s: %d exchanges, %d failed: %v", s.ID, drained, ok, failed, err)
		}
	}
	// 2. Remove it.
	apply(t, tb, BackendConfig(map[int]string{x: "absent"}, nil, 3))
	wait()
	// 3. Add it back.
	apply(t, tb, BackendConfig(nil, nil, 3))
	wait()
	if got := spread(t, tb, 45); got[drained] == 0 {
		t.Errorf("after adding %s back, no new connection landed on it: %v", drained, got)
	}
	// 4. Another backend becomes unhealthy: its connections continue.
	y := x%3 + 1
	apply(t, tb, BackendConfig(nil, map[int]bool{y: false}, 3))
	wait()
	if got := spread(t, tb, 30); got[fmt.Sprintf("backend%d", y)] != 0 {
		t.Errorf("new connections landed on unhealthy backend%d: %v", y, got)
	}
	// 5. The control plane exits and starts again: nothing changes.
	d, err := loader.Load(tb.BPFFS)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	apply(t, tb, BackendConfig(nil, map[int]bool{y: false}, 3))
	wait()
	apply(t, tb, BackendConfig(nil, nil, 3))
	wait()

	for _, s := range kept {
		s.Stop()
		if ok, failed, err := s.Result(); failed > 0 || ok < 40 {
			t.Errorf("connection %d on %s: %d exchanges, %d failed, last error %v", s.ID, s.Backend, ok, failed, err)
		}
	}
	if got := spread(t, tb, 60); len(got) != 3 || got["backend1"] < 8 || got["backend2"] < 8 || got["backend3"] < 8 {
		t.Errorf("at the end, 60 new connections spread as %v", got)
	}
}

// TestDrainWithoutSecondChanceBreaks is the control: the same drain with
// backends that decapsulate everything and never pass a packet on (as a
// backend without GLB's proxy logic would) breaks the drained backend's
// connections. It shows the test above can fail.
func TestDrainWithoutSecondChanceBreaks(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i, h := range tb.Backends {
		err := h.Do(func() error {
			b, err := loader.OpenBackend(tb.BackendBPFFS(i + 1))
			if err != nil {
				return err
			}
			defer b.Close()
			return b.DisableSecondChance(h.IP)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	apply(t, tb, BackendConfig(nil, nil, 3))
	drainBreaks(t, tb, 18, nil, "without second chance")
}

// drainBreaks opens n sessions, runs before (if any), drains the busiest
// backend, and requires some of its connections to break.
func drainBreaks(t *testing.T, tb *Testbed, n int, before func(), what string) {
	t.Helper()
	var sessions []*Session
	for i := 0; i < n; i++ {
		s := open(t, tb, i)
		s.Start()
		sessions = append(sessions, s)
	}
	if before != nil {
		before()
	}
	drained := Busiest(sessions)
	apply(t, tb, BackendConfig(map[int]string{BackendIndex(drained): "draining"}, nil, 3))
	time.Sleep(1500 * time.Millisecond)
	broken := 0
	for _, s := range sessions {
		s.Stop()
		if _, failed, _ := s.Result(); s.Backend == drained && failed > 0 {
			broken++
		}
	}
	if broken == 0 {
		t.Fatalf("%s, draining %s broke none of its connections", what, drained)
	}
	t.Logf("%s, draining %s broke %d connections", what, drained, broken)
}

// TestDrainWithBackendProgramDetached is the bluntest control: with the
// backend program detached, nothing on the backends decapsulates GUE (this
// kernel has no FOU), so the drained backend's connections, like every
// other, stop working.
func TestDrainWithBackendProgramDetached(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	apply(t, tb, BackendConfig(nil, nil, 3))
	drainBreaks(t, tb, 12, func() {
		for i, h := range tb.Backends {
			err := h.Do(func() error {
				b, err := loader.OpenBackend(tb.BackendBPFFS(i + 1))
				if err != nil {
					return err
				}
				defer b.Close()
				return b.Detach("eth0")
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}, "with the backend program detached")
}
