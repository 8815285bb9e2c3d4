package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/director/director/loader"
	"github.com/director/director/table/config"
)

// withoutHealthy is a config with every "healthy" taken out: its health
// left to the checks.
func withoutHealthy(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := regexp.MustCompile(`"healthy": (true|false),\s*`).ReplaceAllString(string(data), "")
	p := filepath.Join(t.TempDir(), "checked.json")
	if err := os.WriteFile(p, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestOneShotCommandsSayWhereHealthComesFrom: the table tools refuse a
// config that leaves health to the checks, pointing to run and
// healthcheck.
func TestOneShotCommandsSayWhereHealthComesFrom(t *testing.T) {
	checked := withoutHealthy(t, cfgDir+"small.json")
	for _, args := range [][]string{{"show", checked}, {"build", checked, "-o", filepath.Join(t.TempDir(), "x.bin")}} {
		_, errOut, code := runCmd(args...)
		if code != 1 || !strings.Contains(errOut, "director run") || !strings.Contains(errOut, "director healthcheck") {
			t.Errorf("director %s: exit %d\n%s", args[0], code, errOut)
		}
	}
}

// TestCheckedConfigTakesLiveHealth: plan and apply take the health of a
// checked config's backends from the live tables, where director run
// keeps it, and say so; a backend the live tables do not hold is down.
func TestCheckedConfigTakesLiveHealth(t *testing.T) {
	dir := bpffsDir(t)
	mustRun(t, 0, "--bpffs", dir, "load")
	mustRun(t, 0, "--bpffs", dir, "apply", "--yes", cfgDir+"small-unhealthy.json")
	checked := withoutHealthy(t, cfgDir+"small.json")
	out, errOut, code := runCmd("--bpffs", dir, "plan", checked)
	if code != 0 || !strings.Contains(out, "no changes") || !strings.Contains(errOut, "leaves health to the checks: it is taken from the live tables") {
		t.Fatalf("plan of the checked config over its own live tables: exit %d\n%s\n%s", code, out, errOut)
	}
	// A new backend: down until director run's checks find it up.
	data, _ := os.ReadFile(checked)
	grown := strings.Replace(string(data), `"backends": [`, `"backends": [{"ip": "192.168.50.99", "state": "active", "healthchecks": {"http": 80}}, `, 1)
	if err := os.WriteFile(checked, []byte(grown), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, 0, "--bpffs", dir, "apply", "--yes", checked)
	var doc loader.Stats
	out, _, _ = runCmd("--bpffs", dir, "stats", "--json")
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, b := range doc.Tables[0].Backends {
		got[b.IP] = b.Healthy
	}
	if got["192.168.50.99"] || got["192.168.50.12"] || !got["192.168.50.10"] {
		t.Fatalf("health after applying the checked config: %v", got)
	}
}

// TestHealthcheckCommand runs real checks against real HTTP servers on
// loopback addresses: one answers 200, one 503, one is not there.
func TestHealthcheckCommand(t *testing.T) {
	serve := func(addr string, status int) int {
		ln, err := net.Listen("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/up" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().(*net.TCPAddr).Port
	}
	okPort, badPort := serve("127.0.0.1:0", 200), serve("127.0.0.2:0", 503)
	closed, _ := net.Listen("tcp4", "127.0.0.3:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	cfg := fmt.Sprintf(`{"healthchecks": {"timeout_ms": 500},
  "tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
    "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}],
    "backends": [
      {"ip": "127.0.0.1", "state": "active", "healthchecks": {"http": %d, "http_uri": "/up", "tcp": %d}},
      {"ip": "127.0.0.2", "state": "active", "healthchecks": {"http": %d, "http_uri": "/up"}},
      {"ip": "127.0.0.3", "state": "active", "healthchecks": {"tcp": %d}},
      {"ip": "127.0.0.4", "state": "active", "healthy": false, "healthchecks": {"http": 1}},
      {"ip": "127.0.0.5", "state": "inactive", "healthchecks": {"http": 1}}]}]}`, okPort, okPort, badPort, closedPort)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "src.json"), filepath.Join(dir, "checked.json")
	if err := os.WriteFile(in, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout := mustRun(t, 0, "healthcheck", in, "-o", out)
	for _, want := range []string{"api 127.0.0.1: up (http ok", "api 127.0.0.2: DOWN (http failed: status 503)",
		"api 127.0.0.3: DOWN (tcp failed: refused)", "api 127.0.0.4: healthy false (set in the config; not checked)",
		"api 127.0.0.5: inactive, not checked", "1 up, 2 down; wrote " + out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("output file: %v %v", fi, err)
	}
	c, err := config.ParseFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var h []bool
	for _, b := range c.Tables[0].Backends {
		h = append(h, b.Healthy)
	}
	if fmt.Sprint(h) != "[true false false false false]" || c.Checked() {
		t.Fatalf("healthy filled in: %v (checked %v)", h, c.Checked())
	}
	mustRun(t, 0, "show", out) // the one-shot tools take it
	if _, errOut, code := runCmd("healthcheck", in); code != 1 || !strings.Contains(errOut, "-o FILE is required") {
		t.Errorf("healthcheck without -o: %d %s", code, errOut)
	}
	// the manual's command (docs/operations.md) on a config with gue checks, as written (no
	// --director-config): refused up front, saying why, not every backend
	// marked down.
	gue := filepath.Join(dir, "gue.json")
	os.WriteFile(gue, []byte(strings.Replace(cfg, `{"ip": "127.0.0.3", "state": "active", "healthchecks": {"tcp"`, `{"ip": "127.0.0.3", "state": "active", "healthchecks": {"gue": 19523, "tcp"`, 1)), 0o644)
	os.Remove(out)
	if _, errOut, code := runCmd("healthcheck", gue, "-o", out); code != 1 || !strings.Contains(errOut, "no outbound_src_ip") ||
		!strings.Contains(errOut, "pass --director-config") || !strings.Contains(errOut, "nothing written") {
		t.Errorf("healthcheck of gue checks without a director config: %d %s", code, errOut)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a refused healthcheck wrote its output")
	}
}
