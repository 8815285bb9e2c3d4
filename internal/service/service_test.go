package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/change"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/internal/service/health"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

const (
	testKey  = "0f0e0d0c0b0a09080706050403020100"
	testSeed = "00112233445566778899aabbccddeeff"
)

func backendIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }

// checkedInput is a one-table config whose n backends are all left to an
// HTTP check.
func checkedInput(t testing.TB, n int) *input { return checkedInputWith(t, n, "") }

// checkedInputWith is checkedInput with extra backend fields: %d in them
// is the backend's number.
func checkedInputWith(t testing.TB, n int, extra string) *input {
	t.Helper()
	return checkedInputTable(t, n, extra, "")
}

// checkedInputTable is checkedInputWith with tableExtra among the table's
// own settings.
func checkedInputTable(t testing.TB, n int, extra, tableExtra string) *input {
	t.Helper()
	var bs []string
	for i := 1; i <= n; i++ {
		more := ""
		if extra != "" {
			more = ", " + strings.ReplaceAll(extra, "%d", fmt.Sprint(i))
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "%s", "state": "active", "healthchecks": {"http": 80}%s}`, backendIP(i), more))
	}
	if tableExtra != "" {
		tableExtra += ", "
	}
	data := []byte(fmt.Sprintf(`{"tables": [{"name": "api", "hash_key": "%s", "seed": "%s", %s
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}], "backends": [%s]}]}`, testKey, testSeed, tableExtra, strings.Join(bs, ", ")))
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return newInput(&change.Input{Path: "config.json", Data: data, Config: cfg})
}

// testTargets are targets for in's checked backends, all passing, last
// checked an hour ago, as a checker holds them.
func testTargets(in *input) map[string]*target {
	ts := map[string]*target{}
	checkedBackends(in, func(i int, tc *table.TableConfig, k int, b table.Backend) {
		c := health.ChecksOf(b.Healthchecks)
		d := health.NewDampener(2, 2)
		d.StartAt(true)
		ts[targetKey(b.IP, c)] = &target{ip: b.IP, checks: c, damp: d, lastOK: true, checkedAt: time.Now().Add(-time.Hour)}
	})
	return ts
}

// newTestService is a service with no kernel behind it: enough for
// desired, which decides what to apply.
func newTestService(t testing.TB, in *input) *service {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &service{o: Options{FailStatic: 0.5}, cur: in, failStatic: map[string]bool{}, pub: publication{problems: map[string]string{}}, log: log, checks: newChecker(log, 1)}
	s.checks.targets = testTargets(in)
	return s
}

// result gives backend i a check result at time at, as check records it.
func result(ts map[string]*target, i int, ok bool, at time.Time) {
	for _, t := range ts {
		if t.ip == backendIP(i) {
			t.damp.Observe(ok)
			if !ok && t.lastOK {
				t.failingSince = at
			} else if ok {
				t.failingSince = time.Time{}
			}
			t.lastOK, t.checkedAt = ok, at
		}
	}
}

// views is what a checker with targets ts gives judgeHealth.
func views(ts map[string]*target) map[string]checkView {
	c := &checker{targets: ts}
	return c.views()
}

// healthString is backends' health, + or - each.
func healthString(bs []table.Backend) string {
	var b strings.Builder
	for _, be := range bs {
		b.WriteString(map[bool]string{true: "+", false: "-"}[be.Healthy])
	}
	return b.String()
}

// TestFailStaticDecisions: what judgeHealth makes of check results,
// against a live table with every backend up.
func TestFailStaticDecisions(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cases := []struct {
		name     string
		n        int
		fraction float64
		results  func(result func(i int, ok bool, at time.Time))
		want     string
		frozen   bool
	}{
		{"all pass", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			for i := 1; i <= 4; i++ {
				result(i, true, at(10))
			}
		}, "++++", false},
		{"one falls; the others were checked since", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(1, false, at(0))
			for i := 2; i <= 4; i++ {
				result(i, true, at(100+i))
			}
			result(1, false, at(300))
		}, "-+++", false},
		{"one falls before the others were checked again: it waits", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(2, true, at(-50))
			result(1, false, at(0))
			result(1, false, at(300))
		}, "++++", false},
		{"half fall: not more than the fraction", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(1, false, at(0))
			result(2, false, at(0))
			result(3, true, at(50))
			result(4, true, at(50))
			result(1, false, at(300))
			result(2, false, at(300))
		}, "--++", false},
		{"three of four fail", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(1, false, at(0))
			result(2, false, at(10))
			result(3, false, at(20))
			result(4, true, at(30))
			result(1, false, at(300))
		}, "++++", true},
		{"a partition: the first to fall, the rest failing once", 4, 0.5, func(result func(i int, ok bool, at time.Time)) {
			for i := 1; i <= 4; i++ {
				result(i, false, at(i))
			}
			result(1, false, at(300))
		}, "++++", true},
		{"all fail, whatever the fraction", 2, 1, func(result func(i int, ok bool, at time.Time)) {
			for r := 0; r < 2; r++ {
				result(1, false, at(r*300))
				result(2, false, at(r*300+1))
			}
		}, "++", true},
		{"one of two falls with fraction 0.5: exactly half", 2, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(2, true, at(100))
			result(1, false, at(0))
			result(1, false, at(300))
		}, "-+", false},
		{"a backend passing again on its way up stays", 2, 0.5, func(result func(i int, ok bool, at time.Time)) {
			result(2, true, at(100))
			result(1, false, at(0))
			result(1, false, at(300))
			result(1, true, at(600)) // dampened: still down
		}, "++", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := checkedInput(t, c.n)
			live, err := table.BuildAll(upConfig(in.cfg()))
			if err != nil {
				t.Fatal(err)
			}
			ts := testTargets(in)
			c.results(func(i int, ok bool, at time.Time) { result(ts, i, ok, at) })
			d := judgeHealth(&in.cfg().Tables[0], live[0], views(ts), c.fraction)
			got, frozen := healthString(d.Backends), d.FailStatic
			if got != c.want || frozen != c.frozen {
				t.Errorf("health %s fail-static %v, want %s %v", got, frozen, c.want, c.frozen)
			}
		})
	}
}

// upConfig is c with every backend healthy.
func upConfig(c *table.Config) *table.Config {
	u := *c
	u.Tables = append([]table.TableConfig(nil), c.Tables...)
	for i := range u.Tables {
		u.Tables[i].Backends = append([]table.Backend(nil), u.Tables[i].Backends...)
		for k := range u.Tables[i].Backends {
			u.Tables[i].Backends[k].Healthy = true
		}
	}
	return &u
}

// TestIncrementalBuildMatchesFull: the tables desired builds by flipping
// one backend at a time on its builder are the tables a full build gives.
func TestIncrementalBuildMatchesFull(t *testing.T) {
	in := checkedInput(t, 40)
	s := newTestService(t, in)
	s.live = liveState{} // nothing live: no fail-static, health as found
	for step, i := range []int{3, 17, 3, 40, 1, 17} {
		for _, tg := range s.checks.targets {
			if tg.ip == backendIP(i) {
				tg.damp.StartAt(!tg.damp.Up())
			}
		}
		tables, fps, _, err := s.desired(in)
		if err != nil {
			t.Fatal(err)
		}
		c := in.cfg().Tables[0]
		c.Backends = append([]table.Backend(nil), tables[0].Backends...)
		want, err := table.Build(&c)
		if err != nil {
			t.Fatal(err)
		}
		if fps[0] != table.Fingerprint(want) || table.Fingerprint(tables[0]) != fps[0] {
			t.Fatalf("step %d: the incremental table differs from a full build", step)
		}
	}
}

// TestCoalescer: a lone change is applied at once; a burst within a
// window costs one more apply, at the window's end.
func TestCoalescer(t *testing.T) {
	c := coalescer{window: 50 * time.Millisecond}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	if w := c.change(at(0)); w != 0 {
		t.Fatalf("a lone change waits %v", w)
	}
	c.applied(at(2))
	applies := 1
	var due time.Time
	for ms := 3; ms < 40; ms += 3 { // a burst: twelve changes
		w := c.change(at(ms))
		if w == 0 {
			t.Fatalf("change at %dms applied at once, within the window", ms)
		}
		if d := at(ms).Add(w); !due.IsZero() && !d.Equal(due) {
			t.Fatalf("changes of one burst are due at different times: %v, %v", due, d)
		} else {
			due = d
		}
	}
	if !due.Equal(at(52)) {
		t.Errorf("the burst is due at %v, want the window's end after the last apply", due.Sub(t0))
	}
	c.applied(at(53))
	applies++
	if applies != 2 {
		t.Fatal(applies)
	}
	if w := c.change(at(200)); w != 0 {
		t.Errorf("a change long after is not applied at once: %v", w)
	}
}

// TestMetricNamesAndTypes: every metric the service exports, by name and
// type, linted with client_golang's testutil (names, units, _total).
func TestMetricNamesAndTypes(t *testing.T) {
	m := newMetrics(func() (*loader.Stats, error) {
		return &loader.Stats{Global: map[string]uint64{"processed": 10, "pass_no_bind": 2, "error_no_table": 1},
			Tables: []loader.TableStats{{Name: "api", Backends: []loader.BackendStats{{IP: "10.1.0.1", Traffic: loader.Traffic{Packets: 3, Bytes: 300}}},
				QUIC: []loader.QUICStats{{Counters: map[string]uint64{"quic_fallback_short": 1}}}}},
			Interfaces: []loader.InterfaceStats{{Interface: "eth0", RxPackets: 5}}}, nil
	})
	m.observe(netip.MustParseAddr("10.1.0.1"), []health.Result{{Kind: "http", OK: false, Reason: "refused"}, {Kind: "gue", OK: true}})
	m.backendHealthy.WithLabelValues("api", "10.1.0.1").Set(1)
	m.backendWeight.WithLabelValues("api", "10.1.0.1").Set(1)
	m.backendDomain.WithLabelValues("api", "10.1.0.1", "rack-a").Set(1)
	m.tableInfo.WithLabelValues("api", "abc").Set(1)
	m.applies.WithLabelValues("applied").Inc()
	m.applyDuration.Observe(0.004)
	m.lastApply.SetToCurrentTime()
	m.held.Set(0)
	m.historyOverflow.Add(0)
	m.historyRows.WithLabelValues("api").Set(3)
	m.historyHopRows.WithLabelValues("api").Set(1)
	m.failStatic.WithLabelValues("api").Set(0)
	m.configErrors.Add(0)
	m.attached.WithLabelValues("eth0", "native").Set(1)
	m.vipsAnnounced.Set(1)
	m.bgpPeers = func() []status.Peer {
		return []status.Peer{{Address: "10.78.0.1", ASN: 65000, State: "established", Established: true, Flaps: 2, Advertised: 1}}
	}
	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		got[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	want := map[string]string{
		"director_backend_healthy": "gauge", "director_backend_weight": "gauge", "director_backend_domain_info": "gauge", "director_check_up": "gauge", "director_check_latency_seconds": "gauge",
		"director_check_failures_total": "counter", "director_table_info": "gauge", "director_applies_total": "counter",
		"director_apply_duration_seconds": "histogram", "director_last_apply_success_timestamp_seconds": "gauge",
		"director_held_changes": "gauge", "director_history_overflow_rows_total": "counter", "director_history_rows": "gauge",
		"director_history_hop_rows": "gauge", "director_fail_static": "gauge", "director_config_errors_total": "counter",
		"director_interface_attached":      "gauge",
		"director_packets_processed_total": "counter", "director_packets_matched_total": "counter",
		"director_packets_encapsulated_total": "counter", "director_encapsulated_bytes_total": "counter",
		"director_bind_fast_total": "counter", "director_bind_group_total": "counter", "director_packets_passed_total": "counter", "director_packet_errors_total": "counter",
		"director_quic_packets_total": "counter", "director_quic_icmp_routed_total": "counter", "director_quic_table_packets_total": "counter",
		"director_backend_packets_total": "counter", "director_backend_bytes_total": "counter",
		"director_interface_packets_total": "counter", "director_interface_dropped_total": "counter", "director_interface_errors_total": "counter",
		"director_bgp_vips_announced": "gauge", "director_bgp_session_established": "gauge", "director_bgp_session_flaps_total": "counter",
		"director_bgp_advertised_prefixes": "gauge",
	}
	for name, typ := range want {
		if got[name] != typ {
			t.Errorf("%s: %q, want %s", name, got[name], typ)
		}
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range got {
		if want[name] == "" {
			t.Errorf("%s is exported but not known to this test", name)
		}
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("%s is exported but not in docs/metrics.md", name)
		}
	}
	if v := testutil.ToFloat64(m.checkFailures.WithLabelValues("10.1.0.1", "http", "refused")); v != 1 {
		t.Errorf("check failures: %v", v)
	}
}

// BenchmarkHealthFlipApplied is a health flip of one backend of a
// 256-backend table, from the checks' verdict to the table applied in the
// kernel and read back: the incremental rebuild, the plan, the apply and
// its check, through the service's own path.
func BenchmarkHealthFlipApplied(b *testing.B) {
	for _, c := range []struct{ name, extra, table string }{
		{"glb", "", ""}, {"weighted", `"weight": %d`, ""}, {"domains", `"domain": "rack-%d"`, ""},
		{"balanced", "", `"balance_factor": 1.01`},
	} {
		b.Run(c.name, func(b *testing.B) { benchmarkHealthFlip(b, checkedInputTable(b, 256, c.extra, c.table)) })
	}
}

// benchService is a service serving in from a director of its own in
// bpffs, started as 'director run' starts (unloaded when b ends).
func benchService(b testing.TB, in *input) *service {
	testenv.Kernel(b)
	s := newTestService(b, in)
	startService(b, s)
	return s
}

// startService gives s pins of its own, unloaded when t ends, and does its
// first reconcile.
func startService(t testing.TB, s *service) {
	t.Helper()
	dir := filepath.Join("/sys/fs/bpf", fmt.Sprintf("director-bench-%d", time.Now().UnixNano()))
	d, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		loader.Unload(dir)
	})
	s.d, s.m = d, newMetrics(d.Stats)
	s.checks.m = s.m
	s.bgp = &announcer{log: s.log, m: s.m, changed: func() {}}
	s.status = &statusBoard{}
	s.o.BPFFS = dir
	if err := s.reconcile("start", true); err != nil {
		t.Fatal(err)
	}
}

func benchmarkHealthFlip(b *testing.B, in *input) {
	s := benchService(b, in)
	var flip *target
	for _, t := range s.checks.targets {
		if t.ip == backendIP(100) {
			flip = t
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		up := i%2 == 1
		flip.damp.StartAt(up)
		flip.lastOK = up
		flip.failingSince = time.Now().Add(-2 * time.Hour) // before the others' last results
		before := s.m.applies.WithLabelValues("applied")
		n := testutil.ToFloat64(before)
		if err := s.reconcile("checks", false); err != nil {
			b.Fatal(err)
		}
		if testutil.ToFloat64(before) != n+1 {
			b.Fatalf("flip %d was not applied", i)
		}
	}
}

// TestVIPs: each bind's prefix (an address as a host route, host bits of a
// prefix cleared), for tables with a good backend; with withdraw-when-down
// off, every table's.
func TestVIPs(t *testing.T) {
	c, err := config.Parse([]byte(`{"tables": [
	  {"name": "up", "hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	   "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}, {"ip": "10.9.0.7/24", "proto": "udp", "port": 53}, {"ip": "fd00::1", "proto": "tcp", "port": 80}],
	   "backends": [{"ip": "10.1.0.1", "state": "active", "healthy": true}]},
	  {"name": "down", "hash_key": "` + testKey + `", "seed": "` + testSeed + `",
	   "binds": [{"ip": "10.0.0.2", "proto": "tcp", "port": 80}, {"ip": "10.0.0.1", "proto": "tcp", "port": 443}],
	   "backends": [{"ip": "10.1.0.2", "state": "active", "healthy": false}, {"ip": "10.1.0.3", "state": "draining", "healthy": true}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	show := func(ps []netip.Prefix) string {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = p.String()
		}
		sort.Strings(s)
		return strings.Join(s, " ")
	}
	if got := show(VIPs(tables, true)); got != "10.0.0.1/32 10.9.0.0/24 fd00::1/128" {
		t.Errorf("withdraw when down: %s", got)
	}
	if got := show(VIPs(tables, false)); got != "10.0.0.1/32 10.0.0.2/32 10.9.0.0/24 fd00::1/128" {
		t.Errorf("announce all: %s", got)
	}
}

// withFewDescriptors runs f with no descriptor to spare: every socket f's
// checks open fails with EMFILE, as on a director whose descriptors a
// flood of clients took. The limit is what is open now and a few more,
// and those few, and any hole below, are taken by /dev/null, so that a
// descriptor another test's goroutine closes meanwhile is none to spare.
func withFewDescriptors(t *testing.T, f func()) {
	t.Helper()
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	highest := 0
	for _, e := range fds {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > highest {
			highest = n
		}
	}
	low := old
	low.Cur = uint64(highest + 8)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	var fill []*os.File
	defer func() {
		for _, f := range fill {
			f.Close()
		}
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break // EMFILE: nothing is left
		}
		fill = append(fill, f)
	}
	f()
}

// TestChecksTheDirectorCannotMakeTakeNothingDown: when the director is out
// of descriptors, every check fails with EMFILE; none of it is the
// backends' fault, so they stay up, and the skipped checks are counted.
func TestChecksTheDirectorCannotMakeTakeNothingDown(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	lo := netip.MustParseAddr("127.0.0.1")
	c := newChecker(slog.New(slog.NewTextHandler(io.Discard, nil)), 1)
	c.m = newMetrics(nil)
	c.configure(200*time.Millisecond, health.Sources{V4: lo})
	defer c.close()
	tg := &target{ip: lo, checks: health.Checks{TCP: port}, damp: health.NewDampener(2, 2), lastOK: true}
	tg.damp.StartAt(true)
	withFewDescriptors(t, func() {
		for i := 0; i < 4; i++ {
			c.check(context.Background(), tg, false)
		}
	})
	if !tg.damp.Up() || !tg.lastOK {
		t.Fatalf("after checks the director could not make: up %v, last ok %v", tg.damp.Up(), tg.lastOK)
	}
	if got := testutil.ToFloat64(c.m.checksSkipped.WithLabelValues("director: too many open files")); got != 4 {
		t.Errorf("director_checks_skipped_total %v, want 4", got)
	}
	// With descriptors again, a real failure still counts.
	ln.Close()
	for i := 0; i < 2; i++ {
		c.check(context.Background(), tg, false)
	}
	if tg.damp.Up() {
		t.Error("a backend refusing connections stayed up")
	}
}

// TestWhyIsWhatFlippedIt: the audit log's reason for a backend going down
// is the round of checks that took it down, not a later one that passed
// (the apply may come after the checks have recovered).
func TestWhyIsWhatFlippedIt(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	lo := netip.MustParseAddr("127.0.0.1")
	c := newChecker(slog.New(slog.NewTextHandler(io.Discard, nil)), 1)
	c.m = newMetrics(nil)
	c.configure(200*time.Millisecond, health.Sources{V4: lo})
	defer c.close()
	hc := &table.Healthchecks{TCP: &port}
	tg := &target{ip: lo, checks: health.ChecksOf(hc), damp: health.NewDampener(1, 1), lastOK: true}
	tg.damp.StartAt(true)
	c.targets[targetKey(lo, tg.checks)] = tg
	ln.Close() // refused
	c.check(context.Background(), tg, false)
	if tg.damp.Up() {
		t.Fatal("a refused check did not take the backend down")
	}
	down := table.Backend{IP: lo, Checked: true, Healthchecks: hc}
	if got := why(c.views(), down); !strings.Contains(got, "refused") {
		t.Fatalf("why down: %q", got)
	}
	built := c.views() // what a round built the down from
	// The checks pass again before the change is applied (rise 2: still
	// down): the reason stays the failure.
	tg.damp = health.NewDampener(2, 1)
	tg.damp.StartAt(false)
	ln2, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Skipf("port %d taken again meanwhile: %v", port, err)
	}
	defer ln2.Close()
	c.check(context.Background(), tg, false)
	if got := why(c.views(), down); !strings.Contains(got, "refused") || strings.Contains(got, "ok") {
		t.Errorf("why down, after a passing check: %q", got)
	}
	// And up again (rise 1) while the round that saw it down applies: that
	// round's reason is still the failure it was built from.
	tg.damp.Rise = 1
	c.check(context.Background(), tg, false)
	if !tg.damp.Up() {
		t.Fatal("a passing check did not bring the backend up at rise 1")
	}
	if got := why(built, down); !strings.Contains(got, "refused") || strings.Contains(got, "ok") {
		t.Errorf("why down, told after the backend came up again: %q", got)
	}
}

// TestAttachedNeverMissing: the attachment is re-exported every interval,
// and a scrape in between must still find it (a delete-then-set once let
// the hostile-host test scrape an attached eth0 as absent).
func TestAttachedNeverMissing(t *testing.T) {
	s := &service{m: newMetrics(nil)}
	s.setAttached("eth0", "native", true)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				s.setAttached("eth0", "native", true)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 2000; i++ {
		if n := testutil.CollectAndCount(s.m.attached); n != 1 {
			t.Fatalf("scrape %d found %d director_interface_attached samples for an attached eth0", i, n)
		}
	}
}

// TestAttachedModeChange: a new mode replaces the old one's sample.
func TestAttachedModeChange(t *testing.T) {
	s := &service{m: newMetrics(nil)}
	s.setAttached("eth0", "native", true)
	s.setAttached("eth0", "generic", false)
	if n := testutil.CollectAndCount(s.m.attached); n != 1 {
		t.Fatalf("%d samples after a mode change, want the new mode's alone", n)
	}
	if v := testutil.ToFloat64(s.m.attached.WithLabelValues("eth0", "generic")); v != 0 {
		t.Fatalf("eth0 generic = %v, want 0", v)
	}
}

func exportTable(name string, bs ...table.Backend) *table.Table {
	return &table.Table{Name: name, Backends: bs}
}

func be(ip string, healthy bool, domain string) table.Backend {
	return table.Backend{IP: netip.MustParseAddr(ip), State: table.StateActive, Healthy: healthy, Domain: domain}
}

// TestExportLive: the live tables' series after each apply are exactly
// what the tables say: a changed table's stale series go, a removed
// table's all go, an unchanged table's stay.
func TestExportLive(t *testing.T) {
	s := &service{m: newMetrics(nil)}
	a1 := exportTable("a", be("10.0.0.1", true, "r1"), be("10.0.0.2", true, "r2"), be("10.0.0.3", false, ""))
	b1 := exportTable("b", be("10.1.0.1", true, ""))
	s.exportLive([]*table.Table{a1, b1}, []string{"fa1", "fb1"})
	// a: 10.0.0.2 removed, 10.0.0.1 to r9 and down, 10.0.0.4 added; b gone; c new.
	a2 := exportTable("a", be("10.0.0.1", false, "r9"), be("10.0.0.3", false, ""), be("10.0.0.4", true, "r2"))
	c1 := exportTable("c", be("10.2.0.1", true, ""))
	s.exportLive([]*table.Table{a2, c1}, []string{"fa2", "fc1"})
	// Counted before the values are read: reading a series makes it.
	for _, c := range []struct {
		v    *prometheus.GaugeVec
		want int
	}{{s.m.backendDomain, 2}, {s.m.backendHealthy, 4}, {s.m.backendWeight, 4}, {s.m.tableInfo, 2}} {
		if n := testutil.CollectAndCount(c.v); n != c.want {
			t.Errorf("%d series of a vector, want %d", n, c.want)
		}
	}
	for _, c := range []struct {
		v      *prometheus.GaugeVec
		labels []string
		want   float64
	}{
		{s.m.backendDomain, []string{"a", "10.0.0.1", "r9"}, 1}, {s.m.backendDomain, []string{"a", "10.0.0.4", "r2"}, 1},
		{s.m.backendHealthy, []string{"a", "10.0.0.1"}, 0}, {s.m.backendHealthy, []string{"a", "10.0.0.4"}, 1},
		{s.m.backendHealthy, []string{"c", "10.2.0.1"}, 1}, {s.m.tableInfo, []string{"a", "fa2"}, 1},
	} {
		if v := testutil.ToFloat64(c.v.WithLabelValues(c.labels...)); v != c.want {
			t.Errorf("%v = %v, want %v", c.labels, v, c.want)
		}
	}
}

// TestExportLiveNeverMissing: while applies re-export the live tables, a
// scrape always finds every live backend.
func TestExportLiveNeverMissing(t *testing.T) {
	s := &service{m: newMetrics(nil)}
	var bs []table.Backend
	for i := 1; i <= 64; i++ {
		bs = append(bs, be(fmt.Sprintf("10.0.0.%d", i), true, ""))
	}
	s.exportLive([]*table.Table{exportTable("a", bs...)}, []string{"f0"})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			flipped := slices.Clone(bs)
			flipped[i%64].Healthy = i%2 == 0
			s.exportLive([]*table.Table{exportTable("a", flipped...)}, []string{fmt.Sprint("f", i%2)})
		}
	}()
	defer func() { close(stop); <-done }()
	for i := 0; i < 2000; i++ {
		if n := testutil.CollectAndCount(s.m.backendHealthy); n != 64 {
			t.Fatalf("scrape %d found %d of the 64 live backends", i, n)
		}
	}
}

// TestExportBalance: each backend's primary rows, and with a balance
// factor each good backend's cap, are exported as the table has them; the
// caps go when the factor does.
func TestExportBalance(t *testing.T) {
	s := &service{m: newMetrics(nil)}
	tc := &table.TableConfig{Name: "a", Balance: 1010}
	for i := 1; i <= 40; i++ {
		tc.Backends = append(tc.Backends, be(fmt.Sprintf("10.0.0.%d", i), i != 7, ""))
	}
	bt, err := table.Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	s.exportLive([]*table.Table{bt}, []string{table.Fingerprint(bt)})
	if n := testutil.CollectAndCount(s.m.backendCap); n != 39 {
		t.Errorf("%d cap series, want 39 (the good backends)", n)
	}
	caps := table.Caps(bt.Backends, bt.Balance)
	prim := make([]int, len(bt.Backends))
	for _, r := range bt.Rows {
		prim[r.Primary]++
	}
	for i, b := range bt.Backends {
		if v := testutil.ToFloat64(s.m.backendRows.WithLabelValues("a", b.IP.String())); v != float64(prim[i]) {
			t.Errorf("%s primary rows %v, want %d", b.IP, v, prim[i])
		}
		if i != 6 {
			if v := testutil.ToFloat64(s.m.backendCap.WithLabelValues("a", b.IP.String())); v != float64(caps[i]) || caps[i] == 0 {
				t.Errorf("%s cap %v, want %d", b.IP, v, caps[i])
			}
		}
	}
	tc.Balance = 0
	ut, err := table.Build(tc)
	if err != nil {
		t.Fatal(err)
	}
	s.exportLive([]*table.Table{ut}, []string{table.Fingerprint(ut)})
	if n := testutil.CollectAndCount(s.m.backendCap); n != 0 {
		t.Errorf("%d cap series without a balance factor", n)
	}
}

// TestQUICMetrics: the datapath's QUIC-LB counters are
// director_quic_packets_total, one series per result, with the counters'
// values, whose results add up to the packets; the ICMP errors among the
// routed have their own metric.
func TestQUICMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&datapathCollector{stats: func() (*loader.Stats, error) {
		one, three := uint8(1), uint8(3)
		return &loader.Stats{Global: map[string]uint64{"quic_routed": 7, "quic_fallback_unknown_id": 3, "quic_fallback_short": 1,
			"quic_icmp_routed": 2},
			Tables: []loader.TableStats{{Name: "h3", QUIC: []loader.QUICStats{
				{ConfigID: &one, Counters: map[string]uint64{"quic_routed": 7, "quic_icmp_routed": 2, "quic_fallback_unknown_id": 2}},
				{ConfigID: &three, Counters: map[string]uint64{"quic_fallback_unknown_id": 1}},
				{Counters: map[string]uint64{"quic_fallback_short": 1}}}}}}, nil
	}})
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`# HELP director_quic_table_packets_total A QUIC-LB table's UDP packets by the config rotation their connection ID carries (none: no ID read), routed or fallback_..., as director_quic_packets_total.
# TYPE director_quic_table_packets_total counter
director_quic_table_packets_total{config="1",result="fallback_unknown_id",table="h3"} 2
director_quic_table_packets_total{config="1",result="routed",table="h3"} 7
director_quic_table_packets_total{config="3",result="fallback_unknown_id",table="h3"} 1
director_quic_table_packets_total{config="none",result="fallback_short",table="h3"} 1
`), "director_quic_table_packets_total"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "director_quic_icmp_routed_total"); n != 1 || err != nil {
		t.Fatalf("%d series of director_quic_icmp_routed_total (%v)", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`# HELP director_quic_icmp_routed_total ICMP errors sent to the server that the connection ID of the QUIC packet they quote names (of director_quic_packets_total{result="routed"}).
# TYPE director_quic_icmp_routed_total counter
director_quic_icmp_routed_total 2
`), "director_quic_icmp_routed_total"); err != nil {
		t.Error(err)
	}
	want := map[string]float64{"routed": 7, "fallback_short": 1, "fallback_cid_len": 0, "fallback_unroutable": 0,
		"fallback_other_config": 0, "fallback_unknown_id": 3}
	for result, v := range want {
		m, err := testutil.GatherAndCount(reg, "director_quic_packets_total")
		if err != nil || m != len(want) {
			t.Fatalf("%d series of director_quic_packets_total (%v), want %d", m, err, len(want))
		}
		got := gatherValue(t, reg, "director_quic_packets_total", "result", result)
		if got != v {
			t.Errorf("director_quic_packets_total{result=%q} = %v, want %v", result, got, v)
		}
	}
}

// gatherValue is the value of the series of name whose label is value.
func gatherValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{%s=%q}", name, label, value)
	return 0
}
