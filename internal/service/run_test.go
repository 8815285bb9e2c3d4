package service

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// TestRunEmptyConfig: GLB's packaged default, {"tables": []}, is served
// (nothing is steered until tables arrive); a second run on the same pins
// is refused while the first runs; the first stops when asked and leaves
// the pins; a bad config is refused before anything is touched.
func TestRunEmptyConfig(t *testing.T) {
	testenv.Kernel(t)
	dir := testenv.PinDir("director-svc")
	t.Cleanup(func() { loader.Unload(dir) })
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "forwarding_table.src.json")
	if err := os.WriteFile(cfg, []byte(`{"tables": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	opts := func(ready func(string)) Options {
		return Options{Config: cfg, BPFFS: dir, LockDir: tmp, Ready: ready, Log: slog.New(slog.NewTextHandler(&logs, nil)), Exit: noExit(&logs)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts(func(s string) { ready <- s })) }()
	select {
	case s := <-ready:
		if !strings.Contains(s, "serving 0 tables") {
			t.Errorf("status %q", s)
		}
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("not ready")
	}
	if !strings.Contains(logs.String(), "passes every packet") {
		t.Errorf("no warning about the empty config:\n%s", logs.String())
	}
	err := Run(context.Background(), Options{Config: cfg, BPFFS: dir, LockDir: tmp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "already serves") || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Errorf("a second run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatalf("the pins after stopping: %v", err)
	}
	live, err := d.Live()
	d.Close()
	if err != nil || len(live) != 0 {
		t.Fatalf("live after an empty config: %v %d tables", err, len(live))
	}
	bad := filepath.Join(tmp, "bad.json")
	os.WriteFile(bad, []byte(`{"tables": [{"name": "x"}]}`), 0o600)
	err = Run(context.Background(), Options{Config: bad, BPFFS: dir + "-never", LockDir: tmp, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "tables[0].hash_key") {
		t.Fatalf("a bad config: %v", err)
	}
	if _, err := os.Stat(dir + "-never"); !os.IsNotExist(err) {
		t.Fatal("a bad config touched the pins")
	}
}

// syncBuffer is a log sink the test may read while the service writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// rampTestConfig is a table of 12 backends at weight 10000 but the first,
// at w, with checks every 100 ms and ramp steps every second.
func rampTestConfig(seed string, w int) string {
	var bs []string
	for i := 0; i < 12; i++ {
		weight := 10000
		if i == 0 {
			weight = w
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "192.168.61.%d", "state": "active", "healthy": true, "weight": %d}`, 10+i, weight))
	}
	return `{"healthchecks": {"interval_ms": 100, "timeout_ms": 50, "trigger": 1},
	 "tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "` + seed + `", "ramp_interval_s": 1,
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}], "backends": [` + strings.Join(bs, ",\n") + `]}]}`
}

// TestRunRampsALoweredWeight: an edit that lowers a weight, unsafe in one
// step, is carried out by the service as the ramp plan proposes, one step
// a ramp interval, each applied as a safe change, and then adopted.
// rampSeed is a seed for rampTestConfig whose ramp from 40000 to 39000
// has min to 6 steps, and the ramp.
func rampSeed(t *testing.T, min int) (string, *table.Ramp) {
	t.Helper()
	for s := 0; s < 40; s++ {
		seed := fmt.Sprintf("%032x", 5000+s)
		from, _ := config.Parse([]byte(rampTestConfig(seed, 40000)))
		to, _ := config.Parse([]byte(rampTestConfig(seed, 39000)))
		live, err := table.Build(&from.Tables[0])
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := table.FindRamp(live, &to.Tables[0]); r != nil && len(r.Steps) >= min && len(r.Steps) <= 6 {
			return seed, r
		}
	}
	t.Fatalf("no seed of 40 has a ramp of %d to 6 steps", min)
	return "", nil
}

func TestRunRampsALoweredWeight(t *testing.T) {
	testenv.Kernel(t)
	// A seed whose ramp is short enough for a test.
	seed, ramp := rampSeed(t, 2)
	dir := testenv.PinDir("director-svc")
	t.Cleanup(func() { loader.Unload(dir) })
	tmp := t.TempDir()
	metrics := freeAddr(t)
	r := startRunAt(t, dir, tmp, writeFile(t, tmp, rampTestConfig(seed, 40000)), &syncBuffer{}, func(o *Options) { o.MetricsAddr = metrics })
	cfg, d, logs := r.cfg, r.d, r.logs
	weight := func() uint16 {
		live, err := d.Live()
		if err != nil || len(live) != 1 {
			t.Fatalf("live: %v", err)
		}
		return live[0].Table.Backends[0].W()
	}
	if err := os.WriteFile(cfg+".new", []byte(rampTestConfig(seed, 39000)), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Rename(cfg+".new", cfg)
	var seen []uint16
	heldDuring := 0.0 // director_held_changes while the ramp ran: it holds nothing for a person
	deadline := time.Now().Add(time.Duration(len(ramp.Steps)+5) * 2 * time.Second)
	for time.Now().Before(deadline) {
		if w := weight(); len(seen) == 0 || seen[len(seen)-1] != w {
			seen = append(seen, w)
		}
		// Before the first step too: an edit a ramp will take is not held.
		heldDuring = max(heldDuring, gauge(t, metrics, "director_held_changes"))
		if strings.Contains(logs.String(), `"msg":"config edit adopted"`) {
			// The last step may have come between the read and the log.
			if w := weight(); seen[len(seen)-1] != w {
				seen = append(seen, w)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := append([]uint16{40000}, ramp.Steps...); !slices.Equal(seen, want) {
		t.Fatalf("live weights %v, want the ramp %v\n%s", seen, want, logs.String())
	}
	if heldDuring != 0 {
		t.Errorf("director_held_changes was %v while the ramp ran by itself", heldDuring)
	}
	// Nor is it logged as waiting for a person.
	if strings.Contains(logs.String(), "UNSAFE config edit held") || !strings.Contains(logs.String(), "a ramp takes it in steps") {
		t.Errorf("the log says a person must apply an edit a ramp takes:\n%s", logs.String())
	}
	// Every step but the last is a ramp step; the last is the edit
	// itself, safe by then; each a ramp interval after the one before.
	if n := strings.Count(logs.String(), `"msg":"ramp step applied"`); n != len(ramp.Steps)-1 {
		t.Errorf("%d ramp steps logged, want %d", n, len(ramp.Steps)-1)
	}
	if !strings.Contains(logs.String(), `"msg":"config edit adopted"`) {
		t.Errorf("the edit was not adopted after the ramp:\n%s", logs.String())
	}
	var times []time.Time
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec struct {
			Time    time.Time
			Msg     string
			Trigger string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "applied" && rec.Trigger != "start" {
			times = append(times, rec.Time)
		}
	}
	if len(times) != len(ramp.Steps) {
		t.Fatalf("%d applies after the start, want %d (the ramp's steps)", len(times), len(ramp.Steps))
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 950*time.Millisecond {
			t.Errorf("step %d came %v after the one before: sooner than the ramp interval (1 s)", i, gap)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// testRun is a director run started by startRun.
type testRun struct {
	cfg  string           // its config file
	d    *loader.Director // its pins, opened
	logs *syncBuffer      // its JSON log
	stop func() error     // ends it, returning what Run did
}

// startRun starts a director run of its own pins serving body, polling its
// config file every 50 ms, and waits for it to be ready. It is stopped and
// unloaded when t ends, if not before.
func startRun(t *testing.T, body string) *testRun {
	t.Helper()
	dir := testenv.PinDir("director-svc")
	t.Cleanup(func() { loader.Unload(dir) })
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "forwarding_table.src.json")
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return startRunAt(t, dir, tmp, cfg, &syncBuffer{})
}

// startRunAt starts a director run on the pins dir, its run files in tmp,
// serving the config file cfg, logging to logs.
func startRunAt(t *testing.T, dir, tmp, cfg string, logs *syncBuffer, edit ...func(*Options)) *testRun {
	t.Helper()
	r := &testRun{cfg: cfg, logs: logs}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o := Options{Config: r.cfg, BPFFS: dir, LockDir: tmp, Poll: 50 * time.Millisecond, Exit: noExit(r.logs),
		Ready: func(s string) { ready <- s }, Log: slog.New(slog.NewJSONHandler(r.logs, nil))}
	for _, f := range edit {
		f(&o)
	}
	go func() { done <- Run(ctx, o) }()
	var stopped error
	stopOnce := sync.OnceFunc(func() { cancel(); stopped = <-done })
	r.stop = func() error { stopOnce(); return stopped }
	t.Cleanup(stopOnce)
	select {
	case <-ready:
	case err := <-done:
		done <- err // for stop
		t.Fatalf("run: %v\n%s", err, r.logs.String())
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("not ready")
	}
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r.d = d
	return r
}

// balanceTestConfig is a table of n equal backends with a balance factor
// of 1.01, checks every 100 ms and ramp steps every second.
func balanceTestConfig(seed string, n int) string {
	var bs []string
	for i := 0; i < n; i++ {
		bs = append(bs, fmt.Sprintf(`{"ip": "192.168.62.%d", "state": "active", "healthy": true}`, 10+i))
	}
	return `{"healthchecks": {"interval_ms": 100, "timeout_ms": 50, "trigger": 1},
	 "tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "` + seed + `", "ramp_interval_s": 1, "balance_factor": 1.01,
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}], "backends": [` + strings.Join(bs, ",\n") + `]}]}`
}

// TestRunRampsABalancedAdd: adding a backend to a table with a balance
// factor, unsafe in one step, is carried out as the balance ramp: the
// table without the factor first, then a ramp interval later the edit,
// each change putting no row at risk.
func TestRunRampsABalancedAdd(t *testing.T) {
	testenv.Kernel(t)
	const n = 40
	var seed string
	for s := 0; s < 20 && seed == ""; s++ {
		sd := fmt.Sprintf("%032x", 7000+s)
		from, _ := config.Parse([]byte(balanceTestConfig(sd, n)))
		to, _ := config.Parse([]byte(balanceTestConfig(sd, n+1)))
		live, err := table.Build(&from.Tables[0])
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := table.FindRamp(live, &to.Tables[0]); r != nil && r.Kind == table.RampBalance {
			seed = sd
		}
	}
	if seed == "" {
		t.Fatal("no seed of 20 puts rows at risk adding a backend")
	}
	r := startRun(t, balanceTestConfig(seed, n))
	cfg, d, logs := r.cfg, r.d, r.logs
	live := func() *table.Table {
		lt, err := d.Live()
		if err != nil || len(lt) != 1 {
			t.Fatalf("live: %v", err)
		}
		return lt[0].Table
	}
	if err := os.WriteFile(cfg+".new", []byte(balanceTestConfig(seed, n+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Rename(cfg+".new", cfg)
	seen := []*table.Table{live()}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if lt := live(); table.Fingerprint(lt) != table.Fingerprint(seen[len(seen)-1]) {
			seen = append(seen, lt)
		}
		if strings.Contains(logs.String(), `"msg":"config edit adopted"`) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(seen) != 3 {
		t.Fatalf("%d tables served, want 3 (before, the step, the edit)\n%s", len(seen), logs.String())
	}
	if seen[1].Balance != 0 || seen[2].Balance != 1010 || len(seen[2].Backends) != n+1 {
		t.Errorf("the step has balance %d, the edit %d with %d backends", seen[1].Balance, seen[2].Balance, len(seen[2].Backends))
	}
	for i := 1; i < len(seen); i++ {
		if r := table.RiskRows(seen[i-1], seen[i]); r != 0 {
			t.Errorf("change %d put %d rows at risk", i, r)
		}
	}
	if n := strings.Count(logs.String(), `"msg":"ramp step applied"`); n != 1 {
		t.Errorf("%d ramp steps logged, want 1", n)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestFailedStartLeavesNothing: a run that fails to start on pins it made
// (an interface that is not there) leaves no program loaded and no pin
// directory; one that fails on pins that were there keeps them serving.
func TestFailedStartLeavesNothing(t *testing.T) {
	testenv.Kernel(t)
	dir := testenv.PinDir("director-svc")
	t.Cleanup(func() { loader.Unload(dir) })
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "forwarding_table.src.json")
	if err := os.WriteFile(cfg, []byte(`{"tables": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := Options{Config: cfg, BPFFS: dir, LockDir: tmp, Attach: []string{"nosuch0"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("run attaching to no interface: %v", err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed start left %s: %v", dir, err)
	}
	d, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if err := Run(context.Background(), opts); err == nil {
		t.Fatal("run attaching to no interface started")
	}
	if _, err := loader.Open(dir); err != nil {
		t.Fatalf("a failed start removed pins that were there before it: %v", err)
	}
}

// appliedTimes are the times of the applies a JSON log records, but the
// start's in the log of the first run.
func appliedTimes(log string, first bool) []time.Time {
	var times []time.Time
	for _, line := range strings.Split(log, "\n") {
		var rec struct {
			Time    time.Time
			Msg     string
			Trigger string
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "applied" && (rec.Trigger != "start" || !first) {
			times = append(times, rec.Time)
		}
	}
	return times
}

// TestRunRampKeepsItsInterval: a ramp's steps stay a ramp interval apart
// while its config file is read again and again, and across a restart of
// the service mid-ramp, after which the ramp carries on to the edit.
func TestRunRampKeepsItsInterval(t *testing.T) {
	testenv.Kernel(t)
	seed, ramp := rampSeed(t, 3)
	r := startRun(t, rampTestConfig(seed, 40000))
	dir, cfg := r.d.Dir, r.cfg
	edit := rampTestConfig(seed, 39000)
	write := func(body string) {
		if err := os.WriteFile(cfg+".new", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Rename(cfg+".new", cfg)
	}
	write(edit)
	waitLog := func(logs *syncBuffer, msg string, d time.Duration) {
		t.Helper()
		for deadline := time.Now().Add(d); !strings.Contains(logs.String(), msg); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in the log:\n%s", msg, logs.String())
			}
		}
	}
	waitLog(r.logs, `"msg":"ramp step applied"`, testenv.Scaled(5*time.Second))
	// The same edit, read again every 100 ms (its bytes differ by a space).
	for i := 0; i < 12; i++ {
		write(edit + strings.Repeat(" ", i%2+1))
		time.Sleep(100 * time.Millisecond)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	before := r.logs.String() // all of it: a step may come as it stops
	r.d.Close()
	logs2 := &syncBuffer{}
	r2 := startRunAt(t, dir, filepath.Dir(cfg), cfg, logs2)
	// The files are the edit: the restarted service serves it once the
	// ramp reaches it.
	for deadline := time.Now().Add(testenv.Scaled(time.Duration(len(ramp.Steps)+4) * 2 * time.Second)); ; time.Sleep(20 * time.Millisecond) {
		live, err := r2.d.Live()
		// Live, and its step logged: the log line comes just after the
		// apply, so the last step may be live before it is logged.
		logged := len(appliedTimes(before, true)) + len(appliedTimes(logs2.String(), false))
		if err == nil && len(live) == 1 && live[0].Table.Backends[0].W() == 39000 && logged >= len(ramp.Steps) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ramp did not reach the edit after the restart:\n%s", logs2.String())
		}
	}
	times := append(appliedTimes(before, true), appliedTimes(logs2.String(), false)...)
	if len(times) != len(ramp.Steps) {
		t.Fatalf("%d applies after the start, want %d (the ramp's steps)\n%s\n%s", len(times), len(ramp.Steps), before, logs2.String())
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 950*time.Millisecond {
			t.Errorf("step %d came %v after the one before: sooner than the ramp interval (1 s)", i, gap)
		}
	}
	live, err := r2.d.Live()
	if err != nil || live[0].Table.Backends[0].W() != 39000 {
		t.Fatalf("after the ramp: %v, weight %d", err, live[0].Table.Backends[0].W())
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
}

// noExit stands in for os.Exit in a run a test stops: a stop slower than
// the drain and a second (a loaded machine, the race detector) is logged
// to logs rather than ending the test binary; the test waits for the run.
func noExit(logs *syncBuffer) func(int) {
	return func(code int) {
		fmt.Fprintf(logs, "exit %d asked for: the stop took longer than the drain and a second\n", code)
	}
}

// freeAddr is a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// writeFile writes body to a config file in dir, and says where.
func writeFile(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "forwarding_table.src.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// gauge reads an unlabelled gauge from the metrics at addr.
func gauge(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	t.Fatalf("no %s in the metrics", name)
	return 0
}
