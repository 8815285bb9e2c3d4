package service

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/internal/service/status"
)

// TestChecksFollowTheEdit (issue 47, items 1 and 2): an edit that changes
// a backend's health check replaces its check, once adopted: the old one
// is no longer made, counted or shown, the backend is taken down for the
// new check's failure and the reason quotes it, and putting the check
// back brings the backend up with nothing left of the other.
func TestChecksFollowTheEdit(t *testing.T) {
	testenv.Kernel(t)
	// Two HTTP backends on loopback addresses, on one port: /health is
	// 200, anything else 404; each request is counted.
	ln2, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln2.Addr().(*net.TCPAddr).Port
	ln3, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	asked := map[string]int{}
	for _, ln := range []net.Listener{ln2, ln3} {
		ip := ln.Addr().(*net.TCPAddr).IP.String()
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			asked[ip+" "+r.URL.Path]++
			mu.Unlock()
			if r.URL.Path != "/health" {
				w.WriteHeader(http.StatusNotFound)
			}
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	// A check may take its whole interval: an emulated guest's loopback
	// can take longer than 50 ms, and a backend that flaps tells a
	// change of its own.
	ms := testenv.Scaled(100 * time.Millisecond).Milliseconds()
	config := func(uri3 string) string {
		return fmt.Sprintf(`{"healthchecks": {"interval_ms": %d, "timeout_ms": %d, "rise": 1, "fall": 1},
		 "tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "12345678901234561234567890123456",
		  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}],
		  "backends": [{"ip": "127.0.0.2", "state": "active", "healthchecks": {"http": %d, "http_uri": "/health"}},
		               {"ip": "127.0.0.3", "state": "active", "healthchecks": {"http": %d, "http_uri": "%s"}}]}]}`, ms, ms, port, port, uri3)
	}
	dir := testenv.PinDir("director-svc")
	t.Cleanup(func() { os.RemoveAll(dir) })
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "forwarding_table.src.json")
	if err := os.WriteFile(cfg, []byte(config("/health")), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRunAt(t, dir, tmp, cfg, &syncBuffer{})
	current := func() *status.Status {
		st, err := status.Read(tmp, dir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitFor := func(what string, ok func(*status.Status) bool) *status.Status {
		t.Helper()
		deadline := time.Now().Add(testenv.Scaled(10 * time.Second))
		for {
			st := current()
			if ok(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status checks %+v, backends %+v\n%s", what, st.Checks, st.Backends, r.logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	two := func(up, down int) func(*status.Status) bool {
		return func(st *status.Status) bool {
			return st.Checks == status.Checks{Backends: 2, Up: up, Down: down, Failing: down} && len(st.Backends) == 2
		}
	}
	waitFor("both up", two(2, 0))

	// Backend 3's check edited to a URI it fails.
	if err := os.WriteFile(cfg, []byte(config("/nope")), 0o600); err != nil {
		t.Fatal(err)
	}
	// Backend 3's down, newest first among the recent applies: on a
	// loaded guest backend 2 may flap after it, and its apply is then
	// the last one.
	downOf3 := func(st *status.Status) string {
		for _, a := range st.Recent {
			for _, c := range a.Changes {
				if strings.Contains(c, "127.0.0.3: down") {
					return c
				}
			}
		}
		return ""
	}
	st := waitFor("backend 3 down by its new check", func(st *status.Status) bool {
		return two(1, 1)(st) && downOf3(st) != ""
	})
	why := downOf3(st)
	if !strings.Contains(why, "http failed") || strings.Contains(why, "http ok") {
		t.Errorf("backend 3's down is told as %q: not the failing check's result", why)
	}
	for _, b := range st.Backends {
		if b.IP == "127.0.0.3" && (b.Up || b.Passing) {
			t.Errorf("status shows backend 3 %+v", b)
		}
	}
	// Only the new URI is probed now.
	time.Sleep(testenv.Scaled(300 * time.Millisecond)) // a round under way when the edit was adopted ends
	mu.Lock()
	before := asked["127.0.0.3 /health"]
	mu.Unlock()
	time.Sleep(testenv.Scaled(time.Second))
	mu.Lock()
	after, nope := asked["127.0.0.3 /health"], asked["127.0.0.3 /nope"]
	mu.Unlock()
	if after != before || nope == 0 {
		t.Errorf("after the edit, backend 3's old URI probed %d more times, the new one %d in all", after-before, nope)
	}

	// Put back: up, and nothing of the other check left.
	if err := os.WriteFile(cfg, []byte(config("/health")), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("backend 3 up again", two(2, 0))
}
