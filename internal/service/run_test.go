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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
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
