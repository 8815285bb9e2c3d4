package testbed

import (
	"bufio"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

func newTestbed(t *testing.T) *Testbed { return newBedFor(t, false) }

func newBedFor(t *testing.T, underlay6 bool) *Testbed {
	t.Helper()
	testenv.Kernel(t)
	tb, err := New(Options{Backends: 3, Underlay6: underlay6})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// eachUnderlay runs f on a testbed of each underlay: GLB's GUE over IPv4,
// and GUE over IPv6 (New6), whose clients go to both VIPs.
func eachUnderlay(t *testing.T, f func(t *testing.T, tb *Testbed)) {
	testenv.Kernel(t)
	for _, u := range []struct {
		name string
		v6   bool
	}{{"ipv4-underlay", false}, {"ipv6-underlay", true}} {
		t.Run(u.name, func(t *testing.T) { f(t, newBedFor(t, u.v6)) })
	}
}

// apply makes a config live through the pinned director, as `director
// apply` does, after the plan's review: the change must be judged safe.
func apply(t *testing.T, tb *Testbed, cfg string) {
	t.Helper()
	commit(t, tb, cfg, func(plan *table.Plan) error {
		if !plan.Safe {
			return fmt.Errorf("the plan is unsafe: %v", plan.Reasons)
		}
		return nil
	})
}

// commit plans a config against what is live through the pinned
// director and applies it if allow, shown the plan, says so.
func commit(t *testing.T, tb *Testbed, cfg string, allow func(*table.Plan) error) {
	t.Helper()
	tabs := buildConfig(t, cfg)
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, _, err = d.Commit(&loader.Proposal{Tables: tabs}, func(_ loader.State, plan *table.Plan) error { return allow(plan) })
	if err != nil {
		t.Fatal(err)
	}
}

// buildConfig is the tables cfg builds.
func buildConfig(t *testing.T, cfg string) []*table.Table {
	t.Helper()
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return tabs
}

func open(t *testing.T, tb *Testbed, id int) *Session {
	t.Helper()
	s, err := tb.Open(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// started opens n sessions, IDs first to first+n-1, and starts them
// exchanging; they stop when t ends.
func started(t *testing.T, tb *Testbed, first, n int) []*Session {
	t.Helper()
	var sessions []*Session
	for i := 0; i < n; i++ {
		s := open(t, tb, first+i)
		s.Start()
		sessions = append(sessions, s)
	}
	t.Cleanup(func() {
		for _, s := range sessions {
			s.Stop()
		}
	})
	return sessions
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
	sessions := started(t, tb, 0, 24)
	drained := Busiest(sessions)
	x := BackendIndex(drained)
	wait := func() { time.Sleep(1200 * time.Millisecond) }

	// 1. Drain x: its connections continue through second chance, which
	// x counts (second_chance_in: backend run's
	// director_backend_host_second_chance_received_total).
	before := secondChanceIn(t, tb, x)
	apply(t, tb, BackendConfig(map[int]string{x: "draining"}, nil, 3))
	wait()
	if got := spread(t, tb, 30); got[drained] != 0 {
		t.Errorf("after draining %s, new connections landed on it: %v", drained, got)
	}
	during := secondChanceIn(t, tb, x)
	if during <= before {
		t.Errorf("draining %s, its connections' packets did not arrive by second chance (%d, then %d)", drained, before, during)
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
	// Done, as docs/operations.md tells it: once the connections' last
	// packets (their close) are in, nothing more arrives at x by second
	// chance while the other connections go on.
	time.Sleep(testenv.Scaled(1200 * time.Millisecond))
	done := secondChanceIn(t, tb, x)
	time.Sleep(testenv.Scaled(1200 * time.Millisecond))
	if now := secondChanceIn(t, tb, x); now != done {
		t.Errorf("%s's connections are gone, but second chance still brings it packets (%d, then %d)", drained, done, now)
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
	eachUnderlay(t, func(t *testing.T, tb *Testbed) {
		for i, h := range tb.Backends {
			err := h.Do(func() error {
				b, err := loader.OpenBackend(tb.BackendBPFFS(i + 1))
				if err != nil {
					return err
				}
				defer b.Close()
				return b.DisableSecondChance(h.selves()...)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		apply(t, tb, tb.Config(nil, nil))
		drainBreaks(t, tb, 18, nil, "without second chance")
	})
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
	apply(t, tb, tb.Config(map[int]string{BackendIndex(drained): "draining"}, nil))
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

// TestRollingDrain is an operator's rolling restart, on each underlay:
// every backend in turn is drained, its connections finish, and it is
// removed and added back, while connections through the VIP (both VIPs,
// with the IPv6 underlay) exchange a line every 100 ms all along. None
// fails: the drained backend's connections continue through second
// chance, and so do those made to another backend while it was out, once
// it is back. With the IPv6 underlay every GUE packet the backends took
// came over IPv6, and second chance forwarded some of them.
func TestRollingDrain(t *testing.T) {
	eachUnderlay(t, func(t *testing.T, tb *Testbed) {
		apply(t, tb, tb.Config(nil, nil))
		var live []*Session
		id := 0
		openMore := func(n int) []*Session {
			start := len(live)
			for i := 0; i < n; i++ {
				s := open(t, tb, id)
				id++
				s.Start()
				live = append(live, s)
			}
			return live[start:]
		}
		defer func() {
			for _, s := range live {
				s.Stop()
			}
		}()
		finished := func(s *Session) {
			s.Stop()
			if ok, failed, err := s.Result(); failed > 0 || ok == 0 {
				t.Errorf("connection %d to %s (VIP %s): %d exchanges, %d failed: %v", s.ID, s.Backend, tb.vipFor(s.ID), ok, failed, err)
			}
		}
		wait := func() { time.Sleep(1200 * time.Millisecond) }
		openMore(18)
		for x := 1; x <= 3; x++ {
			name := fmt.Sprintf("backend%d", x)
			apply(t, tb, tb.Config(map[int]string{x: "draining"}, nil))
			wait()
			for _, s := range openMore(6) {
				if s.Backend == name {
					t.Errorf("connection %d, made while %s drains, landed on it", s.ID, name)
				}
			}
			var kept []*Session
			for _, s := range live {
				if s.Backend == name {
					finished(s) // the drain completes: its clients finish and go
				} else {
					kept = append(kept, s)
				}
			}
			live = kept
			apply(t, tb, tb.Config(map[int]string{x: "absent"}, nil))
			wait()
			apply(t, tb, tb.Config(nil, nil))
			wait()
			openMore(6)
		}
		wait() // the last ones exchange too
		for _, s := range live {
			finished(s)
		}
		live = nil
		if !tb.Underlay6 {
			return
		}
		forwarded := uint64(0)
		for i := range tb.Backends {
			c := settledBackendCounters(t, tb, i+1)
			forwarded += c["forwarded"] + c["forwarded_stack"]
			took := c["decap_syn"] + c["decap_known"] + c["decap_not_tcp"] + c["decap_last_hop"] + c["forwarded"] + c["forwarded_stack"] +
				c["drop_malformed"] + c["drop_no_route"] + c["drop_not_local"]
			if c["gue6"] == 0 || c["gue6"] != took {
				t.Errorf("backend%d took %d GUE packets, %d of them over IPv6: %v", i+1, took, c["gue6"], c)
			}
		}
		if forwarded == 0 {
			t.Error("no backend forwarded a packet to its second hop over IPv6: the roll did not test second chance")
		}
		t.Logf("second chance forwarded %d packets over IPv6", forwarded)
	})
}

// settledBackendCounters reads backend i's program's counters once two
// reads 200 ms apart agree. A packet is counted twice as the program runs
// (gue6 on the way in, its outcome on the way out), and the last segments
// of connections just closed may still be in flight: a read between the
// two counts sees one without the other.
func settledBackendCounters(t *testing.T, tb *Testbed, i int) map[string]uint64 {
	t.Helper()
	prev := backendCounters(t, tb, i)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		c := backendCounters(t, tb, i)
		if maps.Equal(c, prev) {
			return c
		}
		prev = c
	}
	t.Fatalf("backend%d's counters still changing after 5 s: %v", i, prev)
	return nil
}

// backendCounters reads backend i's program's counters.
func backendCounters(t *testing.T, tb *Testbed, i int) map[string]uint64 {
	t.Helper()
	var c map[string]uint64
	err := tb.Backends[i-1].Do(func() error {
		b, err := loader.OpenBackend(tb.BackendBPFFS(i))
		if err != nil {
			return err
		}
		defer b.Close()
		c, err = b.Counters()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPathMTU: on links of 1,500 bytes, a client's full-sized packets do
// not fit once encapsulated. The director answers them with ICMP
// fragmentation-needed (ICMPv6 packet-too-big for VIP6), the client's own
// stack lowers its path MTU, and a 64 KB message gets through and back,
// over each underlay. Without the replies the packets would be dropped on
// the director's link and the exchange would stall.
func TestPathMTU(t *testing.T) {
	eachUnderlay(t, func(t *testing.T, tb *Testbed) {
		apply(t, tb, tb.Config(nil, nil))
		d, err := tb.OpenDirector()
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		before, err := d.GlobalCounters()
		if err != nil {
			t.Fatal(err)
		}
		line := strings.Repeat("x", 64<<10)
		for id := 0; id < 2; id++ { // VIP, and VIP6 over the IPv6 underlay
			vip := tb.vipFor(id)
			c, err := tb.DialTo(netip.Addr{}, vip)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(testenv.Scaled(10 * time.Second)))
			if _, err := fmt.Fprintf(c, "%s\n", line); err != nil {
				t.Fatalf("%s: writing 64 KB: %v", vip, err)
			}
			reply, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || !strings.HasSuffix(reply, " "+line+"\n") {
				t.Fatalf("%s: 64 KB through the director: %d bytes back, %v", vip, len(reply), err)
			}
		}
		after, err := d.GlobalCounters()
		if err != nil {
			t.Fatal(err)
		}
		replies := after[abi.CICMPTooBig] - before[abi.CICMPTooBig]
		if replies == 0 {
			t.Fatal("the exchanges worked, but the director sent no too-big reply: the test did not test it")
		}
		t.Logf("%d too-big replies; the clients then sent packets that fit", replies)
	})
}

// secondChanceIn is backend i's count of GUE packets another backend sent
// on to it.
func secondChanceIn(t *testing.T, tb *Testbed, i int) uint64 {
	t.Helper()
	b, err := loader.OpenBackend(tb.BackendBPFFS(i))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c, err := b.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c["second_chance_in"]
}
