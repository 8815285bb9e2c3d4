package testbed

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// rotatedSettings are QUICSettings with config rotation 2 and another
// key: what a key rotation moves the servers to.
var rotatedSettings = func() table.QUICConfig {
	q := QUICSettings
	q.ConfigID = 2
	q.Key = table.Key{0x3c, 0x1d, 0x9a, 0x07, 0x55, 0xe2, 0x61, 0xb8, 0x0f, 0x44, 0x2a, 0x93, 0xd6, 0x7e, 0xc1, 0x28}
	return q
}()

// TestQUICKeyRotation carries out docs/operations.md's key rotation under
// traffic, quic-go on both sides: 12 connections on the old key exchange
// lines throughout; the new config is added; the servers move to it and
// 12 connections open on the new key; every old connection moves to a new
// client port whose row is another backend's (so only its config 1 ID
// keeps it); removing the old config is judged unsafe while they carry
// packets; they end; removing it is judged safe, and applied; half of the
// new connections move as the old did. No connection is lost.
func TestQUICKeyRotation(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeQUIC(i); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, tb, QUICConfig(nil, nil, 3, true))
	wait := func() { time.Sleep(testenv.Scaled(1500 * time.Millisecond)) }
	olds := openQUICs(t, tb, 0)

	// 1. The new config beside the old.
	apply(t, tb, QUICRotationConfig(3, QUICSettings, rotatedSettings))
	// 2. The servers issue the new config's IDs.
	for i := 1; i <= 3; i++ {
		if err := tb.RotateQUIC(i, rotatedSettings); err != nil {
			t.Fatal(err)
		}
	}
	news := openQUICs(t, tb, 100)
	wait()
	perConfig := func() map[uint8]uint64 {
		d, err := tb.OpenDirector()
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		st, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		out := map[uint8]uint64{}
		for _, q := range st.Tables[0].QUIC {
			if q.ConfigID != nil {
				out[*q.ConfigID] = q.Counters["quic_routed"]
			}
		}
		return out
	}
	if c := perConfig(); c[1] == 0 || c[2] == 0 {
		t.Fatalf("packets routed by config: %v; both configs' connections should be", c)
	}
	migrate(t, tb, olds)
	wait()

	// 3. Removing the old config while its connections run: unsafe.
	newOnly := QUICRotationConfig(3, rotatedSettings)
	plan := planWindow(t, tb, newOnly, time.Second)
	if plan.Safe || len(plan.Reasons) != 1 || !strings.Contains(plan.Reasons[0], "QUIC config 1 removed while in use") {
		t.Fatalf("removing config 1 under its connections' traffic: safe %v, reasons %q", plan.Safe, plan.Reasons)
	}

	// 4. The old connections end; once nothing carries config 1's IDs,
	// removing it is safe.
	for _, s := range olds {
		s.Stop()
		if _, failed, err := s.Result(); failed > 0 {
			t.Errorf("connection %d on the old key, on %s: %d exchanges failed: %v", s.ID, s.Backend, failed, err)
		}
	}
	deadline := time.Now().Add(testenv.Scaled(10 * time.Second))
	for plan = planWindow(t, tb, newOnly, time.Second); !plan.Safe && time.Now().Before(deadline); plan = planWindow(t, tb, newOnly, time.Second) {
	}
	if !plan.Safe {
		t.Fatalf("removing config 1 once its connections ended: %q", plan.Reasons)
	}
	apply(t, tb, newOnly)
	migrate(t, tb, news[:6])
	wait()
	for _, s := range news {
		s.Stop()
		ok, failed, err := s.Result()
		if failed > 0 || ok < 10 {
			t.Errorf("connection %d on the new key, on %s: %d exchanges, %d failed: %v", s.ID, s.Backend, ok, failed, err)
		}
	}
	if c := perConfig(); c[2] == 0 {
		t.Errorf("packets routed by config: %v", c)
	}
}

// TestQUICKeyChangeWithoutRotationBreaks is TestQUICKeyRotation's
// control: the servers move to the new key and the table's one config is
// changed to it in place (as without rotation: plan calls it unsafe, and
// it is forced); the connections on the old key move to new client ports,
// as in TestQUICKeyRotation, and are lost (their IDs now follow the rows),
// so TestQUICKeyRotation can fail.
func TestQUICKeyChangeWithoutRotationBreaks(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeQUIC(i); err != nil {
			t.Fatal(err)
		}
	}
	apply(t, tb, QUICConfig(nil, nil, 3, true))
	olds := openQUICs(t, tb, 0)
	for i := 1; i <= 3; i++ {
		if err := tb.RotateQUIC(i, rotatedSettings); err != nil {
			t.Fatal(err)
		}
	}
	commit(t, tb, QUICRotationConfig(3, rotatedSettings), func(*table.Plan) error { return nil })
	migrate(t, tb, olds)
	time.Sleep(testenv.Scaled(1500 * time.Millisecond))
	lost := 0
	for _, s := range olds {
		s.Stop()
		if _, failed, _ := s.Result(); failed > 0 {
			lost++
		}
	}
	if lost == 0 {
		t.Errorf("changing the key in place lost none of 12 connections on the old key: the rotation test cannot tell")
	}
	t.Logf("changing the key in place lost %d of 12 connections", lost)
}

// openQUICs opens 12 QUIC sessions, IDs from base, exchanging lines until
// the test ends.
func openQUICs(t *testing.T, tb *Testbed, base int) []*Session {
	t.Helper()
	var ss []*Session
	t.Cleanup(func() {
		for _, s := range ss {
			s.Stop()
		}
	})
	for i := 0; i < 12; i++ {
		s, err := tb.OpenQUIC(base + i)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		ss = append(ss, s)
	}
	return ss
}

// migrate moves each of ss to a new client port away from its backend's
// row (Testbed.Migrate), all at once; a move that fails counts as a failed
// exchange of its session.
func migrate(t *testing.T, tb *Testbed, ss []*Session) {
	var moves sync.WaitGroup
	for _, s := range ss {
		moves.Go(func() {
			if err := tb.Migrate(s); err != nil {
				t.Logf("connection %d on %s: %v", s.ID, s.Backend, err)
				s.mu.Lock()
				s.failed++
				s.lastErr = err
				s.mu.Unlock()
			}
		})
	}
	moves.Wait()
}

// planWindow plans cfg against the testbed's director, a QUIC-LB config's
// removal watched for window.
func planWindow(t *testing.T, tb *Testbed, cfg string, window time.Duration) *table.Plan {
	t.Helper()
	tabs := buildConfig(t, cfg)
	d, err := tb.OpenDirector()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.QUICWindow = window
	plan, err := d.Plan(&loader.Proposal{Tables: tabs})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}
