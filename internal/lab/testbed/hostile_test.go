package testbed

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/director/director/bpf"
	"github.com/director/director/internal/doctor"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// hostileNoFile is the descriptors 'director run' gets in
// TestRunOnAHostileHost, and hostileIdle the idle clients it is sent: more
// than it has descriptors (both divided in the emulated guests).
var hostileNoFile, hostileIdle = testenv.Reduced(4096), testenv.Reduced(10000)

// TestRunOnAHostileHost is 'director run' against what a hostile or clumsy
// host does to it: a key-only edit; config files replaced by a FIFO, a
// symlink to /dev/zero, a 100 MB file, a dangling symlink and garbage;
// 10,000 idle clients on its metrics port (it has 4,096 descriptors; a quarter of each in the guests);
// link pins removed and interfaces deleted underneath, another program
// taking its interface; an apply, detach or unload while it runs; a
// second service through a bind mount. Through all of it the service
// stays up, small and truthful, and keeps applying health changes; and
// SIGTERM ends it in time.
func TestRunOnAHostileHost(t *testing.T) {
	testenv.Kernel(t)
	tb := newTestbed(t)
	for i := 1; i <= 3; i++ {
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "live.json")
	good := checkedConfig(nil, 3)
	writeConfig(t, cfg, good)
	// The testbed's director config, with BGP to a router that never
	// answers: the VIPs it would announce are in director_bgp_vips_announced.
	dcPath := filepath.Join(dir, "director.conf")
	dc := fmt.Sprintf(`{"outbound_src_ip": "%s", "outbound_gateway_mac": "%s", "hash_fields": {"src_addr": true, "src_port": true},
	  "bgp": {"asn": 65001, "router_id": "%s", "peers": [{"address": "%s", "asn": 65000}], "drain_s": 1, "connect_retry_s": 1}}`,
		DirIP, tb.GatewayMAC, DirIP, RouterIP)
	if err := os.WriteFile(dcPath, []byte(dc), 0o600); err != nil {
		t.Fatal(err)
	}
	// A second interface to steer, which the test deletes and makes again.
	if err := tb.Director.Do(func() error { return veth("spare0", "spare1") }); err != nil {
		t.Fatal(err)
	}
	allUp := fingerprint(t, nil, nil)
	p, err := StartServiceLimited(tb.Director, tb.BPFFS, hostileNoFile, directorBinary(t), t.TempDir(), cfg,
		"--director-config", dcPath, "--attach", "spare0", "--no-history-wait")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("director run's log:\n%s", p.Output())
		}
	})
	if err := p.Ready(testenv.Scaled(20 * time.Second)); err != nil {
		t.Fatalf("%v\n%s", err, p.Output())
	}
	// An emulated guest's first checks may time out, and flap while it is
	// slow: the service brings the backends in once their checks pass,
	// which can take a few rounds. The table is all up at once if every
	// first check failed (fail-static), so the test waits for the checks'
	// own word, with nothing pending. If two or more came up together the
	// service holds that as unsafe (rows at risk) until a person applies
	// it: the test then does what the log tells the operator to.
	time.Sleep(testenv.Scaled(interval * (trigger + 2)))
	if value(t, scrape(t, tb), "director_held_changes") != 0 {
		checked := filepath.Join(dir, "checked.json")
		for _, args := range [][]string{{"healthcheck", cfg, "-o", checked, "--director-config", dcPath},
			{"apply", checked, "--yes", "--allow-unsafe", "--director-config", dcPath, "--bpffs", tb.BPFFS}} {
			var out strings.Builder
			cmd := exec.Command(directorBinary(t), args...)
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := tb.Director.Do(cmd.Run); err != nil {
				t.Fatalf("%v (the operator's way with a held health change): %v\n%s", args, err, out.String())
			}
		}
		t.Log("the first checks came in slowly: the held health change was applied by hand")
	}
	waitSettled(t, tb, allUp, 3*interval*(trigger+2))
	alive := func(t *testing.T, when string) {
		t.Helper()
		select {
		case <-p.Done():
			t.Fatalf("%s: director run exited: %v", when, p.Err())
		default:
		}
		rss, err := p.RSS()
		if err != nil {
			t.Fatal(err)
		}
		if rss > 100<<20 {
			t.Fatalf("%s: anonymous RSS %d MB (heap and stacks), over 100", when, rss>>20)
		}
	}
	// flip takes backend i's health server away and back, and checks
	// the service applies both ways.
	flip := func(t *testing.T, i int, what string) {
		t.Helper()
		if err := tb.StopHealth(i); err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, fingerprint(t, nil, map[int]bool{i: false}), interval*(trigger+2), what+": backend down")
		if err := tb.ServeHealth(i); err != nil {
			t.Fatal(err)
		}
		waitFingerprint(t, tb, allUp, interval*(trigger+2), what+": backend back")
	}
	metric := func(t *testing.T, name string, labels ...string) float64 {
		t.Helper()
		return value(t, scrape(t, tb), name, labels...)
	}

	// A new hash key with GLB's two hops (history_hops false): unsafe.
	// (With history in the packets, a table of three backends holds every
	// earlier primary in every row's chain: a new key is safe there.)
	keyEdit := strings.Replace(strings.Replace(good, "0f0e0d0c0b0a09080706050403020100", "ffeeddccbbaa99887766554433221100", 1),
		`"name": "vip", `, `"name": "vip", "history_hops": false, `, 1)
	t.Run("a key-only edit is held as unsafe", func(t *testing.T) {
		mark := p.Mark()
		writeConfig(t, cfg, keyEdit)
		rec, ok := p.WaitLog(mark, msg("UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with "+
			"'director apply --allow-unsafe' if it is what you want now"), testenv.Scaled(3*time.Second))
		if !ok || !strings.Contains(fmt.Sprint(rec["reasons"]), "hash_key changed") {
			t.Fatalf("the key edit was not held as unsafe: %v", rec)
		}
		// The round that logged the hold exports it when it ends.
		deadline := time.Now().Add(testenv.Scaled(2 * time.Second))
		for metric(t, "director_held_changes") != 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if liveFingerprint(t, tb) != allUp || metric(t, "director_held_changes") != 1 {
			t.Fatal("the key edit was applied, or is not exported as held")
		}
		// Health changes go on being applied with the edit held.
		flip(t, 1, "with the key edit held")
		mark = p.Mark()
		writeConfig(t, cfg, good)
		if _, ok := p.WaitLog(mark, msg("config edit adopted"), testenv.Scaled(3*time.Second)); !ok {
			t.Fatal("going back to the live key was not adopted")
		}
		if metric(t, "director_held_changes") != 0 {
			t.Fatal("still held")
		}
	})

	t.Run("a held edit is released as documented", func(t *testing.T) {
		// The service runs with --director-config; the held edit changes
		// the tables only, so 'director apply CONFIG --yes --allow-unsafe'
		// (the live director config kept) is the held change, and the
		// service lets it through.
		release := func(body, what string) {
			t.Helper()
			mark := p.Mark()
			writeConfig(t, cfg, body)
			if _, ok := p.WaitLog(mark, msg("UNSAFE config edit held: what is live keeps serving, and the edit is tried again every check interval and applied once it is safe; review it with 'director plan' and apply it with "+
				"'director apply --allow-unsafe' if it is what you want now"), testenv.Scaled(3*time.Second)); !ok {
				t.Fatalf("%s was not held", what)
			}
			// director doctor names the held change, and how to release it.
			var doc strings.Builder
			dcmd := exec.Command(directorBinary(t), "doctor", "--json", "--bpffs", tb.BPFFS)
			dcmd.Stdout = &doc
			tb.Director.Do(func() error { dcmd.Run(); return nil })
			var r doctor.Report
			if err := json.Unmarshal([]byte(doc.String()), &r); err != nil {
				t.Fatalf("doctor: %v\n%s", err, doc.String())
			}
			c := r.Named("service")
			if dcmd.ProcessState.ExitCode() != doctor.ExitFindings || c == nil || c.Status != doctor.Problem ||
				!strings.Contains(c.Findings[0].What, "holds a change of vip") || len(c.Findings[0].Run) != 2 ||
				!strings.Contains(c.Findings[0].Run[0], " plan "+cfg+" ") {
				t.Fatalf("doctor, with %s held: exit %d, %+v", what, dcmd.ProcessState.ExitCode(), c)
			}
			// The doctor's fix, run as printed (issue 47), releases it.
			var printed []any
			for _, line := range c.Findings[0].Run {
				printed = append(printed, line)
			}
			runPrinted(t, tb.Director, printed)
			if _, ok := p.WaitLog(mark, msg("config edit adopted"), testenv.Scaled(3*time.Second)); !ok {
				t.Fatalf("%s, applied by hand, was not adopted", what)
			}
		}
		release(keyEdit, "a key edit")
		release(strings.Replace(good, `"name": "vip", `, `"name": "vip", "history_hops": false, `, 1), "the key edit undone")
		// And back to history in the packets: a change of settings alone,
		// safe, applied by the service.
		mark := p.Mark()
		writeConfig(t, cfg, good)
		if _, ok := p.WaitLog(mark, msg("config edit adopted"), testenv.Scaled(3*time.Second)); !ok {
			t.Fatal("history_hops back on was not adopted")
		}
		if liveFingerprint(t, tb) != allUp {
			t.Fatal("the table is not what it was")
		}
	})

	t.Run("config files that are not configs", func(t *testing.T) {
		put := func(make func(tmp string) error) {
			t.Helper()
			tmp := cfg + ".new"
			os.RemoveAll(tmp)
			if err := make(tmp); err != nil {
				t.Fatal(err)
			}
			os.RemoveAll(cfg)
			if err := os.Rename(tmp, cfg); err != nil {
				t.Fatal(err)
			}
		}
		garbage := make([]byte, 4096)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range garbage {
			garbage[i] = byte(rng.Uint32())
		}
		errorsBefore := metric(t, "director_config_errors_total")
		faults := []struct {
			name, want string
			make       func(tmp string) error
		}{
			{"a FIFO", "it is a FIFO", func(tmp string) error { return syscall.Mkfifo(tmp, 0o600) }},
			{"a symlink to /dev/zero", "it is a character device", func(tmp string) error { return os.Symlink("/dev/zero", tmp) }},
			{"a 100 MB file", "104857600 bytes; a JSON config may be at most", func(tmp string) error {
				f, err := os.Create(tmp)
				if err != nil {
					return err
				}
				defer f.Close()
				return f.Truncate(100 << 20)
			}},
			{"a dangling symlink", "no such file or directory", func(tmp string) error { return os.Symlink(filepath.Join(dir, "nowhere"), tmp) }},
			{"garbage", "invalid JSON", func(tmp string) error { return os.WriteFile(tmp, garbage, 0o600) }},
		}
		for n, f := range faults {
			mark := p.Mark()
			put(f.make)
			rec, ok := p.WaitLog(mark, msg("config not used; the last good one is kept"), testenv.Scaled(3*time.Second))
			if !ok || !strings.Contains(fmt.Sprint(rec["err"]), f.want) {
				t.Fatalf("%s: %v", f.name, rec)
			}
			// Left in place, it is not read, logged or counted again.
			time.Sleep(3 * time.Second)
			if c := p.CountSince(mark, msg("config not used; the last good one is kept")); c != 1 {
				t.Errorf("%s: logged %d times in 3 s", f.name, c)
			}
			if got := metric(t, "director_config_errors_total"); got != errorsBefore+float64(n+1) {
				t.Errorf("%s: director_config_errors_total %v, want %v", f.name, got, errorsBefore+float64(n+1))
			}
			alive(t, f.name)
			if n == 0 {
				// The FIFO that used to wedge the loop: SIGHUP is heard,
				// and health changes are applied.
				mark := p.Mark()
				p.Signal(syscall.SIGHUP)
				if _, ok := p.WaitLog(mark, msg("SIGHUP: reading the config files, and what the kernel holds"), testenv.Scaled(time.Second)); !ok {
					t.Fatal("SIGHUP went unheard with a FIFO in place")
				}
				flip(t, 2, "with a FIFO for a config")
			}
		}
		// A good edit is applied within 2 s.
		mark := p.Mark()
		start := time.Now()
		put(func(tmp string) error {
			return os.WriteFile(tmp, []byte(checkedConfig(map[int]string{3: "draining"}, 3)), 0o600)
		})
		waitFingerprint(t, tb, fingerprint(t, map[int]string{3: "draining"}, nil), 2*time.Second, "the good edit")
		t.Logf("the good edit after the faults was applied in %v", time.Since(start).Round(time.Millisecond))
		if _, ok := p.WaitLog(mark, msg("config files usable again"), testenv.Scaled(time.Second)); !ok {
			t.Error("no word that the config files are usable again")
		}
		writeConfig(t, cfg, good)
		waitFingerprint(t, tb, allUp, 2*time.Second, "back to the good config")
	})

	t.Run("idle clients beyond its descriptors", func(t *testing.T) {
		// This process holds the clients: a host whose limit is lower
		// (the guests' 4,096) has it raised, as root may.
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		if need := uint64(hostileIdle + 2000); lim.Cur < need {
			old := lim
			lim.Cur, lim.Max = need, max(lim.Max, need)
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
			defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
		}
		var idle []net.Conn
		defer func() {
			for _, c := range idle {
				c.Close()
			}
		}()
		err := tb.Director.Do(func() error {
			for len(idle) < hostileIdle {
				c, err := net.DialTimeout("tcp4", MetricsAddr, 5*time.Second)
				if err != nil {
					return fmt.Errorf("idle client %d: %w", len(idle), err)
				}
				idle = append(idle, c)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A scrape, health changes, a config edit: all as before.
		if metric(t, "director_held_changes") != 0 {
			t.Fatal("scrape among idle clients")
		}
		t.Logf("%d idle clients, the service has %d descriptors", len(idle), hostileNoFile)
		flip(t, 3, "among idle clients")
		writeConfig(t, cfg, checkedConfig(map[int]string{3: "draining"}, 3))
		waitFingerprint(t, tb, fingerprint(t, map[int]string{3: "draining"}, nil), 2*time.Second, "an edit among idle clients")
		writeConfig(t, cfg, good)
		waitFingerprint(t, tb, allUp, 2*time.Second, "back among idle clients")
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.PID()))
		if err != nil {
			t.Fatal(err)
		}
		if len(fds) > 256 {
			t.Errorf("the service holds %d descriptors among %d idle clients", len(fds), len(idle))
		}
		if fam := scrape(t, tb)["director_checks_skipped_total"]; fam != nil {
			t.Errorf("checks skipped for want of descriptors: %v", fam)
		}
		alive(t, "idle clients")
	})

	t.Run("attachments lost underneath", func(t *testing.T) {
		if v := metric(t, "director_bgp_vips_announced"); v != 1 {
			t.Fatalf("director_bgp_vips_announced %v before", v)
		}
		// The link pin removed: XDP is gone from eth0 until put back.
		mark := p.Mark()
		if err := os.Remove(filepath.Join(tb.BPFFS, "links", "eth0")); err != nil {
			t.Fatal(err)
		}
		rec, ok := p.WaitLog(mark, msg("attachment lost: attached again"), testenv.Scaled(2*time.Second))
		if !ok || rec["interface"] != "eth0" {
			t.Fatalf("a removed link pin: %v", rec)
		}
		if got := spread(t, tb, 30); len(got) != 3 {
			t.Fatalf("after the re-attach, connections spread as %v", got)
		}
		if metric(t, "director_interface_attached", "interface", "eth0", "mode", "native") != 1 {
			t.Fatal("eth0 not exported as attached")
		}
		// An interface deleted and made again.
		mark = p.Mark()
		if err := tb.Director.Do(func() error { return testrun.DeleteLink("spare0") }); err != nil {
			t.Fatal(err)
		}
		if _, ok := p.WaitLog(mark, msg("interface gone: nothing is steered there until it comes back"), testenv.Scaled(2*time.Second)); !ok {
			t.Fatal("spare0's deletion was not reported")
		}
		if metric(t, "director_interface_attached", "interface", "spare0") != 0 || metric(t, "director_bgp_vips_announced") != 1 {
			t.Fatal("spare0 is exported as attached, or the VIPs went with it while eth0 steers")
		}
		if attachedInStatus(t, tb, "spare0") || !attachedInStatus(t, tb, "eth0") {
			t.Fatal("once spare0's deletion was logged, status does not say spare0 is gone and eth0 steers")
		}
		mark = p.Mark()
		if err := tb.Director.Do(func() error { return veth("spare0", "spare1") }); err != nil {
			t.Fatal(err)
		}
		if rec, ok := p.WaitLog(mark, msg("attachment lost: attached again"), testenv.Scaled(2*time.Second)); !ok || rec["interface"] != "spare0" {
			t.Fatalf("spare0 made again: %v", rec)
		}
		if metric(t, "director_interface_attached", "interface", "spare0", "mode", "native") != 1 || !attachedInStatus(t, tb, "spare0") {
			t.Fatal("spare0 not exported as attached again, or not in status")
		}
		// Another program takes eth0 while its pin is gone, and spare0 is
		// deleted: nothing steers, and the VIPs are withdrawn.
		other, err := passAll()
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		mark = p.Mark()
		err = tb.Director.Do(func() error {
			if err := testrun.DeleteLink("spare0"); err != nil {
				return err
			}
			// Between the pin's removal and the service's next look, the
			// other program takes the hook (driver mode, by netlink). The
			// link goes some time after its last pin, and the service may
			// be first: again until the other program has it.
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			for try := 0; ; try++ {
				os.Remove(filepath.Join(tb.BPFFS, "links", "eth0"))
				err = netlink.LinkSetXdpFdWithFlags(l, other.FD(), 4 /* XDP_FLAGS_DRV_MODE */)
				if err == nil || try == 200 {
					return err
				}
				time.Sleep(time.Millisecond)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.WaitLog(mark, msg("no interface steers: the VIPs are withdrawn until one does"), testenv.Scaled(2*time.Second)); !ok {
			t.Fatal("nothing steers, and the VIPs were not withdrawn")
		}
		if v := metric(t, "director_bgp_vips_announced"); v != 0 {
			t.Fatalf("director_bgp_vips_announced %v with nothing steering", v)
		}
		if metric(t, "director_interface_attached", "interface", "eth0") != 0 {
			t.Fatal("eth0 is exported as attached while another program holds it")
		}
		mark = p.Mark()
		err = tb.Director.Do(func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, -1, 4)
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.WaitLog(mark, msg("steering again: the VIPs are announced"), testenv.Scaled(2*time.Second)); !ok {
			t.Fatal("eth0 freed: not steering again")
		}
		if v := metric(t, "director_bgp_vips_announced"); v != 1 {
			t.Fatalf("director_bgp_vips_announced %v once eth0 steers again", v)
		}
		if err := tb.Director.Do(func() error { return veth("spare0", "spare1") }); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the pins are the service's", func(t *testing.T) {
		run := func(args ...string) (string, error) {
			var out strings.Builder
			cmd := exec.Command(directorBinary(t), append(args, "--bpffs", tb.BPFFS)...)
			cmd.Stdout, cmd.Stderr = &out, &out
			err := tb.Director.Do(cmd.Run)
			return out.String(), err
		}
		// The interfaces taken and given back just now may have cost a
		// round of GUE checks, and the service may still be bringing a
		// backend back: start from the settled table.
		waitFingerprint(t, tb, allUp, interval*(trigger+3), "settled before the refused commands")
		pid := fmt.Sprintf("pid %d", p.PID())
		for _, args := range [][]string{{"unload"}, {"detach", "eth0"},
			{"apply", cfg, "--yes"}, {"apply", cfg, "--yes", "--allow-unsafe"}} {
			out, err := run(args...)
			if err == nil || !strings.Contains(out, args[0]+" refused") || !strings.Contains(out, pid) {
				t.Errorf("director %s while the service runs: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		if liveFingerprint(t, tb) != allUp {
			t.Fatal("a refused command changed the table")
		}
		// A second service through a bind mount of the pins.
		alias := tb.BPFFS + "-alias"
		if err := os.Mkdir(alias, 0o700); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(alias)
		if err := unix.Mount(tb.BPFFS, alias, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		defer unix.Unmount(alias, unix.MNT_DETACH)
		q, err := StartService(tb.Director, alias, directorBinary(t), t.TempDir(), cfg, "--metrics", "127.0.0.1:9465")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-q.Done():
		case <-time.After(testenv.Scaled(10 * time.Second)):
			q.Stop()
			t.Fatal("a second service through a bind mount is running")
		}
		if !strings.Contains(q.Output(), "already serves") || !strings.Contains(q.Output(), pid) {
			t.Fatalf("a second service through a bind mount: %v\n%s", q.Err(), q.Output())
		}
	})

	t.Run("a change made outside is noticed and planned from", func(t *testing.T) {
		// Written straight to the maps, as a tool that ignores the
		// refusal would: backend3 drained.
		c, err := config.Parse([]byte(BackendConfig(map[int]string{3: "draining"}, nil, 3)))
		if err != nil {
			t.Fatal(err)
		}
		tabs, err := table.BuildAll(c)
		if err != nil {
			t.Fatal(err)
		}
		mark := p.Mark()
		err = tb.Director.Do(func() error {
			d, err := tb.OpenDirector()
			if err != nil {
				return err
			}
			defer d.Close()
			_, _, err = d.Commit(&loader.Proposal{Tables: tabs}, nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		rec, ok := p.WaitLog(mark, msg("the live tables changed outside the service; planning from what is live now"), testenv.Scaled(2*interval+time.Second))
		if !ok {
			t.Fatal("the outside change was not noticed")
		}
		t.Logf("noticed in %v: %v -> %v", time.Since(start).Round(time.Millisecond), rec["before"], rec["after"])
		waitFingerprint(t, tb, allUp, 2*time.Second, "the way back from the outside change")
		if _, ok := p.WaitLog(mark, func(m map[string]any) bool { return m["msg"] == "applied" && m["trigger"] == "outside change" }, testenv.Scaled(time.Second)); !ok {
			t.Error("the way back was not applied as an outside change's")
		}
	})

	t.Run("SIGTERM ends it in time", func(t *testing.T) {
		// With a FIFO for a config, as when it used to hang.
		os.Remove(cfg)
		if err := syscall.Mkfifo(cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		start := time.Now()
		p.Signal(syscall.SIGTERM)
		select {
		case <-p.Done():
		case <-time.After(testenv.Scaled(5 * time.Second)):
			t.Fatal("director run did not end 5 s after SIGTERM")
		}
		// drain_s 1, and a second.
		if took := time.Since(start); took > testenv.Scaled(2*time.Second) {
			t.Errorf("SIGTERM to exit: %v, more than drain_s + 1 s", took)
		}
		if p.Err() != nil {
			t.Errorf("exit: %v", p.Err())
		}
		// At start: a FIFO config, a /dev/zero director config.
		for _, c := range []struct {
			args []string
			want string
		}{{nil, "it is a FIFO"}, {[]string{"--director-config", "/dev/zero"}, "/dev/zero: not a regular file: it is a character device"}} {
			cfgArg := cfg
			if c.args != nil {
				cfgArg = filepath.Join(dir, "good.json")
				writeConfig(t, cfgArg, good)
			}
			q, err := StartService(tb.Director, tb.BPFFS, directorBinary(t), t.TempDir(), cfgArg, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-q.Done():
			case <-time.After(testenv.Scaled(5 * time.Second)):
				q.Stop()
				t.Fatalf("director run with %s: still running", c.want)
			}
			if !strings.Contains(q.Output(), c.want) {
				t.Errorf("director run with %s at start: %v\n%s", c.want, q.Err(), q.Output())
			}
		}
	})
}

// waitSettled waits until the live table is want, by the checks (not
// fail-static: every backend healthy, by its metric) and with no change
// held.
func waitSettled(t *testing.T, tb *Testbed, want string, within time.Duration) {
	t.Helper()
	within = testenv.Scaled(within)
	start := time.Now()
	for {
		fams, err := tb.Scrape()
		if err == nil && liveFingerprint(t, tb) == want && allOne(fams["director_backend_healthy"]) &&
			!anyNonZero(fams["director_fail_static"]) && !anyNonZero(fams["director_held_changes"]) {
			return
		}
		if time.Since(start) > within {
			t.Fatalf("not settled after %v: live %s (want %s), scrape error %v", within, table.ShortFingerprint(liveFingerprint(t, tb)),
				table.ShortFingerprint(want), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allOne says whether fam has samples, all of them 1.
func allOne(fam *dto.MetricFamily) bool {
	if fam == nil || len(fam.Metric) == 0 {
		return false
	}
	for _, m := range fam.Metric {
		if m.GetGauge().GetValue() != 1 {
			return false
		}
	}
	return true
}

// anyNonZero says whether a sample of fam is not 0.
func anyNonZero(fam *dto.MetricFamily) bool {
	if fam == nil {
		return false
	}
	for _, m := range fam.Metric {
		if m.GetGauge().GetValue() != 0 {
			return true
		}
	}
	return false
}

// veth makes a veth pair in the current namespace, both ends up.
func veth(a, b string) error {
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: a}, PeerName: b}
	if err := netlink.LinkAdd(v); err != nil {
		return err
	}
	for _, n := range []string{a, b} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
	}
	return nil
}

// passAll is the lab's pass-everything program: another tool's program,
// for taking an interface's XDP hook.
func passAll() (interface {
	FD() int
	Close() error
}, error) {
	var objs bpf.LabObjects
	spec, err := xdpbuild.Lab()
	if err != nil {
		return nil, err
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, err
	}
	prog := objs.XdpPassAll
	objs.XdpPassAll = nil
	objs.Close()
	return prog, nil
}
