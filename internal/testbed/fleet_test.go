package testbed

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/testenv"
)

// fleet is a fleet under test: its network and its services.
type fleet struct {
	*Fleet
	t        *testing.T
	tmp      string
	services map[int]*Service
	configs  map[int]string // each director's copy of the forwarding table
}

func newFleet(t *testing.T, directors int) *fleet {
	t.Helper()
	testenv.Kernel(t)
	tmp := t.TempDir()
	f, err := NewFleet(3, 4, 32, tmp)
	if err != nil {
		t.Fatal(err)
	}
	fl := &fleet{Fleet: f, t: t, tmp: tmp, services: map[int]*Service{}, configs: map[int]string{}}
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
		fl.start(i, BackendConfig(nil, nil, 3))
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
		"--director-config", fl.DirectorConfig(i))
	if err != nil {
		fl.t.Fatal(err)
	}
	fl.services[i] = s
	if err := s.Ready(20 * time.Second); err != nil {
		fl.t.Fatalf("director%d: %v\n%s", i, err, s.Output())
	}
	return s
}

// waitNexthops waits until the router's VIP route goes to the directors
// want names ("[1 2 3]"), and says how long it took.
func (fl *fleet) waitNexthops(want string, within time.Duration) time.Duration {
	fl.t.Helper()
	start := time.Now()
	for {
		got, err := fl.Nexthops()
		if err != nil {
			fl.t.Fatal(err)
		}
		if fmt.Sprint(got) == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			fl.t.Fatalf("the router's route to the VIP goes to directors %v after %v, want %s", got, within, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sessions opens n long-lived connections from the client's addresses and
// starts their exchanges.
func (fl *fleet) sessions(n int) []*Session {
	fl.t.Helper()
	var ss []*Session
	for k := 0; k < n; k++ {
		s, err := fl.OpenFrom(k, fl.Clients[k%len(fl.Clients)])
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

// check requires every session to have worked since mark, with no failed
// exchange, except those on backends in down; it returns the longest gap
// between two exchanges that worked.
func (fl *fleet) check(ss []*Session, what string, down ...string) {
	fl.t.Helper()
	for _, s := range ss {
		ok, failed, err := s.Result()
		if slices.Contains(down, s.Backend) {
			continue
		}
		if failed != 0 || ok == 0 {
			fl.t.Errorf("%s: connection %d (%s): %d ok, %d failed: %v", what, s.ID, s.Backend, ok, failed, err)
		}
	}
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
			!strings.Contains(out.String(), "announcing [10.60.0.1/32]") {
			t.Errorf("director%d's status:\n%s", i, out.String())
		}
	}
}
