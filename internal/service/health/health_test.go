package health

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/director/director/table/config"
)

// TestDampener: Fall failures take a backend down, Rise passes bring it
// up, anything less changes nothing, and the first result decides an
// unknown health at once.
func TestDampener(t *testing.T) {
	d := NewDampener(2, 3)
	if d.Known() {
		t.Fatal("known before any result")
	}
	steps := []struct {
		ok, changed, up bool
	}{
		{true, true, true},                         // the first result decides
		{false, false, true}, {false, false, true}, // two failures: not yet
		{true, false, true},                                              // a pass resets the run
		{false, false, true}, {false, false, true}, {false, true, false}, // three in a row
		{true, false, false}, {false, false, false}, // one pass, then a failure: the run restarts
		{true, false, false}, {true, true, true}, // two passes in a row
	}
	for i, s := range steps {
		if changed := d.Observe(s.ok); changed != s.changed || d.Up() != s.up {
			t.Fatalf("step %d (ok=%v): changed %v up %v, want %v %v", i, s.ok, changed, d.Up(), s.changed, s.up)
		}
	}
	a := NewDampener(3, 3)
	a.StartAt(false)
	if a.Observe(true) || a.Observe(true) || !a.Observe(true) || !a.Up() {
		t.Fatal("an adopted down backend does not come up after three passes")
	}
}

// TestJitter: first checks spread over the whole interval, and the gaps
// between checks stay within a tenth of it, without all being equal.
func TestJitter(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	iv := time.Second
	first := FirstDelays(1000, iv, r)
	var buckets [10]int
	for _, d := range first {
		if d < 0 || d >= iv {
			t.Fatalf("first delay %v outside the interval", d)
		}
		buckets[int(d*10/iv)]++
	}
	for i, b := range buckets {
		if b < 60 || b > 140 { // 100 expected in each tenth
			t.Errorf("tenth %d of the interval holds %d of 1000 first checks", i, b)
		}
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 1000; i++ {
		d := NextDelay(iv, r)
		if d < 900*time.Millisecond || d > 1100*time.Millisecond {
			t.Fatalf("next delay %v beyond a tenth of the interval", d)
		}
		seen[d] = true
	}
	if len(seen) < 500 {
		t.Errorf("only %d distinct gaps in 1000", len(seen))
	}
}

// TestSchedulerLimitsConcurrency: with 200 targets and a limit of 5, no
// more than 5 checks run at once, and every target is checked repeatedly.
func TestSchedulerLimitsConcurrency(t *testing.T) {
	var running, most atomic.Int32
	var mu sync.Mutex
	count := map[int]int{}
	s := &Scheduler{Interval: 40 * time.Millisecond, Limit: 5, Seed: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	s.Run(ctx, 200, func(ctx context.Context, i int) {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		mu.Lock()
		count[i]++
		mu.Unlock()
	})
	if most.Load() > 5 || most.Load() < 2 {
		t.Errorf("at most %d checks ran at once, limit 5", most.Load())
	}
	for i := 0; i < 200; i++ {
		if count[i] < 2 {
			t.Errorf("target %d checked %d times", i, count[i])
		}
	}
}

// TestProbeHTTPAndTCP checks real servers on loopback: 200 passes, 503
// fails with its status, a closed port is refused, a silent one times out.
func TestProbeHTTPAndTCP(t *testing.T) {
	status := atomic.Int32{}
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			w.WriteHeader(404)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	silent, _ := net.Listen("tcp4", "127.0.0.1:0") // accepts into its backlog, never answers
	defer silent.Close()
	closed, _ := net.Listen("tcp4", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	p := NewProber(200*time.Millisecond, Sources{V4: netip.MustParseAddr("127.0.0.1")})
	defer p.Close()
	lo := netip.MustParseAddr("127.0.0.1")
	probe := func(c Checks) []Result { return p.Probe(context.Background(), lo, c) }
	if rs := probe(Checks{HTTP: port, HTTPURI: "/health", TCP: port}); !Healthy(rs) || len(rs) != 2 {
		t.Fatalf("healthy server: %v", rs)
	}
	status.Store(503)
	if rs := probe(Checks{HTTP: port, HTTPURI: "/health"}); Healthy(rs) || rs[0].Reason != "status 503" {
		t.Fatalf("503: %v", rs)
	}
	if rs := probe(Checks{TCP: closedPort}); Healthy(rs) || rs[0].Reason != "refused" {
		t.Fatalf("closed port: %v", rs)
	}
	if rs := probe(Checks{HTTP: silent.Addr().(*net.TCPAddr).Port, HTTPURI: "/"}); Healthy(rs) || rs[0].Reason != "timeout" {
		t.Fatalf("silent server: %v", rs)
	}
	if k := (Checks{HTTP: 1, GUE: 2}).Kinds(); len(k) != 2 || k[0] != HTTP || k[1] != GUE {
		t.Errorf("kinds %v", k)
	}
	_ = strconv.Itoa
}

// TestProbeHTTPStaysOnTheBackend: whatever http_uri says, the GET goes to
// the backend's address and port. A server elsewhere that would answer 200
// never sees a request, and the backend (nothing listens there) is down.
func TestProbeHTTPStaysOnTheBackend(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	otherHost := other.Listener.Addr().String()
	var seen atomic.Value
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen.Store(r.URL.RequestURI()) }))
	defer backend.Close()
	p := NewProber(200*time.Millisecond, Sources{V4: netip.MustParseAddr("127.0.0.1")})
	defer p.Close()
	// Nothing listens on 127.0.0.2 at the other server's port.
	down := netip.MustParseAddr("127.0.0.2")
	otherPort := other.Listener.Addr().(*net.TCPAddr).Port
	for _, uri := range []string{"@" + otherHost + "/", "//" + otherHost + "/", "/x@" + otherHost + "/", "http://" + otherHost + "/"} {
		rs := p.Probe(context.Background(), down, Checks{HTTP: otherPort, HTTPURI: uri})
		if Healthy(rs) {
			t.Errorf("http_uri %q: a backend nothing listens on is up", uri)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the server elsewhere got %d requests", n)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	if rs := p.Probe(context.Background(), lo, Checks{HTTP: port, HTTPURI: "/ready%20now?deep=1"}); !Healthy(rs) || seen.Load() != "/ready%20now?deep=1" {
		t.Errorf("a path with a query: %v, the backend saw %v", rs, seen.Load())
	}
}

// TestSchedulerKeepsItsRate: checks that take half their interval (a check
// timing out, say) still start an interval apart, on average, not an
// interval and a half.
func TestSchedulerKeepsItsRate(t *testing.T) {
	const interval = 100 * time.Millisecond
	var mu sync.Mutex
	var starts []time.Time
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s := &Scheduler{Interval: interval, Limit: 4, Seed: 3}
	s.Run(ctx, 1, func(ctx context.Context, _ int) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(interval / 2):
		}
	})
	if len(starts) < 10 {
		t.Fatalf("%d checks in 2 s", len(starts))
	}
	mean := starts[len(starts)-1].Sub(starts[0]) / time.Duration(len(starts)-1)
	if mean < interval*9/10 || mean > interval*11/10 {
		t.Errorf("checks %v apart on average, want %v give or take a tenth", mean, interval)
	}
}

// TestGUEWithoutSourceSaysWhy: a gue check with no director address is the
// director's problem, said in so many words, and never the backend's.
func TestGUEWithoutSourceSaysWhy(t *testing.T) {
	p := NewProber(100*time.Millisecond, Sources{})
	defer p.Close()
	rs := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.1"), Checks{GUE: 19523})
	if len(rs) != 1 || rs[0].OK || !rs[0].Local || !strings.Contains(rs[0].Reason, "no outbound_src_ip") || !strings.Contains(rs[0].Reason, "--director-config") {
		t.Fatalf("%+v", rs)
	}
	c, err := config.Parse([]byte(`{"tables": [{"hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}], "backends": [{"ip": "10.1.0.1", "state": "active", "healthchecks": {"gue": 19523}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := CanProbe(c, Sources{}); err == nil || !errors.Is(err, ErrNoSource) {
		t.Fatalf("CanProbe without a source: %v", err)
	}
	// An IPv6 backend's probe needs the IPv6 source, whatever IPv4 one
	// there is.
	p6 := NewProber(100*time.Millisecond, Sources{V4: netip.MustParseAddr("127.0.0.1")})
	defer p6.Close()
	rs = p6.Probe(context.Background(), netip.MustParseAddr("fd00::1"), Checks{GUE: 19523})
	if len(rs) != 1 || rs[0].OK || !rs[0].Local || !strings.Contains(rs[0].Reason, "no outbound_src_ip6") {
		t.Fatalf("IPv6 backend without an IPv6 source: %+v", rs)
	}
	c6, err := config.Parse([]byte(`{"tables": [{"hash_key": "0f0e0d0c0b0a09080706050403020100", "seed": "00112233445566778899aabbccddeeff",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}], "backends": [{"ip": "fd00::1", "state": "active", "healthchecks": {"gue": 19523}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := CanProbe(c6, Sources{V4: netip.MustParseAddr("127.0.0.1")}); err == nil || !errors.Is(err, ErrNoSource6) || !strings.Contains(err.Error(), "fd00::1") {
		t.Fatalf("CanProbe of an IPv6 backend with only an IPv4 source: %v", err)
	}
}

// TestProbeHTTPAndTCPOverIPv6: the http and tcp checks reach an IPv6
// backend (the URL brackets the address), and a refusal there is said so.
func TestProbeHTTPAndTCPOverIPv6(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != ln.Addr().String() {
			w.WriteHeader(400) // the Host header names the backend, bracketed
			return
		}
		w.WriteHeader(200)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp6", "[::1]:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	lo := netip.MustParseAddr("::1")
	p := NewProber(500*time.Millisecond, Sources{V6: lo})
	defer p.Close()
	if rs := p.Probe(context.Background(), lo, Checks{HTTP: port, HTTPURI: "/", TCP: port}); !Healthy(rs) || len(rs) != 2 {
		t.Fatalf("IPv6 backend: %v", rs)
	}
	if rs := p.Probe(context.Background(), lo, Checks{TCP: closedPort}); Healthy(rs) || rs[0].Reason != "refused" {
		t.Fatalf("IPv6 closed port: %v", rs)
	}
}
