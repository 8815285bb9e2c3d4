package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/director/director/internal/lab/testbed"
)

// runFleet shows a fleet: connections spread over three directors, one
// director's service is killed and its connections carry on through the
// others, it comes back, and every director holds the same table.
func runFleet(f *testbed.Fleet, dir string) int {
	d := &fleetRun{f: f, dir: dir, cfg: filepath.Join(dir, "forwarding_table.json"), services: map[int]*testbed.Service{}}
	os.WriteFile(d.cfg, []byte(testbed.BackendConfig(nil, nil, 3)), 0o600)
	defer d.stop()

	say("director run on directors 1-3, the same forwarding table on each")
	for i := 1; i <= 3; i++ {
		if !d.start(i) {
			return 1
		}
	}
	took, ok := d.waitRoute("[1 2 3]")
	check(ok, "the router's route to %s has a next hop per director after %v (BGP)", testbed.VIP, took.Round(time.Millisecond))
	if !ok {
		return 1
	}
	say("48 long-lived connections from 16 client addresses, a message every 100 ms each")
	if !d.openSessions(48) {
		return 1
	}
	time.Sleep(time.Second)
	for i := 1; i <= 3; i++ {
		fmt.Printf("   director%d has steered %6.0f packets\n", i, encapsulated(f, i))
	}
	if !d.killOneAndBringBack() {
		return 1
	}
	failedN, gap := 0, time.Duration(0)
	for _, s := range d.sessions {
		if _, bad, _ := s.Result(); bad > 0 {
			failedN++
		}
		gap = max(gap, s.MaxGap())
	}
	check(failedN == 0, "all 48 connections worked throughout: %d failed; the longest any went without an answer: %v", failedN, gap.Round(time.Millisecond))
	if !d.sameTable() {
		return 1
	}
	return 0
}

// fleetRun is the fleet demo's state: the services it started and the
// client sessions it keeps open, all stopped at the end.
type fleetRun struct {
	f        *testbed.Fleet
	dir, cfg string
	services map[int]*testbed.Service
	sessions []*testbed.Session
}

func (d *fleetRun) stop() {
	for _, s := range d.sessions {
		s.Stop()
	}
	for _, s := range d.services {
		s.Stop()
	}
}

// start runs director run on director i (making the director first if it
// is gone) and waits for READY.
func (d *fleetRun) start(i int) bool {
	f := d.f
	if f.Directors[i] == nil {
		if _, err := f.AddDirector(i); err != nil {
			check(false, "%v", err)
			return false
		}
	}
	// The demo's fleet starts together, with no connection to keep: no
	// wait for a history (a director joining a running fleet waits).
	s, err := testbed.StartService(f.Directors[i], f.DirectorBPFFS(i), *bin, d.dir, d.cfg, "--director-config", f.DirectorConfig(i), "--no-history-wait")
	if err == nil {
		err = s.Ready(20 * time.Second)
	}
	if err != nil {
		check(false, "director%d: %v", i, err)
		return false
	}
	d.services[i] = s
	return true
}

// waitRoute waits up to 15 s for the router's next hops to the VIP to be
// want, and says how long it took.
func (d *fleetRun) waitRoute(want string) (time.Duration, bool) {
	t0 := time.Now()
	for time.Since(t0) < 15*time.Second {
		if got, _ := d.f.Nexthops(); fmt.Sprint(got) == want {
			return time.Since(t0), true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(t0), false
}

func (d *fleetRun) openSessions(n int) bool {
	for k := 0; k < n; k++ {
		s, err := d.f.OpenFrom(k, d.f.Clients[k%len(d.f.Clients)])
		if err != nil {
			check(false, "%v", err)
			return false
		}
		s.Start()
		d.sessions = append(d.sessions, s)
	}
	return true
}

// killOneAndBringBack kills director2's service, shows the route and the
// traffic moving to the other two, and starts it again.
func (d *fleetRun) killOneAndBringBack() bool {
	f := d.f
	say("killing director2's service (SIGKILL): its BGP session closes, the router drops it")
	d.services[2].Signal(syscall.SIGKILL)
	took, ok := d.waitRoute("[1 3]")
	check(ok, "the route moved to directors 1 and 3 in %v", took.Round(time.Millisecond))
	time.Sleep(time.Second)
	before := map[int]float64{1: encapsulated(f, 1), 3: encapsulated(f, 3)}
	time.Sleep(500 * time.Millisecond)
	fmt.Printf("   directors 1 and 3 now steer %0.f and %0.f packets a second\n", 2*(encapsulated(f, 1)-before[1]), 2*(encapsulated(f, 3)-before[3]))

	say("starting it again: it adopts its pinned datapath and announces again")
	t0 := time.Now()
	if !d.start(2) {
		return false
	}
	_, ok = d.waitRoute("[1 2 3]")
	check(ok, "director2 is back in the route %v after its service started", time.Since(t0).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	return true
}

// sameTable prints each director's table and BGP metrics and checks that
// the fleet has one fingerprint.
func (d *fleetRun) sameTable() bool {
	say("every director holds the same table")
	fps := map[string]bool{}
	for i := 1; i <= 3; i++ {
		text, err := testbed.MetricsText(d.f.Directors[i])
		if err != nil {
			check(false, "%v", err)
			return false
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "director_table_info{") || strings.HasPrefix(line, "director_bgp_session_established{") {
				fmt.Printf("   director%d: %s\n", i, line)
			}
			if strings.HasPrefix(line, "director_table_info{") {
				fps[line] = true
			}
		}
	}
	check(len(fps) == 1, "one fingerprint across the fleet")
	return true
}

func encapsulated(f *testbed.Fleet, i int) float64 {
	m, err := testbed.Scrape(f.Directors[i])
	if err != nil || m["director_packets_encapsulated_total"] == nil {
		return 0
	}
	return m["director_packets_encapsulated_total"].Metric[0].Counter.GetValue()
}
