package service

import (
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/table"
)

// kernelService is a service over real pins serving in (a one-table config
// of checked backends, all passing at first), its first reconcile done.
func kernelService(t *testing.T, in *input) *service {
	t.Helper()
	testenv.Kernel(t)
	return benchService(t, in)
}

// setCheck makes backend i's checks pass or fail, as of long enough ago
// that every other backend has been checked since (so a down is not
// waiting on them), and its dampened view agree.
func setCheck(s *service, i int, up bool) {
	for _, t := range s.checks.targets {
		if t.ip == backendIP(i) {
			t.damp.StartAt(up)
			t.lastOK = up
			t.failingSince = time.Time{}
			if !up {
				t.failingSince = time.Now().Add(-2 * time.Hour)
			}
		}
	}
}

// liveHealth is the live table's health, + or - a backend.
func liveHealth(t *testing.T, s *service) string {
	t.Helper()
	live, err := s.d.Live()
	if err != nil || len(live) != 1 {
		t.Fatalf("live: %v", err)
	}
	return healthString(live[0].Table.Backends)
}

// TestDownDuringADrainIsApplied: while backend 1 drains, backends fail
// and come back: every down is applied at once, even when it comes with
// an up the drain holds (backend 2 back as backend 3 fails).
func TestDownDuringADrainIsApplied(t *testing.T) {
	s := kernelService(t, checkedInputWith(t, 6, ""))
	// Backend 1 drains (a config edit), which the service applies.
	drained := checkedInputWith(t, 6, "")
	drained.cfg.Tables[0].Backends[0].State = table.StateDraining
	adopt(drained, s.cur)
	s.pending = drained
	if err := s.reconcile("config", false); err != nil || s.pending != nil {
		t.Fatalf("the drain was not applied: %v %+v", err, s.hold.now)
	}
	setCheck(s, 2, false)
	if err := s.reconcile("checks", false); err != nil {
		t.Fatal(err)
	}
	if h := liveHealth(t, s); h != "+-++++" {
		t.Fatalf("backend 2 failed during the drain: live %s; held %+v", h, s.hold.now)
	}
	setCheck(s, 2, true)
	setCheck(s, 3, false)
	if err := s.reconcile("checks", false); err != nil {
		t.Fatal(err)
	}
	if h := liveHealth(t, s); h[2] != '-' {
		t.Fatalf("backend 3 failed during the drain and is still up in the live table (%s); held: %+v", h, s.hold.now)
	}
	// Backend 2's up follows by safe steps, the drain still under way.
	for try := 0; try < 4 && liveHealth(t, s) != "++-+++"; try++ {
		if err := s.reconcile("retry", false); err != nil {
			t.Fatal(err)
		}
		if s.transit != nil {
			s.transit.until = time.Now()
		}
	}
	if h := liveHealth(t, s); h != "++-+++" {
		t.Fatalf("backend 2's up: live %s; held %+v", h, s.hold.now)
	}
	for _, a := range s.recent {
		if a.Verdict != "safe" && !strings.HasPrefix(a.Verdict, "unsafe, applied because backends went down") {
			t.Errorf("applied %v: %s", a.Changes, a.Verdict)
		}
	}
}

// TestComingBackAfterAnOutage: every backend down when the service starts
// (nothing to fall back on), then back one at a time: the service reaches
// the all-healthy table, by safe steps.
func TestComingBackAfterAnOutage(t *testing.T) {
	testenv.Kernel(t)
	in := checkedInputWith(t, 6, "")
	s := newTestService(t, in)
	for i := 1; i <= 6; i++ {
		setCheck(s, i, false)
	}
	startService(t, s)
	if h := liveHealth(t, s); h != "------" {
		t.Fatalf("at the start: live %s", h)
	}
	for i := 1; i <= 6; i++ {
		setCheck(s, i, true)
		for try := 0; try < 6; try++ {
			if err := s.reconcile("retry", false); err != nil {
				t.Fatal(err)
			}
			if s.transit != nil {
				// The transition's wait (ramp_interval_s), passed.
				s.transit.until = time.Now()
			}
		}
		h := liveHealth(t, s)
		if want := strings.Repeat("+", i) + strings.Repeat("-", 6-i); h != want {
			t.Fatalf("backend %d back: live %s, want %s; held %+v", i, h, want, s.hold.now)
		}
	}
	if s.hold.health || len(s.hold.now) > 0 {
		t.Errorf("all back, and still held: %+v", s.hold.now)
	}
	// Every step after the start was safe; the transitions among them.
	transitions := 0
	for _, a := range s.recent[:len(s.recent)-1] {
		if a.Verdict != "safe" {
			t.Errorf("applied %v: %s", a.Changes, a.Verdict)
		}
		if strings.HasSuffix(a.Trigger, "(transition)") {
			transitions++
		}
	}
	if transitions == 0 {
		t.Error("no transition was applied: the test did not test them")
	}
}
