package service

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	drained.cfg().Tables[0].Backends[0].State = table.StateDraining
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
	// Backend 2's up, the drain still under way: with history in the
	// packets, safe at once.
	if err := s.reconcile("retry", false); err != nil {
		t.Fatal(err)
	}
	if h := liveHealth(t, s); h != "++-+++" {
		t.Fatalf("backend 2's up: live %s; held %+v", h, s.hold.now)
	}
	for _, a := range s.pub.recent {
		if a.Verdict != "safe" && !strings.HasPrefix(a.Verdict, "unsafe, applied because backends went down") {
			t.Errorf("applied %v: %s", a.Changes, a.Verdict)
		}
	}
}

// TestDownsAppliedWhenTheRoundFails (issue 46, item 8): when the checks'
// change cannot be applied (here the datapath refuses backend 2 up), its
// downs still are, and the failure is logged and counted.
func TestDownsAppliedWhenTheRoundFails(t *testing.T) {
	s := kernelService(t, checkedInputWith(t, 6, ""))
	var logs strings.Builder
	s.log = slog.New(slog.NewTextHandler(&logs, nil))
	setCheck(s, 2, false)
	if err := s.reconcile("checks", false); err != nil {
		t.Fatal(err)
	}
	if h := liveHealth(t, s); h != "+-++++" {
		t.Fatalf("backend 2 down: live %s", h)
	}
	s.holds = func(ts []*table.Table) error {
		if ts[0].Backends[1].Healthy {
			return errors.New("the test's datapath cannot hold backend 2 up")
		}
		return nil
	}
	failed := testutil.ToFloat64(s.m.applies.WithLabelValues("failed"))
	setCheck(s, 2, true)
	setCheck(s, 4, false)
	s.reconcile("checks", false)
	s.reconcile("retry", false) // failing again: counted, not logged again
	if h := liveHealth(t, s); h != "+-+-++" {
		t.Fatalf("backend 4 down and backend 2 up, the up refused: live %s (want backend 4's down applied alone)\n%s", h, logs.String())
	}
	for _, want := range []string{"cannot build the tables the checks call for", "the test's datapath cannot hold backend 2 up",
		"the checks' change cannot be applied, but its downs can: applying them alone"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("not logged: %q\n%s", want, logs.String())
		}
	}
	if got := testutil.ToFloat64(s.m.applies.WithLabelValues("failed")); got != failed+2 {
		t.Errorf("director_applies_total{result=\"failed\"} %v after two failed rounds, was %v", got, failed)
	}
	if n := strings.Count(logs.String(), "cannot build the tables"); n != 1 {
		t.Errorf("the failure logged %d times in two rounds, want once:\n%s", n, logs.String())
	}
	// Refused no more: the up is applied.
	s.holds = nil
	if err := s.reconcile("retry", false); err != nil {
		t.Fatal(err)
	}
	if h := liveHealth(t, s); h != "+++-++" {
		t.Fatalf("the up allowed again: live %s", h)
	}
	if !strings.Contains(logs.String(), "can be built again") {
		t.Errorf("the end of the failure not logged:\n%s", logs.String())
	}
}

// TestComingBackAfterAnOutage: every backend down when the service starts
// (nothing to fall back on), then back one at a time: each up is applied
// at once, as a safe change.
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
		if err := s.reconcile("checks", false); err != nil {
			t.Fatal(err)
		}
		h := liveHealth(t, s)
		if want := strings.Repeat("+", i) + strings.Repeat("-", 6-i); h != want {
			t.Fatalf("backend %d back: live %s, want %s; held %+v", i, h, want, s.hold.now)
		}
	}
	if s.hold.health || len(s.hold.now) > 0 {
		t.Errorf("all back, and still held: %+v", s.hold.now)
	}
	for _, a := range s.pub.recent[:len(s.pub.recent)-1] {
		if a.Verdict != "safe" {
			t.Errorf("applied %v: %s", a.Changes, a.Verdict)
		}
	}
}

// TestHeldUntilTheWindowPasses: with GLB's two hops (history_hops false),
// a second edit that strands the first's old primaries is held, honestly
// counted at risk, and applied by itself once those are past the window
// (history_s), as a safe change.
func TestHeldUntilTheWindowPasses(t *testing.T) {
	const hops = `"history_hops": false, "history_s": 2`
	s := kernelService(t, checkedInputTable(t, 6, "", hops))
	edit := func(w1, w2 int) {
		t.Helper()
		in := checkedInputTable(t, 6, "", hops)
		in.cfg().Tables[0].Backends[0].Weight = uint16(w1)
		in.cfg().Tables[0].Backends[1].Weight = uint16(w2)
		adopt(in, s.cur)
		s.pending = in
		if err := s.reconcile("config", false); err != nil {
			t.Fatal(err)
		}
	}
	edit(3, 1)
	if s.pending != nil {
		t.Fatalf("raising a weight was held: %+v", s.hold.now)
	}
	edit(3, 3)
	if s.pending == nil || len(s.hold.now) != 1 || !strings.Contains(strings.Join(s.hold.now[0].Reasons, " "), "rows at risk") {
		t.Fatalf("the second raise, which strands the first's old primaries, was not held: %+v", s.hold.now)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.pending != nil && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		if err := s.reconcile("retry", false); err != nil {
			t.Fatal(err)
		}
	}
	if s.pending != nil || s.pub.lastApply == nil || s.pub.lastApply.Verdict != "safe" {
		t.Fatalf("past the window, the held edit is still held (%+v) or was not applied as safe (%+v)", s.hold.now, s.pub.lastApply)
	}
}

// TestLogLinesFollowTheStatus: a person who reads "held", "adopted" or
// "applied" in the log and then asks the status page (or director doctor,
// or a scrape) finds what the line says, never the round before it.
func TestLogLinesFollowTheStatus(t *testing.T) {
	s := kernelService(t, checkedInputTable(t, 3, "", `"history_hops": false`))
	type seen struct {
		held      int
		gauge     float64
		lastApply string
	}
	lines := map[string]seen{}
	s.log = slog.New(&snapshotHandler{snap: func(msg string) {
		st, _ := s.status.current()
		var last string
		if st.LastApply != nil {
			last = st.LastApply.Trigger
		}
		lines[msg] = seen{held: len(st.Held), gauge: testutil.ToFloat64(s.m.held), lastApply: last}
	}})
	edit := func(change func(*input)) {
		t.Helper()
		in := checkedInputTable(t, 3, "", `"history_hops": false`)
		change(in)
		adopt(in, s.cur)
		s.pending = in
		if err := s.reconcile("config", false); err != nil {
			t.Fatal(err)
		}
	}
	const heldLine = "UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with " +
		"'director apply --allow-unsafe' if it is what you want now"
	edit(func(in *input) { in.cfg().Tables[0].HashKey[0] ^= 0xff })
	if got, ok := lines[heldLine]; !ok || got.held != 1 || got.gauge != 1 {
		t.Errorf("when the key edit was logged as held, the status held %d and director_held_changes was %v (logged: %v)", got.held, got.gauge, ok)
	}
	edit(func(in *input) {})
	if got, ok := lines["config edit adopted"]; !ok || got.held != 0 || got.gauge != 0 {
		t.Errorf("when the live key was logged as adopted, the status held %d and director_held_changes was %v (logged: %v)", got.held, got.gauge, ok)
	}
	edit(func(in *input) { in.cfg().Tables[0].Backends[0].State = table.StateDraining })
	if got, ok := lines["applied"]; !ok || got.lastApply != "config" {
		t.Errorf("when the drain was logged as applied, the status's last apply was %q (logged: %v)", got.lastApply, ok)
	}
}

// snapshotHandler calls snap with each record's message as it is logged.
type snapshotHandler struct{ snap func(msg string) }

func (h *snapshotHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *snapshotHandler) Handle(_ context.Context, r slog.Record) error {
	h.snap(r.Message)
	return nil
}
func (h *snapshotHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *snapshotHandler) WithGroup(string) slog.Handler      { return h }

// TestNothingAttachedIsToldAsIs (issue 47, item 12): with no --attach, no
// BGP and nothing attached, the service says nothing is steered, not that
// VIPs it never announced are withdrawn, and on stop that the datapath
// stays loaded, not attached and serving.
func TestNothingAttachedIsToldAsIs(t *testing.T) {
	s := kernelService(t, checkedInputWith(t, 2, ""))
	var logs strings.Builder
	s.log = slog.New(slog.NewTextHandler(&logs, nil))
	s.life.steering = true // as a start leaves it
	s.verifyAttachments("look")
	s.publish()
	s.stop()
	got := logs.String()
	for _, want := range []string{"no interface steers: nothing is steered until one is attached", "stays loaded, attached to no interface"} {
		if !strings.Contains(got, want) {
			t.Errorf("not logged: %q\n%s", want, got)
		}
	}
	for _, wrong := range []string{"VIPs are withdrawn", "attached and serving", "level=ERROR"} {
		if strings.Contains(got, wrong) {
			t.Errorf("logged %q, with nothing announced or attached:\n%s", wrong, got)
		}
	}
}
