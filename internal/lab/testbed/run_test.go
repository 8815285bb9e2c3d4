package testbed

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/internal/service/status"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// The service's check settings in these tests: GLB's, scaled down; in
// the emulated guests, up again by their time scale, so that a loaded
// guest's slow answers do not make the checks flap.
var interval = testenv.Scaled(300 * time.Millisecond)

const trigger = 2

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// directorBinary builds the director, once: the service is tested as the
// process an operator runs. DIRECTOR_TEST_BINARY names one built already,
// for a machine without Go (the guest kernels 'make test-kernels' boots).
func directorBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DIRECTOR_TEST_BINARY"); p != "" {
		return p
	}
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "director-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "director")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/director/director/cmd/director").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func checkedConfig(states map[int]string, n int) string {
	return CheckedConfig(states, n, interval, trigger)
}

// fingerprint is the fingerprint of the testbed's table with the given
// states and health, built apart from any service.
func fingerprint(t *testing.T, states map[int]string, healthy map[int]bool) string {
	t.Helper()
	return fingerprintOf(t, BackendConfig(states, healthy, 3))
}

// fingerprintOf is the fingerprint of cfg's one table.
func fingerprintOf(t *testing.T, cfg string) string {
	t.Helper()
	c, err := config.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return table.Fingerprint(tabs[0])
}

// liveFingerprint reads the live table's fingerprint from the kernel.
func liveFingerprint(t *testing.T, tb *Testbed) string {
	t.Helper()
	fp, err := tb.LiveFingerprint()
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// waitFingerprint waits until the live table is want, and says how long
// that took.
func waitFingerprint(t *testing.T, tb *Testbed, want string, within time.Duration, what string) time.Duration {
	t.Helper()
	within = testenv.Scaled(within)
	start := time.Now()
	for {
		got := liveFingerprint(t, tb)
		if got == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: the live table is not the expected one after %v (%s, want %s)", what, within,
				table.ShortFingerprint(got), table.ShortFingerprint(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startRun starts 'director run' in the director's namespace and waits
// for its READY=1.
func startRun(t *testing.T, tb *Testbed, cfg string, extra ...string) *Service {
	t.Helper()
	p := spawn(t, tb, cfg, extra...)
	if err := p.Ready(testenv.Scaled(20 * time.Second)); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	return p
}

func spawn(t *testing.T, tb *Testbed, cfg string, extra ...string) *Service {
	t.Helper()
	p, err := tb.StartService(directorBinary(t), t.TempDir(), cfg, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("director run's log:\n%s", p.Output())
		}
	})
	return p
}

func scrape(t *testing.T, tb *Testbed) map[string]*dto.MetricFamily {
	t.Helper()
	m, err := tb.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var msg = Msg

// sampleOf is the sample of metric name whose labels include want, or
// nil.
func sampleOf(fams map[string]*dto.MetricFamily, name string, want ...string) *dto.Metric {
	fam := fams[name]
	if fam == nil {
		return nil
	}
outer:
	for _, m := range fam.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == want[i] && l.GetValue() == want[i+1]
			}
			if !found {
				continue outer
			}
		}
		return m
	}
	return nil
}

// hasSample reports whether metric name has a sample whose labels
// include want.
func hasSample(fams map[string]*dto.MetricFamily, name string, want ...string) bool {
	return sampleOf(fams, name, want...) != nil
}

// value is a metric's value: the sample of fam whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	if fams[name] == nil {
		t.Fatalf("no metric %s", name)
	}
	m := sampleOf(fams, name, want...)
	switch {
	case m == nil:
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	t.Fatalf("no %s sample with %v", name, want)
	return 0
}

func writeConfig(t *testing.T, path, cfg string) {
	t.Helper()
	// Written aside and renamed, as an operator's tools should.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRun is 'director run' as a process, end to end: real HTTP health
// endpoints on the backends, real GUE probes through their decapsulating
// programs, real connections through the VIP.
func TestRun(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "forwarding_table.src.json")
	writeConfig(t, cfg, checkedConfig(nil, 3))
	allUp := fingerprint(t, nil, nil)
	p := startRun(t, tb, cfg)
	if liveFingerprint(t, tb) != allUp {
		t.Fatal("READY=1 came before the first apply")
	}

	t.Run("second run refused", func(t *testing.T) {
		q := spawn(t, tb, cfg)
		<-q.Done()
		if q.Err() == nil || !strings.Contains(q.Output(), "already serves") {
			t.Fatalf("a second director run on the same pins: %v\n%s", q.Err(), q.Output())
		}
	})

	t.Run("status shows the service", func(t *testing.T) {
		// No bgp block: the service is shown all the same, with what it
		// did and what its checks say.
		var out strings.Builder
		cmd := exec.Command(directorBinary(t), "status", "--bpffs", tb.BPFFS)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := tb.Director.Do(cmd.Run); err != nil {
			t.Fatalf("status: %v\n%s", err, out.String())
		}
		for _, want := range []string{fmt.Sprintf("service      director run, pid %d, since ", p.PID()), "; config " + cfg,
			"last apply   ", "(start): vip: table added", "checks       3 backends checked: 3 up, 0 down; 0 failing", "bgp          (no bgp settings)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("status lacks %q:\n%s", want, out.String())
			}
		}
		out.Reset()
		cmd = exec.Command(directorBinary(t), "status", "--json", "--bpffs", tb.BPFFS)
		cmd.Stdout = &out
		if err := tb.Director.Do(cmd.Run); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Service *struct {
				PID       int    `json:"pid"`
				Config    string `json:"config"`
				LastApply *struct {
					Trigger string `json:"trigger"`
				} `json:"last_apply"`
				Checks struct{ Backends, Up int } `json:"checks"`
			} `json:"service"`
		}
		if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || doc.Service == nil || doc.Service.PID != p.PID() ||
			doc.Service.Config != cfg || doc.Service.LastApply == nil || doc.Service.LastApply.Trigger != "start" || doc.Service.Checks.Up != 3 {
			t.Errorf("status --json: %v %s", err, out.String())
		}
	})

	t.Run("backend down and back", func(t *testing.T) {
		sessions := started(t, tb, 0, 12)
		if err := tb.StopHealth(1); err != nil {
			t.Fatal(err)
		}
		within := interval*trigger + interval
		took := waitFingerprint(t, tb, fingerprint(t, nil, map[int]bool{1: false}), within, "backend1's server stopped")
		t.Logf("detected and applied in %v (bound: interval %v x trigger %d + interval = %v)", took.Round(time.Millisecond), interval, trigger, within)
		if got := spread(t, tb, 30); got["backend1"] != 0 {
			t.Errorf("new connections still reach backend1: %v", got)
		}
		time.Sleep(300 * time.Millisecond) // more exchanges after the change
		for _, s := range sessions {
			if ok, failed, err := s.Result(); s.Backend != "backend1" && (failed != 0 || ok == 0) {
				t.Errorf("connection %d to %s: %d ok, %d failed: %v", s.ID, s.Backend, ok, failed, err)
			}
		}
		if err := tb.ServeHealth(1); err != nil {
			t.Fatal(err)
		}
		took = waitFingerprint(t, tb, allUp, interval*(trigger+2), "backend1's server back")
		t.Logf("back in %v", took.Round(time.Millisecond))
		rec, ok := p.WaitLog(0, func(m map[string]any) bool {
			return m["msg"] == "applied" && strings.Contains(fmt.Sprint(m["changes"]), "vip/10.50.0.11: down (checks: http failed: refused")
		}, time.Second)
		if !ok {
			t.Fatalf("no apply record names backend1 going down and why")
		}
		if strings.Contains(fmt.Sprint(rec), "0f0e0d0c") || strings.Contains(p.Output(), "00112233445566778899") {
			t.Fatal("a key is in the log")
		}
	})

	t.Run("gue check", func(t *testing.T) {
		// backend2's server still answers, but GUE is no longer decapsulated.
		err := tb.Backends[1].Do(func() error {
			b, err := loader.OpenBackend(tb.BackendBPFFS(2))
			if err != nil {
				return err
			}
			defer b.Close()
			return b.Detach("eth0")
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, fingerprint(t, nil, map[int]bool{2: false}), interval*(trigger+1)+200*time.Millisecond, "backend2's program detached")
		m := scrape(t, tb)
		if value(t, m, "director_check_up", "backend", "10.50.0.12", "check", "gue") != 0 ||
			value(t, m, "director_check_up", "backend", "10.50.0.12", "check", "http") != 1 {
			t.Error("the gue check should fail and the http check pass")
		}
		err = tb.Backends[1].Do(func() error {
			b, err := loader.OpenBackend(tb.BackendBPFFS(2))
			if err != nil {
				return err
			}
			defer b.Close()
			_, err = b.Attach("eth0", loader.ModeNative)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, allUp, interval*(trigger+2), "backend2's program back")
	})

	t.Run("metrics", func(t *testing.T) {
		// The kernel's tables flip before the service, its apply read
		// back, exports them: wait for the export (slow guests take
		// seconds between the two).
		deadline := time.Now().Add(testenv.Scaled(10 * time.Second))
		for !hasSample(scrape(t, tb), "director_table_info", "table", "vip", "fingerprint", allUp) {
			if time.Now().After(deadline) {
				t.Fatalf("the service never exported the table all up (%s)", allUp)
			}
			time.Sleep(100 * time.Millisecond)
		}
		before := scrape(t, tb)
		var out strings.Builder
		cmd := exec.Command(directorBinary(t), "stats", "--json", "--bpffs", tb.BPFFS)
		cmd.Stdout = &out
		if err := tb.Director.Do(cmd.Run); err != nil {
			t.Fatal(err)
		}
		after := scrape(t, tb)
		var st loader.Stats
		if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
			t.Fatal(err)
		}
		// Probes' replies cross the program all the time: the stats
		// read between two scrapes lie between them.
		between := func(name string, got uint64, labels ...string) {
			lo, hi := value(t, before, name, labels...), value(t, after, name, labels...)
			if float64(got) < lo || float64(got) > hi {
				t.Errorf("%s%v: stats says %d, the scrapes %v and %v", name, labels, got, lo, hi)
			}
		}
		between("director_packets_processed_total", st.Global["processed"])
		between("director_packets_encapsulated_total", st.Global["encapsulated"])
		between("director_packets_passed_total", st.Global["pass_no_bind"], "reason", "no_bind")
		for _, b := range st.Tables[0].Backends {
			between("director_backend_packets_total", b.Packets, "table", "vip", "backend", b.IP)
			between("director_backend_bytes_total", b.Bytes, "table", "vip", "backend", b.IP)
		}
		between("director_interface_packets_total", st.Interfaces[0].RxPackets, "interface", "eth0", "direction", "rx")
		if st.Global["processed"] == 0 || st.Tables[0].Backends[0].Packets == 0 {
			t.Errorf("no traffic counted: %+v", st.Global)
		}
		types := map[string]dto.MetricType{
			"director_packets_processed_total":              dto.MetricType_COUNTER,
			"director_backend_healthy":                      dto.MetricType_GAUGE,
			"director_check_latency_seconds":                dto.MetricType_GAUGE,
			"director_apply_duration_seconds":               dto.MetricType_HISTOGRAM,
			"director_applies_total":                        dto.MetricType_COUNTER,
			"director_table_info":                           dto.MetricType_GAUGE,
			"director_interface_attached":                   dto.MetricType_GAUGE,
			"director_interface_dropped_total":              dto.MetricType_COUNTER,
			"director_last_apply_success_timestamp_seconds": dto.MetricType_GAUGE,
		}
		for name, typ := range types {
			if f := after[name]; f == nil || f.GetType() != typ {
				t.Errorf("%s: %v, want a %v", name, f.GetType(), typ)
			}
		}
		if value(t, after, "director_table_info", "table", "vip", "fingerprint", allUp) != 1 ||
			value(t, after, "director_interface_attached", "interface", "eth0", "mode", "native") != 1 ||
			value(t, after, "director_backend_healthy", "table", "vip", "backend", "10.50.0.11") != 1 {
			t.Error("table, interface or backend state not exported")
		}
	})

	t.Run("fail-static", func(t *testing.T) {
		for i := 1; i <= 3; i++ {
			if err := tb.StopHealth(i); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(interval*(trigger+3) + 500*time.Millisecond)
		for time.Now().Before(deadline) {
			if got := liveFingerprint(t, tb); got != allUp {
				t.Fatalf("every check fails, and the table changed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if v := value(t, scrape(t, tb), "director_fail_static", "table", "vip"); v != 1 {
			t.Fatalf("director_fail_static %v, want 1", v)
		}
		// Only the HTTP checks fail; the GUE ones pass: the message
		// points at the backends, not the director's network.
		if p.Count(msg("FAIL-STATIC: too many backends of the table fail their checks at once; keeping the last table. "+
			"The GUE checks pass, so the director reaches the backends through the tunnel: it is their services that fail "+
			"their checks (a bad deploy?). Check the backends.")) == 0 {
			t.Error("fail-static was not logged")
		}
		mark := p.Mark()
		for i := 1; i <= 3; i++ {
			if err := tb.ServeHealth(i); err != nil {
				t.Fatal(err)
			}
		}
		if _, ok := p.WaitLog(mark, msg("fail-static over: the checks agree again"), interval*(trigger+3)); !ok {
			t.Fatal("fail-static did not end when the checks passed again")
		}
		if v := value(t, scrape(t, tb), "director_fail_static", "table", "vip"); v != 0 || liveFingerprint(t, tb) != allUp {
			t.Fatalf("after recovery: director_fail_static %v, table changed %v", v, liveFingerprint(t, tb) != allUp)
		}
	})

	t.Run("config edits", func(t *testing.T) {
		mark := p.Mark()
		writeConfig(t, cfg, checkedConfig(map[int]string{3: "draining"}, 3))
		drained := fingerprint(t, map[int]string{3: "draining"}, nil)
		waitFingerprint(t, tb, drained, 3*time.Second, "backend3 drained in the config file")
		if _, ok := p.WaitLog(mark, func(m map[string]any) bool {
			return m["msg"] == "applied" && strings.Contains(fmt.Sprint(m["changes"]), "vip/10.50.0.13: active -> draining (config edit)")
		}, time.Second); !ok {
			t.Error("the drain's apply record does not say what changed")
		}
		// A broken edit is refused and counted; the table keeps serving.
		mark = p.Mark()
		writeConfig(t, cfg, `{"tables": [{"name": "vip", "hash_key": "0f0e"}]}`)
		if rec, ok := p.WaitLog(mark, msg("config not used; the last good one is kept"), 3*time.Second); !ok ||
			!strings.Contains(fmt.Sprint(rec["err"]), "tables[0].hash_key") {
			t.Fatalf("a broken config edit: %v", rec)
		}
		if v := value(t, scrape(t, tb), "director_config_errors_total"); v != 1 || liveFingerprint(t, tb) != drained {
			t.Fatalf("after a broken edit: director_config_errors_total %v, table changed %v", v, liveFingerprint(t, tb) != drained)
		}
		// Removing an active backend outright breaks its connections, where
		// the packets carry GLB's two hops (history_hops false).
		unsafe := strings.Replace(checkedConfig(map[int]string{2: "absent", 3: "draining"}, 3), `"name": "vip", `, `"name": "vip", "history_hops": false, `, 1)
		mark = p.Mark()
		writeConfig(t, cfg, unsafe)
		heldRec, ok := p.WaitLog(mark, msg("UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with "+
			"'director apply --allow-unsafe' if it is what you want now"), 3*time.Second)
		if !ok {
			t.Fatal("the unsafe edit was not held")
		}
		time.Sleep(2 * interval)
		if liveFingerprint(t, tb) != drained {
			t.Fatal("an unsafe edit was applied by the service")
		}
		// The gauge is set as the reconcile that held the edit ends, which
		// on a slow guest may be after the log line.
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(interval / 3) {
			v := value(t, scrape(t, tb), "director_held_changes")
			if v == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("director_held_changes %v, want 1", v)
			}
		}
		// A person applies it by the commands the log gives, run as
		// printed (issue 47); the service adopts it.
		mark = p.Mark()
		runPrinted(t, tb.Director, heldRec["run"])
		if _, ok := p.WaitLog(mark, msg("config edit adopted"), 3*interval); !ok {
			t.Fatal("the service did not adopt the config a person applied")
		}
		if v := value(t, scrape(t, tb), "director_held_changes"); v != 0 {
			t.Fatalf("director_held_changes %v after the apply, want 0", v)
		}
		if got := liveFingerprint(t, tb); got != fingerprint(t, map[int]string{2: "absent", 3: "draining"}, nil) {
			t.Fatal("the live table is not the one a person applied")
		}
	})

	t.Run("restart", func(t *testing.T) {
		sessions := started(t, tb, 200, 8)
		before := liveFingerprint(t, tb)
		if err := p.Stop(); err != nil {
			t.Fatalf("director run on SIGTERM: %v", err)
		}
		time.Sleep(500 * time.Millisecond) // steering goes on without the service
		restarted := time.Now()
		q := startRun(t, tb, cfg)
		time.Sleep(3 * interval)
		if n := q.Count(msg("applied")); n != 0 || liveFingerprint(t, tb) != before {
			t.Errorf("the restart changed the table (%d applies)", n)
		}
		// With nothing to apply, what the checks found is published all
		// the same: on the status page and in status --json.
		// The checks rise again after the restart: wait for them, as
		// long as a slow (emulated) guest takes. The config has two
		// backends now (backend 2 was removed above).
		doc := statusJSON(t, tb)
		for deadline := time.Now().Add(testenv.Scaled(3 * interval)); time.Now().Before(deadline) &&
			(doc.Service == nil || doc.Service.Checks.Up != 2); doc = statusJSON(t, tb) {
			time.Sleep(interval / 4)
		}
		if doc.Service == nil || doc.Service.Checks.Up != 2 || len(doc.Service.Backends) != 2 {
			t.Fatalf("after a restart that applied nothing, status --json shows the checks as %+v", doc.Service)
		}
		for _, b := range doc.Service.Backends {
			if b.CheckedAt == nil || b.CheckedAt.Before(restarted) || len(b.Results) == 0 || !b.Results[0].OK {
				t.Errorf("after a restart that applied nothing, status --json shows backend %s checked at %v with %+v", b.IP, b.CheckedAt, b.Results)
			}
		}
		// Adopting the tables as they were counts as the last good apply.
		if v := value(t, scrape(t, tb), "director_last_apply_success_timestamp_seconds"); v < float64(time.Now().Add(-time.Minute).Unix()) {
			t.Errorf("director_last_apply_success_timestamp_seconds %v after a start that found the tables right", v)
		}
		for _, s := range sessions {
			if ok, failed, err := s.Result(); failed != 0 || ok < 5 {
				t.Errorf("connection %d to %s across the restart: %d ok, %d failed: %v", s.ID, s.Backend, ok, failed, err)
			}
		}
		if err := q.Stop(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("detach on exit", func(t *testing.T) {
		q := startRun(t, tb, cfg, "--detach-on-exit")
		if err := q.Stop(); err != nil {
			t.Fatal(err)
		}
		var atts []loader.Attachment
		err := tb.Director.Do(func() error {
			d, err := tb.OpenDirector()
			if err != nil {
				return err
			}
			defer d.Close()
			atts, err = d.Attachments()
			return err
		})
		if err != nil || len(atts) != 0 {
			t.Fatalf("after --detach-on-exit: %v %+v", err, atts)
		}
		// Nothing of the run is left in /run/director.
		if path := status.Path(status.DefaultLockDir, tb.BPFFS); path == "" {
			t.Fatal("no status path")
		} else if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("the run's status file %s outlived it", path)
		}
	})
}

// runPrinted runs the commands a log record printed for a person (a
// list of strings), as printed, in a shell on h with 'director' the
// binary under test, in a directory of their own: a plan may exit 2 (it
// changes something), any other command must exit 0.
func runPrinted(t *testing.T, h *Host, printed any) {
	t.Helper()
	list, _ := printed.([]any)
	if len(list) == 0 {
		t.Fatalf("the log printed no commands to run: %v", printed)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin") // 'director' whatever the binary's name
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(directorBinary(t), filepath.Join(bin, "director")); err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		line, _ := c.(string)
		var out strings.Builder
		sh := exec.Command("sh", "-c", line)
		sh.Dir = dir
		sh.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
		sh.Stdout, sh.Stderr = &out, &out
		if err := h.Start(sh); err != nil {
			t.Fatal(err)
		}
		if err := sh.Wait(); err != nil && !(sh.ProcessState.ExitCode() == 2 && strings.Contains(line, " plan ")) {
			t.Fatalf("%s, as printed: %v\n%s", line, err, out.String())
		}
	}
}

// TestHeldHealthChangeRunAsPrinted (issue 47, printed commands): with
// history out of the packets (history_hops false), two backends found up
// in one round strand the primaries of a third of the rows, so the
// service holds the change; the commands its log record prints (check
// the config, plan the checked copy, apply it), run as printed, apply it,
// and the doctor gives the same commands.
func TestHeldHealthChangeRunAsPrinted(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "forwarding_table.src.json")
	writeConfig(t, cfg, strings.Replace(checkedConfig(nil, 3), `"name": "vip", `, `"name": "vip", "history_hops": false, `, 1))
	p := startRun(t, tb, cfg, "--fail-static", "0.9") // two of three down is not a bad deploy here
	allUp := fingerprint(t, nil, nil)
	waitFingerprint(t, tb, allUp, 5*time.Second, "all three up")
	for _, i := range []int{2, 3} {
		if err := tb.StopHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	waitFingerprint(t, tb, fingerprint(t, nil, map[int]bool{2: false, 3: false}), 10*time.Second, "backends 2 and 3 down (downs are never held)")
	mark := p.Mark()
	for _, i := range []int{2, 3} { // back together: found up in one round
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	rec, ok := p.WaitLog(mark, func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "UNSAFE health change held")
	}, testenv.Scaled(10*time.Second))
	if !ok {
		t.Fatalf("two backends back at once were not held (with two hops, a third of the rows' primaries are stranded):\n%s", p.Output())
	}
	// The doctor names the same commands.
	var out strings.Builder
	doc := exec.Command(directorBinary(t), "--bpffs", tb.BPFFS, "doctor", "--json")
	doc.Stdout = &out
	tb.Director.Do(doc.Run)
	run := fmt.Sprint(rec["run"])
	for _, c := range rec["run"].([]any) {
		if !strings.Contains(out.String(), fmt.Sprint(c)) {
			t.Errorf("the doctor does not give %q of the log's %s:\n%s", c, run, out.String())
		}
	}
	if !strings.Contains(run, " healthcheck ") {
		t.Errorf("the held health change's commands do not check the backends first: %s", run)
	}
	mark = p.Mark()
	runPrinted(t, tb.Director, rec["run"])
	waitFingerprint(t, tb, allUp, 3*time.Second, "the held change applied by the printed commands")
	for deadline := time.Now().Add(testenv.Scaled(3 * time.Second)); ; time.Sleep(interval / 3) {
		if v := value(t, scrape(t, tb), "director_held_changes"); v == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("director_held_changes %v after the printed commands, want 0", v)
		}
	}
}
