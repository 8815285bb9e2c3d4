// Command demo is `make demo`: it brings up the testbed (clients, a
// director, three backends, in network namespaces on this machine), shows
// connections spreading over the backends, reviews and applies a drain
// with the real `director` binary, shows that open connections on the
// drained backend keep working while new ones go elsewhere, shows the
// counters; then runs `director run`, which takes a backend whose health
// server stops out of the table by itself and back, and shows /metrics.
// It tears everything down at the end. Run as root.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/director/director/internal/lab/testbed"
)

var (
	bin       = flag.String("director", "bin/director", "the director binary")
	fleetDemo = flag.Bool("fleet", false, "show a fleet of directors behind a BGP router instead (make demo-fleet)")
	labCmd    = flag.String("lab", "", "up, down: 'make lab' and 'make lab-down', the testbed left running (hold: the process that keeps it)")
	labName   = flag.String("lab-name", "lab", "with --lab, the lab's name: its namespaces NAME-*, pins /sys/fs/bpf/director-NAME*, files /run/director-NAME")
	ipv6Demo  = flag.Bool("ipv6", false, "the same over an IPv6 underlay: IPv6 backends, GUE over IPv6, clients to an IPv4 and an IPv6 VIP (make demo-ipv6)")
	failed    bool
)

func say(format string, args ...any) { fmt.Printf("\n== "+format+"\n", args...) }

func check(ok bool, format string, args ...any) {
	mark := "ok  "
	if !ok {
		mark = "FAIL"
		failed = true
	}
	fmt.Printf("   [%s] %s\n", mark, fmt.Sprintf(format, args...))
}

// director runs the real CLI against the testbed's director.
func director(tb *testbed.Testbed, args ...string) {
	cmd := exec.Command(*bin, append([]string{"--bpffs", tb.BPFFS}, args...)...)
	out, err := cmd.CombinedOutput()
	fmt.Printf("   $ director %s\n", strings.Join(args, " "))
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Printf("   | %s\n", line)
	}
	if ee, ok := err.(*exec.ExitError); err != nil && !(ok && ee.ExitCode() == 2) {
		check(false, "director %s: %v", args[0], err)
	}
}

func bars(got map[string]int, total int) {
	var names []string
	for n := range got {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := got[n] * 40 / total
		fmt.Printf("   %-9s %4d %s\n", n, got[n], strings.Repeat("█", w))
	}
}

func main() {
	flag.Parse()
	start := time.Now()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "demo: run as root (it creates network namespaces and loads XDP programs)")
		os.Exit(1)
	}
	if *labCmd != "" {
		err := nameLab(*labName)
		switch {
		case err != nil:
		case *labCmd == "up":
			err = labUp(*bin)
		case *labCmd == "down":
			err = labDown(true)
		case *labCmd == "hold":
			err = labHold(*bin)
		default:
			err = fmt.Errorf("--lab %q: up or down", *labCmd)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "lab:", err)
			os.Exit(1)
		}
		return
	}
	var code int
	var closer interface{ Close() error }
	if *fleetDemo {
		say("bringing up a fleet: a router running BIRD (ECMP over the directors it hears the VIP %s from), 3 directors each "+
			"running director run with a BGP session, 3 backends, a client with 16 addresses", testbed.VIP)
		dir, _ := os.MkdirTemp("", "director-demo-fleet-")
		defer os.RemoveAll(dir)
		f, err := testbed.NewFleet(3, 3, 16, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		closer = f
		onInterrupt(f)
		code = runFleet(f, dir)
	} else {
		if *ipv6Demo {
			say("bringing up the testbed with an IPv6 underlay: a client, a director (XDP on eth0; GUE over IPv6 from %s, no IPv4 source), "+
				"a router, 3 backends at fd50::11-13 (backend program, VIPs %s and %s on lo, a TCP server); "+
				"every second connection goes to %s", testbed.DirIP6, testbed.VIP, testbed.VIP6, testbed.VIP6)
		} else {
			say("bringing up the testbed: a client, a director (XDP on eth0), a router, 3 backends (backend program, VIP %s on lo, a TCP server)", testbed.VIP)
		}
		tb, err := testbed.New(testbed.Options{Backends: 3, Underlay6: *ipv6Demo})
		if err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
			os.Exit(1)
		}
		closer = tb
		onInterrupt(tb)
		code = run(tb)
	}
	say("tearing down")
	if err := closer.Close(); err != nil {
		check(false, "teardown: %v", err)
		code = 1
	}
	fmt.Printf("\ndemo finished in %s: %s\n", time.Since(start).Round(time.Second), map[bool]string{true: "FAILED", false: "all checks passed"}[code != 0 || failed])
	if code != 0 || failed {
		os.Exit(1)
	}
}

// onInterrupt tears down on Ctrl-C too.
func onInterrupt(c interface{ Close() error }) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() {
		<-sig
		c.Close()
		os.Exit(130)
	}()
}

func run(tb *testbed.Testbed) int {
	dir, _ := os.MkdirTemp("", "director-demo-")
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "forwarding_table.json")
	drain := filepath.Join(dir, "forwarding_table.drain.json")
	plan := filepath.Join(dir, "drain.plan")

	say("the table: three active backends; applying it")
	os.WriteFile(cfg, []byte(tb.Config(nil, nil)), 0o600)
	director(tb, "apply", cfg, "--yes")

	say("300 new connections through the VIP: where they land")
	got, err := tb.Spread(300)
	if err != nil {
		check(false, "%v", err)
		return 1
	}
	bars(got, 300)
	check(len(got) == 3 && got["backend1"] > 50 && got["backend2"] > 50 && got["backend3"] > 50, "every backend takes a fair share")

	say("30 long-lived connections, each exchanging a message every 100 ms")
	var sessions []*testbed.Session
	for i := 0; i < 30; i++ {
		s, err := tb.Open(i)
		if err != nil {
			check(false, "%v", err)
			return 1
		}
		s.Start()
		sessions = append(sessions, s)
	}
	defer func() {
		for _, s := range sessions {
			s.Stop()
		}
	}()
	x := testbed.Busiest(sessions)
	on := 0
	for _, s := range sessions {
		if s.Backend == x {
			on++
		}
	}
	fmt.Printf("   %d of them are on %s\n", on, x)

	say("draining %s: the operator's review, then the apply", x)
	os.WriteFile(drain, []byte(tb.Config(map[int]string{testbed.BackendIndex(x): "draining"}, nil)), 0o600)
	director(tb, "plan", drain, "-o", plan)
	director(tb, "apply", plan)

	say("two seconds later")
	time.Sleep(2 * time.Second)
	allOK := true
	for _, s := range sessions {
		ok, bad, err := s.Result()
		if bad > 0 {
			allOK = false
			fmt.Printf("   connection %d on %s: %d failed: %v\n", s.ID, s.Backend, bad, err)
		} else if s.Backend == x && s.ID == firstOn(sessions, x) {
			fmt.Printf("   e.g. connection %d on %s: %d exchanges since the start, none failed\n", s.ID, x, ok)
		}
	}
	check(allOK, "all 30 open connections still work, the %d on draining %s included (second chance)", on, x)
	got, err = tb.Spread(100)
	if err != nil {
		check(false, "%v", err)
		return 1
	}
	bars(got, 100)
	check(got[x] == 0, "100 new connections avoid %s", x)

	say("what the kernel holds, and the counters")
	director(tb, "status")
	director(tb, "stats")
	captureDemo(tb)
	if tb.Underlay6 {
		// Another backend: it has the drained one's rows now, and
		// forwards their packets of its open connections to it.
		y := testbed.BackendIndex(x)%3 + 1
		say("backend%d's program: every GUE packet it took came over IPv6 (gue6); those of %s's open connections it forwarded there (second chance)", y, x)
		backendStatus(tb, y)
	}

	return service(tb, dir, sessions, x)
}

// service runs 'director run' over the same director: it adopts the live
// table, then takes a backend whose health endpoint stops answering out by
// itself, and brings it back.
func service(tb *testbed.Testbed, dir string, sessions []*testbed.Session, drained string) int {
	const interval, trigger = 500 * time.Millisecond, 2
	checked := filepath.Join(dir, "forwarding_table.src.json")
	os.WriteFile(checked, []byte(tb.CheckedConfig(nil, interval, trigger)), 0o600)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			check(false, "%v", err)
			return 1
		}
	}
	over := ""
	if tb.Underlay6 {
		over = " (over IPv6: the GUE check is an ICMPv6 echo in GUE over IPv6)"
	}
	say("director run: the config with %s active again and no \"healthy\": every backend's /health (HTTP) and GUE path%s "+
		"checked every %v, trigger %d", drained, over, interval, trigger)
	mark := 0
	svc, err := tb.StartService(*bin, dir, checked)
	if err != nil {
		check(false, "%v", err)
		return 1
	}
	defer svc.Stop()
	if err := svc.Ready(20 * time.Second); err != nil {
		check(false, "%v\n%s", err, svc.Output())
		return 1
	}
	rec, ok := svc.WaitLog(mark, testbed.Msg("applied"), time.Second)
	check(ok, "ready (sd_notify READY=1) after applying the config by itself: its plan is safe")
	if ok {
		fmt.Printf("   log: %v, verdict %v\n", rec["changes"], rec["verdict"])
	}
	before, _ := tb.LiveFingerprint()

	y := testbed.Busiest(sessions)
	results := map[*testbed.Session][2]int{}
	for _, s := range sessions {
		ok, bad, _ := s.Result()
		results[s] = [2]int{ok, bad}
	}
	say("stopping %s's health server (its TCP service on the VIP keeps running)", y)
	mark = svc.Mark()
	start := time.Now()
	tb.StopHealth(testbed.BackendIndex(y))
	rec, ok = svc.WaitLog(mark, testbed.Msg("applied"), 5*time.Second)
	check(ok, "%s taken out of the table by itself in %v (at most interval x trigger + interval = %v)", y, time.Since(start).Round(time.Millisecond), interval*trigger+interval)
	if ok {
		fmt.Printf("   log: %v\n", rec["changes"])
	}
	got, err := tb.Spread(60)
	if err != nil {
		check(false, "%v", err)
		return 1
	}
	bars(got, 60)
	check(got[y] == 0, "60 new connections avoid %s", y)
	time.Sleep(time.Second)
	failed := 0
	for _, s := range sessions {
		_, bad, _ := s.Result()
		failed += bad - results[s][1]
	}
	check(failed == 0, "the 30 open connections, those on %s included (second chance): no failed exchange meanwhile", y)

	say("starting %s's health server again", y)
	mark = svc.Mark()
	start = time.Now()
	tb.ServeHealth(testbed.BackendIndex(y))
	_, ok = svc.WaitLog(mark, testbed.Msg("applied"), 5*time.Second)
	now, _ := tb.LiveFingerprint()
	check(ok && now == before, "back in the table in %v; the fingerprint is the one before", time.Since(start).Round(time.Millisecond))

	say("a few lines of /metrics")
	text, err := tb.MetricsText()
	if err != nil {
		check(false, "%v", err)
		return 1
	}
	for _, line := range strings.Split(text, "\n") {
		for _, p := range []string{"director_backend_healthy{", "director_check_failures_total{", "director_applies_total{",
			"director_fail_static{", "director_packets_encapsulated_total ", "director_table_info{"} {
			if strings.HasPrefix(line, p) {
				fmt.Printf("   %s\n", line)
			}
		}
	}
	say("SIGTERM: the service stops; the datapath stays attached and steering goes on")
	check(svc.Stop() == nil, "director run exited cleanly")
	return 0
}

// captureDemo shows 'director capture' on two new connections: what
// tcpdump on the director's interface cannot see, the packets it steers,
// as they leave.
func captureDemo(tb *testbed.Testbed) {
	say("director capture: the packets the program steers, as they leave (tcpdump on eth0 sees only those it passes)")
	cmd := exec.Command(*bin, "--bpffs", tb.BPFFS, "capture", "--table", "vip", "-c", "3")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		check(false, "director capture: %v", err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(300 * time.Millisecond) // the capture starts
	tb.Spread(2)
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		err = <-done
	}
	fmt.Printf("   $ director capture --table vip -c 3\n")
	n := 0
	for _, line := range strings.Split(strings.TrimRight(out.String()+errOut.String(), "\n"), "\n") {
		fmt.Printf("   | %s\n", line)
		if strings.Contains(line, " tx encapsulated table vip row ") {
			n++
		}
	}
	check(err == nil && n == 3, "3 steered packets captured, each with its table, row, primary and secondary")
}

// backendStatus runs 'director backend status' in backend i's namespace.
func backendStatus(tb *testbed.Testbed, i int) {
	cmd := exec.Command(*bin, "backend", "status", "--backend-bpffs", tb.BackendBPFFS(i))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	err := tb.Backends[i-1].Do(cmd.Run)
	fmt.Printf("   $ director backend status   (in backend%d's namespace)\n", i)
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		fmt.Printf("   | %s\n", line)
	}
	if err != nil {
		check(false, "director backend status: %v", err)
	}
}

func firstOn(sessions []*testbed.Session, b string) int {
	for _, s := range sessions {
		if s.Backend == b {
			return s.ID
		}
	}
	return -1
}
