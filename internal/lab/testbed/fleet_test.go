package testbed

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

// fleet is a fleet under test: its network and its services.
type fleet struct {
	*Fleet
	t        *testing.T
	tmp      string
	services map[int]*Service
	configs  map[int]string // each director's copy of the forwarding table
	// extra are flags every director's run gets: --no-history-wait, as
	// the fleet's directors start together with nothing to keep, but in
	// TestFleetJoinWaitsForHistory.
	extra []string
}

func newFleet(t *testing.T, directors int) *fleet { return newFleetFor(t, directors, false) }

// newFleetFor is newFleet, with the IPv6 underlay if underlay6.
func newFleetFor(t *testing.T, directors int, underlay6 bool) *fleet {
	t.Helper()
	testenv.Kernel(t)
	tmp := t.TempDir()
	f, err := newFleetBed(3, 4, 32, tmp, underlay6)
	if err != nil {
		t.Fatal(err)
	}
	fl := &fleet{Fleet: f, t: t, tmp: tmp, services: map[int]*Service{}, configs: map[int]string{}, extra: []string{"--no-history-wait"}}
	t.Cleanup(func() {
		for i, s := range fl.services {
			s.Stop()
			if t.Failed() {
				t.Logf("director%d's log:\n%s", i, s.Output())
			}
		}
		if t.Failed() {
			t.Logf("BIRD's log:\n%s", f.BIRDLog())
		}
		f.Close()
	})
	for i := 1; i <= directors; i++ {
		fl.start(i, fl.Config(nil, nil))
	}
	fl.waitNexthops(fmt.Sprint(seq(directors)), 15*time.Second)
	return fl
}

func seq(n int) []int {
	var s []int
	for i := 1; i <= n; i++ {
		s = append(s, i)
	}
	return s
}

// start adds director i if it is new and starts its 'director run' with
// the forwarding table cfg.
func (fl *fleet) start(i int, cfg string) *Service {
	fl.t.Helper()
	if fl.Directors[i] == nil {
		if _, err := fl.AddDirector(i); err != nil {
			fl.t.Fatal(err)
		}
	}
	path := filepath.Join(fl.tmp, fmt.Sprintf("forwarding_table%d.json", i))
	if _, ok := fl.configs[i]; !ok {
		writeConfig(fl.t, path, cfg)
		fl.configs[i] = path
	}
	s, err := StartService(fl.Directors[i], fl.DirectorBPFFS(i), directorBinary(fl.t), fl.tmp, path,
		append([]string{"--director-config", fl.DirectorConfig(i)}, fl.extra...)...)
	if err != nil {
		fl.t.Fatal(err)
	}
	fl.services[i] = s
	if err := s.Ready(testenv.Scaled(20 * time.Second)); err != nil {
		fl.t.Fatalf("director%d: %v\n%s", i, err, s.Output())
	}
	return s
}

// waitNexthops waits until the router's VIP route (and with the IPv6
// underlay its VIP6 route) goes to the directors want names ("[1 2 3]"),
// and says how long it took.
func (fl *fleet) waitNexthops(want string, within time.Duration) time.Duration {
	fl.t.Helper()
	vips := []netip.Addr{VIP}
	if fl.Underlay6 {
		vips = append(vips, VIP6)
	}
	start := time.Now()
	for _, vip := range vips {
		for {
			got, err := fl.NexthopsTo(vip)
			if err != nil {
				fl.t.Fatal(err)
			}
			if fmt.Sprint(got) == want {
				break
			}
			if time.Since(start) > within {
				fl.t.Fatalf("the router's route to %s goes to directors %v after %v, want %s", vip, got, within, want)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return time.Since(start)
}

// sessions opens n long-lived connections from the client's addresses and
// starts their exchanges.
func (fl *fleet) sessions(n int) []*Session {
	fl.t.Helper()
	var ss []*Session
	for k := 0; k < n; k++ {
		src := fl.Clients[k%len(fl.Clients)]
		if fl.vipFor(k).Is6() {
			src = fl.Clients6[k%len(fl.Clients6)]
		}
		s, err := fl.OpenFrom(k, src)
		if err != nil {
			fl.t.Fatal(err)
		}
		s.Start()
		ss = append(ss, s)
	}
	fl.t.Cleanup(func() {
		for _, s := range ss {
			s.Stop()
		}
	})
	return ss
}

// check requires every session to have worked, with no failed exchange,
// and returns the longest time a connection went without one.
func (fl *fleet) check(ss []*Session, what string) time.Duration {
	fl.t.Helper()
	var gap time.Duration
	for _, s := range ss {
		ok, failed, err := s.Result()
		if failed != 0 || ok == 0 {
			fl.t.Errorf("%s: connection %d (%s): %d ok, %d failed: %v", what, s.ID, s.Backend, ok, failed, err)
		}
		gap = max(gap, s.MaxGap())
	}
	return gap
}

// use makes t the test fl reports to, until the returned func.
func (fl *fleet) use(t *testing.T) func() {
	old := fl.t
	fl.t = t
	return func() { fl.t = old }
}

// encapsulated is director i's count of packets steered.
func (fl *fleet) encapsulated(i int) float64 {
	fl.t.Helper()
	m, err := Scrape(fl.Directors[i])
	if err != nil {
		fl.t.Fatal(err)
	}
	return value(fl.t, m, "director_packets_encapsulated_total")
}

func (fl *fleet) statusCmd(i int, out io.Writer, args ...string) *exec.Cmd {
	cmd := exec.Command(directorBinary(fl.t), append([]string{"status", "--bpffs", fl.DirectorBPFFS(i)}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	return cmd
}

func TestFleetSpreadsAndAgrees(t *testing.T) {
	fl := newFleet(t, 3)
	ss := fl.sessions(48)
	time.Sleep(time.Second)
	fl.check(ss, "steady")
	fps := map[string]bool{}
	for i := 1; i <= 3; i++ {
		if n := fl.encapsulated(i); n < 50 {
			t.Errorf("director%d steered %v packets: flows do not spread over the fleet", i, n)
		}
		m, err := Scrape(fl.Directors[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range m["director_table_info"].Metric {
			for _, l := range s.Label {
				if l.GetName() == "fingerprint" {
					fps[l.GetValue()] = true
				}
			}
		}
		if v := value(t, m, "director_bgp_session_established", "peer", fmt.Sprintf("10.78.%d.1", i)); v != 1 {
			t.Errorf("director%d: session %v", i, v)
		}
	}
	if len(fps) != 1 {
		t.Errorf("the directors' fingerprints disagree: %v", fps)
	}
	var out strings.Builder
	for i := 1; i <= 3; i++ {
		out.Reset()
		cmd := fl.statusCmd(i, &out)
		if err := fl.Directors[i].Do(cmd.Run); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), fmt.Sprintf("bgp peer     10.78.%d.1 as 65000: established", i)) ||
			!strings.Contains(out.String(), "announcing [10.60.0.1/32]") || !strings.Contains(out.String(), "attached     eth0, native mode") {
			t.Errorf("director%d's status:\n%s", i, out.String())
		}
	}
	// From outside the directors' and backends' namespaces, status never
	// names an interface of this namespace that happens to have the index.
	out.Reset()
	if err := fl.statusCmd(1, &out).Run(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "attached     eth0, in another network namespace") {
		t.Errorf("director1's status from the host's namespace:\n%s", out.String())
	}
	out.Reset()
	cmd := exec.Command(directorBinary(t), "backend", "status", "--backend-bpffs", fl.BackendBPFFS(1))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "eth0, in another network namespace") {
		t.Errorf("backend1's status from the host's namespace: %v\n%s", err, out.String())
	}
}

// TestFleetFailures: long-lived connections through the VIP, one exchange
// every 100 ms, while in turn a director's service is killed, hangs, loses
// its link, stops gracefully, a director is added, and a drain is rolled
// out one director at a time. No connection may fail; each event's time
// to move the router's route, and the longest stall a connection saw,
// are logged (docs/performance.md).
func TestFleetFailures(t *testing.T) {
	fl := newFleet(t, 3)
	cfg := BackendConfig(nil, nil, 3)
	event := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			defer fl.use(t)()
			f(t)
		})
	}
	during := func(t *testing.T, what string, f func() string) {
		ss := fl.sessions(32)
		time.Sleep(300 * time.Millisecond)
		moved := f()
		time.Sleep(700 * time.Millisecond)
		gap := fl.check(ss, what)
		t.Logf("%s: %s; longest time a connection went without an exchange: %v (one every 100 ms)", what, moved, gap.Round(time.Millisecond))
		for _, s := range ss {
			s.Stop()
		}
	}
	event("SIGKILL", func(t *testing.T) {
		during(t, "director1's service killed", func() string {
			start := time.Now()
			fl.services[1].Signal(syscall.SIGKILL)
			fl.waitNexthops("[2 3]", 5*time.Second)
			return fmt.Sprintf("route moved in %v", time.Since(start).Round(time.Millisecond))
		})
		start := time.Now()
		fl.start(1, cfg)
		fl.waitNexthops("[1 2 3]", 15*time.Second)
		t.Logf("director1 back in the route %v after its service restarted (adopting its datapath)", time.Since(start).Round(time.Millisecond))
	})
	event("SIGSTOP", func(t *testing.T) {
		during(t, "director2's service stopped (SIGSTOP)", func() string {
			start := time.Now()
			fl.services[2].Signal(syscall.SIGSTOP)
			fl.waitNexthops("[1 3]", 10*time.Second)
			return fmt.Sprintf("route moved in %v (the hold timer, 3 s)", time.Since(start).Round(time.Millisecond))
		})
		start := time.Now()
		fl.services[2].Signal(syscall.SIGCONT)
		fl.waitNexthops("[1 2 3]", 15*time.Second)
		t.Logf("director2 back in the route %v after SIGCONT", time.Since(start).Round(time.Millisecond))
	})
	event("link down", func(t *testing.T) {
		during(t, "director3's link down", func() string {
			start := time.Now()
			if err := fl.SetDirectorLink(3, false); err != nil {
				t.Fatal(err)
			}
			fl.waitNexthops("[1 2]", 5*time.Second)
			return fmt.Sprintf("route moved in %v", time.Since(start).Round(100*time.Microsecond))
		})
		start := time.Now()
		if err := fl.SetDirectorLink(3, true); err != nil {
			t.Fatal(err)
		}
		fl.waitNexthops("[1 2 3]", 15*time.Second)
		t.Logf("director3 back in the route %v after its link came up", time.Since(start).Round(time.Millisecond))
	})
	event("graceful stop", func(t *testing.T) {
		during(t, "director1 stopped with SIGTERM", func() string {
			mark := fl.services[1].Mark()
			start := time.Now()
			fl.services[1].Signal(syscall.SIGTERM)
			fl.waitNexthops("[2 3]", 5*time.Second)
			took := time.Since(start)
			if _, ok := fl.services[1].WaitLog(mark, Msg("bgp: every VIP withdrawn; draining before the sessions end"), time.Second); !ok {
				t.Error("no withdrawal logged")
			}
			select {
			case <-fl.services[1].Done():
				t.Error("exited before draining")
			default:
			}
			return fmt.Sprintf("route moved in %v", took.Round(time.Millisecond))
		})
		if err := fl.services[1].Stop(); err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
		fl.start(1, cfg)
		fl.waitNexthops("[1 2 3]", 15*time.Second)
	})
	event("director added", func(t *testing.T) {
		ss := fl.sessions(32)
		time.Sleep(300 * time.Millisecond)
		start := time.Now()
		fl.start(4, cfg)
		ready := time.Since(start)
		route := fl.waitNexthops("[1 2 3 4]", 15*time.Second) + ready
		for fl.encapsulated(4) == 0 {
			if time.Since(start) > 10*time.Second {
				t.Fatal("director4 takes no traffic")
			}
			time.Sleep(5 * time.Millisecond)
		}
		traffic := time.Since(start)
		time.Sleep(700 * time.Millisecond)
		gap := fl.check(ss, "director4 added")
		t.Logf("director4: ready %v after its service started, in the route after %v, steering traffic after %v; longest stall %v",
			ready.Round(time.Millisecond), route.Round(time.Millisecond), traffic.Round(time.Millisecond), gap.Round(time.Millisecond))
		for _, s := range ss {
			s.Stop()
		}
	})
	drained := BackendConfig(map[int]string{2: "draining"}, nil, 3)
	rollout := fl.rollout
	event("rolling drain", func(t *testing.T) {
		ss := fl.sessions(48)
		time.Sleep(300 * time.Millisecond)
		rollout(t, drained)
		gap := fl.check(ss, "a drain rolled out one director at a time")
		t.Logf("rolling drain: longest stall %v", gap.Round(time.Millisecond))
		for _, s := range ss {
			s.Stop()
		}
		fl.agree(t, fingerprint(t, map[int]string{2: "draining"}, nil))
	})
	event("rolling undrain without second chance breaks", func(t *testing.T) {
		fl.rolloutBreaks(t, cfg)
		fl.agree(t, fingerprint(t, nil, nil))
	})
}

// rolloutBreaks is the negative control: cfg rolled out with second chance
// off on every backend breaks some of 48 connections.
func (fl *fleet) rolloutBreaks(t *testing.T, cfg string) {
	ss := fl.sessions(48)
	time.Sleep(300 * time.Millisecond)
	fl.secondChance(t, false)
	defer fl.secondChance(t, true)
	fl.rollout(t, cfg)
	failed := 0
	for _, s := range ss {
		if _, f, _ := s.Result(); f > 0 {
			failed++
		}
	}
	if failed == 0 {
		t.Error("no connection broke with second chance off: the rollout test cannot tell")
	}
	t.Logf("negative control: %d of %d connections broke with second chance off", failed, len(ss))
	for _, s := range ss {
		s.Stop()
	}
}

// rollout writes cfg to each director's copy in turn, waiting for each to
// apply it: the fleet holds different tables meanwhile.
func (fl *fleet) rollout(t *testing.T, cfg string) {
	for i := 1; i <= len(fl.services); i++ {
		mark := fl.services[i].Mark()
		writeConfig(t, fl.configs[i], cfg)
		if _, ok := fl.services[i].WaitLog(mark, Msg("applied"), 5*time.Second); !ok {
			t.Fatalf("director%d did not apply the new config", i)
		}
		time.Sleep(700 * time.Millisecond)
	}
}

// agree requires every director to report want as its table's
// fingerprint, in status --json and in its metrics, and to list the same
// earlier primaries in every row: the same edits make the same chains,
// whenever each director applied them.
func (fl *fleet) agree(t *testing.T, want string) {
	chains := map[int]string{}
	for i := range fl.services {
		err := fl.Directors[i].Do(func() error {
			d, err := loader.Open(fl.DirectorBPFFS(i))
			if err != nil {
				return err
			}
			defer d.Close()
			live, err := d.Live()
			if err != nil || len(live) != 1 {
				return fmt.Errorf("%d tables: %v", len(live), err)
			}
			h := sha256.New()
			for r := range table.Rows {
				fmt.Fprintln(h, live[0].History.RowHops(r))
			}
			chains[i] = hex.EncodeToString(h.Sum(nil))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range chains {
		if chains[i] != chains[1] {
			t.Errorf("director%d lists other earlier primaries than director1: %v", i, chains)
		}
	}
	for i := range fl.services {
		var out strings.Builder
		cmd := fl.statusCmd(i, &out, "--json")
		if err := fl.Directors[i].Do(cmd.Run); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Tables []struct{ Fingerprint string }
		}
		if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || len(doc.Tables) != 1 || doc.Tables[0].Fingerprint != want {
			t.Errorf("director%d's status: %v %+v", i, err, doc)
		}
		m, err := Scrape(fl.Directors[i])
		if err != nil {
			t.Fatal(err)
		}
		if v := value(t, m, "director_table_info", "table", "vip", "fingerprint", want); v != 1 {
			t.Errorf("director%d's metrics: table info %v", i, v)
		}
	}
}

// secondChance turns second chance on or off on every backend, with the
// operator's switch: 'director backend attach IFACE [--no-second-chance]'
// again on the attached backend.
func (fl *fleet) secondChance(t *testing.T, on bool) {
	for i, h := range fl.Backends {
		args := []string{"backend", "attach", "eth0", "--backend-bpffs", fl.BackendBPFFS(i + 1), "--trust", TrustedList()}
		if !on {
			args = append(args, "--no-second-chance")
		}
		var out strings.Builder
		cmd := exec.Command(directorBinary(t), args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := h.Do(cmd.Run); err != nil {
			t.Fatalf("%s: director %s: %v\n%s", h.Name, strings.Join(args, " "), err, out.String())
		}
		err := h.Do(func() error {
			b, err := loader.OpenBackend(fl.BackendBPFFS(i + 1))
			if err != nil {
				return err
			}
			defer b.Close()
			if got, err := b.SecondChance(); err != nil || got != on {
				return fmt.Errorf("second chance %v after the switch, want %v (%v)", got, on, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFleetIPv6Underlay is the fleet over the IPv6 underlay: three
// directors, each announcing the VIP over an IPv4 BGP session and VIP6
// over an IPv6 one, sending GUE over IPv6 only. Connections of both
// families spread over the directors, which agree; a director killed, and
// a drain rolled out one director at a time, fail none of them. The
// negative control: the same rollout, undone, with second chance off
// breaks some.
func TestFleetIPv6Underlay(t *testing.T) {
	fl := newFleetFor(t, 3, true)
	ss := fl.sessions(48)
	time.Sleep(time.Second)
	fl.check(ss, "steady")
	for i := 1; i <= 3; i++ {
		if n := fl.encapsulated(i); n < 50 {
			t.Errorf("director%d steered %v packets: flows do not spread over the fleet", i, n)
		}
		r, _ := DirectorLink(i)
		r6, _ := DirectorLink6(i)
		m, err := Scrape(fl.Directors[i])
		if err != nil {
			t.Fatal(err)
		}
		for _, peer := range []netip.Addr{r, r6} {
			if v := value(t, m, "director_bgp_session_established", "peer", peer.String()); v != 1 {
				t.Errorf("director%d: session with %s: %v", i, peer, v)
			}
		}
		var out strings.Builder
		if err := fl.Directors[i].Do(fl.statusCmd(i, &out).Run); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "fd60::1/128") {
			t.Errorf("director%d's status does not say it announces VIP6:\n%s", i, out.String())
		}
	}
	for _, s := range ss {
		s.Stop()
	}
	fl.agree(t, fingerprintOf(t, fl.Config(nil, nil)))

	t.Run("director killed", func(t *testing.T) {
		defer fl.use(t)()
		ss := fl.sessions(32)
		time.Sleep(300 * time.Millisecond)
		fl.services[1].Signal(syscall.SIGKILL)
		fl.waitNexthops("[2 3]", 5*time.Second)
		time.Sleep(700 * time.Millisecond)
		gap := fl.check(ss, "director1 killed")
		t.Logf("director1 killed: longest stall %v", gap.Round(time.Millisecond))
		for _, s := range ss {
			s.Stop()
		}
		fl.start(1, fl.Config(nil, nil))
		fl.waitNexthops("[1 2 3]", 15*time.Second)
	})
	t.Run("rolling drain", func(t *testing.T) {
		defer fl.use(t)()
		ss := fl.sessions(48)
		time.Sleep(300 * time.Millisecond)
		fl.rollout(t, fl.Config(map[int]string{2: "draining"}, nil))
		gap := fl.check(ss, "a drain rolled out one director at a time")
		t.Logf("rolling drain: longest stall %v", gap.Round(time.Millisecond))
		for _, s := range ss {
			s.Stop()
		}
		fl.agree(t, fingerprintOf(t, fl.Config(map[int]string{2: "draining"}, nil)))
	})
	t.Run("rolling undrain without second chance breaks", func(t *testing.T) {
		defer fl.use(t)()
		fl.rolloutBreaks(t, fl.Config(nil, nil))
	})
}

// TestFleetJoinWaitsForHistory: a director that joins a running fleet
// with no history (an empty kernel, nothing saved) serves, but does not
// announce its VIPs until it has seen a whole history_s of changes: the
// router keeps the flows on the others, whose chains list a backend
// removed just before it came, and no connection breaks. Then it is
// announced and takes its share.
func TestFleetJoinWaitsForHistory(t *testing.T) {
	const window = 20 * time.Second
	fl := newFleetFor(t, 0, false)
	withHistory := func(cfg string) string {
		return strings.Replace(cfg, `"name": "vip", `, fmt.Sprintf(`"name": "vip", "history_s": %d, `, int(window/time.Second)), 1)
	}
	for i := 1; i <= 2; i++ {
		fl.start(i, withHistory(fl.Config(nil, nil)))
	}
	fl.waitNexthops("[1 2]", 15*time.Second)
	ss := fl.sessions(48)
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	// Backend 2 drained, then removed: it stays in its rows' chains for
	// the window.
	fl.rollout(t, withHistory(BackendConfig(map[int]string{2: "draining"}, nil, 3)))
	removed := withHistory(BackendConfig(map[int]string{2: "absent"}, nil, 3))
	fl.rollout(t, removed)
	removedAt := time.Now()
	fl.extra = nil // joins as a new host does
	p := fl.start(3, removed)
	if _, ok := p.WaitLog(0, func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "joining with no history")
	}, 5*time.Second); !ok {
		t.Fatal("director3 joined with no history and did not say it waits")
	}
	var out strings.Builder
	if err := fl.Directors[3].Do(fl.statusCmd(3, &out).Run); err != nil || !strings.Contains(out.String(), "joining      with no history: serving, the VIPs announced at ") {
		t.Fatalf("status while joining: %v\n%s", err, out.String())
	}
	// Until the removed backend's connections are done (before the
	// others forget it), director3 is not a next hop. Backend2 stopped
	// being a primary at the drain, after start: its rows remember it
	// until at least start+window.
	for time.Since(start) < window-5*time.Second {
		if got, err := fl.Nexthops(); err != nil || fmt.Sprint(got) != "[1 2]" {
			t.Fatalf("%v after the removal, while director3 waits for its history, the router goes to %v (%v)", time.Since(removedAt), got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var kept, gone []*Session
	var wg sync.WaitGroup
	for _, s := range ss {
		if s.Backend != "backend2" {
			kept = append(kept, s)
			continue
		}
		// Done within the window, as a drained backend's are; all at
		// once, so that none is still running when the window ends.
		gone = append(gone, s)
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	for _, s := range gone {
		if _, failed, err := s.Result(); failed > 0 && s.FirstFail().Before(start.Add(window)) {
			t.Errorf("connection %d on the removed backend2 broke %v after the drain, within the window: %v", s.ID, s.FirstFail().Sub(start).Round(time.Millisecond), err)
		}
	}
	fl.waitNexthops("[1 2 3]", window+10*time.Second)
	time.Sleep(2 * time.Second)
	fl.check(kept, "a director joining with no history")
	if n := fl.encapsulated(3); n == 0 {
		t.Error("director3, announced, steered nothing")
	}
	t.Logf("director3 announced %v after the fleet's first change (history_s %v); %d connections kept", time.Since(start).Round(time.Second), window, len(kept))
}
