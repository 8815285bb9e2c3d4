package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
)

// The docs' commands use the default places: pins under /sys/fs/bpf,
// files in /etc/director, interface eth0. A test must not touch the
// host's, so each command runs in a mount namespace of its own in which
// /sys/fs/bpf is a directory of the test's (on the host's bpffs, so pins
// outlive the command as on a host) and /etc/director holds the test's
// files, in a network namespace whose eth0 is the test's veth.
const (
	docsShellEnv   = "DIRECTOR_TEST_DOCS_SHELL"   // the line to run
	docsBPFFSEnv   = "DIRECTOR_TEST_DOCS_BPFFS"   // shown at /sys/fs/bpf
	docsEtcEnv     = "DIRECTOR_TEST_DOCS_ETC"     // shown at /etc/director
	docsRealEtcEnv = "DIRECTOR_TEST_DOCS_REALETC" // an empty directory, to hold the real /etc
)

// docsShell is what this test binary does when started as a docHost's
// command, in a new mount namespace (Go made its mounts private): it
// shows the test's pins and files at the default paths, then runs the
// line in sh. The real /etc stays readable: a tmpfs over /etc holds a
// link to each of its entries, and the test's director directory.
func docsShell(line string) int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "docs shell: %s: %v\n", what, err)
		return 125
	}
	if err := unix.Mount(os.Getenv(docsBPFFSEnv), "/sys/fs/bpf", "", unix.MS_BIND, ""); err != nil {
		return fail("/sys/fs/bpf", err)
	}
	real := os.Getenv(docsRealEtcEnv)
	if err := unix.Mount("/etc", real, "", unix.MS_BIND, ""); err != nil {
		return fail("keeping /etc", err)
	}
	if err := unix.Mount("tmpfs", "/etc", "tmpfs", 0, "mode=0755"); err != nil {
		return fail("/etc", err)
	}
	ents, _ := os.ReadDir(real)
	for _, e := range ents {
		if e.Name() != "director" {
			os.Symlink(filepath.Join(real, e.Name()), filepath.Join("/etc", e.Name()))
		}
	}
	if err := os.Mkdir("/etc/director", 0o755); err != nil {
		return fail("/etc/director", err)
	}
	if err := unix.Mount(os.Getenv(docsEtcEnv), "/etc/director", "", unix.MS_BIND, ""); err != nil {
		return fail("/etc/director", err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		return fail("sh", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DIRECTOR_TEST_DOCS_") {
			env = append(env, kv)
		}
	}
	return fail("exec sh", syscall.Exec(sh, []string{"sh", "-c", "exec " + line}, env))
}

// A docHost runs the docs' commands as a person on a host would.
type docHost struct {
	t    *testing.T
	ns   netns.NsHandle
	dir  string   // the working directory
	env  []string // the paths docsShell shows
	name string
}

// lockedBuffer collects a running command's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (h *docHost) command(line string, out io.Writer) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		h.t.Fatal(err)
	}
	shim := t2shim(h.t)
	c := exec.Command(exe)
	c.Dir = h.dir
	c.Env = append(os.Environ(), h.env...)
	c.Env = append(c.Env, docsShellEnv+"="+line, "PATH="+shim+":"+os.Getenv("PATH"))
	c.Stdout, c.Stderr = out, out
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return c
}

// t2shim is a directory whose 'director' runs this test binary as the
// director (with the tests' plan key).
func t2shim(t *testing.T) string {
	exe, _ := os.Executable()
	bin := t.TempDir()
	script := "#!/bin/sh\nDIRECTOR_TEST_AS_MAIN=1 DIRECTOR_TEST_PLANKEY_DIR='" + planKeyDir + "' exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "director"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// run runs line to its end and returns what it printed and its exit code.
func (h *docHost) run(line string) (string, int) {
	h.t.Helper()
	var out lockedBuffer
	c := h.command(line, &out)
	if err := testrun.Do(h.ns, c.Start); err != nil {
		h.t.Fatalf("%s: %s: %v", h.name, line, err)
	}
	c.Wait()
	return out.String(), c.ProcessState.ExitCode()
}

// must runs line and fails the test unless it exits with one of codes (0
// when none is given).
func (h *docHost) must(line string, codes ...int) string {
	h.t.Helper()
	out, code := h.run(line)
	if len(codes) == 0 {
		codes = []int{0}
	}
	for _, c := range codes {
		if code == c {
			h.t.Logf("%s$ %s: exit %d", h.name, line, code)
			return out
		}
	}
	h.t.Fatalf("%s$ %s: exit %d, want one of %v\n%s", h.name, line, code, codes, out)
	return ""
}

// start starts line, which runs until stopped, and waits until what it
// printed satisfies ready. stop sends SIGTERM (or the signal given) and
// returns its exit code.
func (h *docHost) start(line string, ready func(out string) bool) (out *lockedBuffer, stop func(...os.Signal) int) {
	h.t.Helper()
	out = &lockedBuffer{}
	c := h.command(line, out)
	if err := testrun.Do(h.ns, c.Start); err != nil {
		h.t.Fatalf("%s: %s: %v", h.name, line, err)
	}
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	stopped := false
	stop = func(sig ...os.Signal) int {
		if !stopped {
			stopped = true
			sig = append(sig, syscall.SIGTERM)
			c.Process.Signal(sig[0])
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				c.Process.Kill()
				<-done
				h.t.Errorf("%s: %s did not stop within 60 s of SIGTERM\n%s", h.name, line, out)
			}
		}
		return c.ProcessState.ExitCode()
	}
	h.t.Cleanup(func() { stop() })
	deadline := time.Now().Add(testenv.Scaled(30 * time.Second))
	for !ready(out.String()) {
		select {
		case <-done:
			h.t.Fatalf("%s$ %s: exited %d before it was ready\n%s", h.name, line, c.ProcessState.ExitCode(), out)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s$ %s: not ready in %v\n%s", h.name, line, time.Until(deadline), out)
		}
	}
	return out, stop
}

// metrics reads http://addr/metrics from inside h's namespace. The
// socket is made on a thread there (an http.Client would dial from any).
func (h *docHost) metrics(addr string) string {
	var conn net.Conn
	if err := testrun.Do(h.ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return ""
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	b, _ := io.ReadAll(conn)
	return string(b)
}

// docsConfig is the forwarding table the docs' commands are run with: a
// table api bound where explain's flow goes, and a table vip (capture
// --table vip), backends in the range backend run's --trust lists.
const docsConfig = `{"tables": [
 {"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "10.0.1.10", "state": "active", "healthy": true, "healthchecks": {"http": 80}},
               {"ip": "10.0.1.11", "state": "active", "healthy": true, "healthchecks": {"http": 80}}]},
 {"name": "vip", "hash_key": "22345678901234561234567890123456", "seed": "44567890123456783456789012345678",
  "binds": [{"ip": "10.60.0.1", "proto": "tcp", "port": 80}],
  "backends": [{"ip": "10.0.1.10", "state": "active", "healthy": true, "healthchecks": {"http": 80}},
               {"ip": "10.0.1.11", "state": "active", "healthy": true, "healthchecks": {"http": 80}}]}]}
`

// TestDocsCommandsOnHosts (issue 47, printed commands): the commands
// README.md and docs/operations.md print for a director host and a
// backend host, run as printed (default pins, /etc/director, eth0) on a
// director and a backend of the test's own, each doing what the docs say.
func TestDocsCommandsOnHosts(t *testing.T) {
	testenv.Kernel(t)
	// The pins' directory, on the host's bpffs, shown at /sys/fs/bpf.
	pins := testenv.PinDir("director-docs")
	if err := os.Mkdir(pins, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		loader.Unload(filepath.Join(pins, "director"))
		loader.Unload(filepath.Join(pins, "director-backend"))
		os.RemoveAll(pins)
	})
	etc := t.TempDir()
	dc, _ := os.ReadFile(cfgDir + "director.conf") // outbound_src_ip 192.0.2.1, the director's eth0
	for name, data := range map[string]string{"director.conf": string(dc), "forwarding_table.json": docsConfig,
		"forwarding_table.src.json": docsConfig} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()

	// Three namespaces: the network (up0, up1), the director (eth0 to
	// up0) and the backend (eth0 to up1).
	mk := func() netns.NsHandle {
		ns, err := testrun.NewNetns()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return ns
	}
	network, dirNS, beNS := mk(), mk(), mk()
	var dirMAC net.HardwareAddr
	plug := func(up string, ns netns.NsHandle, upAddr, addr string) net.HardwareAddr {
		var mac net.HardwareAddr
		err := testrun.Do(network, func() error {
			v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: up}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
			if err := netlink.LinkAdd(v); err != nil {
				return err
			}
			l, _ := netlink.LinkByName(up)
			a, _ := netlink.ParseAddr(upAddr)
			netlink.AddrAdd(l, a)
			return netlink.LinkSetUp(l)
		})
		if err == nil {
			err = testrun.Do(ns, func() error {
				l, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				a, _ := netlink.ParseAddr(addr)
				if err := netlink.AddrAdd(l, a); err != nil {
					return err
				}
				mac = l.Attrs().HardwareAddr
				return netlink.LinkSetUp(l)
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		return mac
	}
	dirMAC = plug("up0", dirNS, "192.0.2.2/24", "192.0.2.1/24")
	plug("up1", beNS, "10.0.1.1/24", "10.0.1.10/24")
	// The backend holds the VIPs on lo, as docs/operations.md says it must.
	if err := testrun.Do(beNS, func() error {
		lo, err := netlink.LinkByName("lo")
		for _, vip := range []string{"10.10.10.10/32", "10.60.0.1/32"} {
			if err == nil {
				a, _ := netlink.ParseAddr(vip)
				err = netlink.AddrAdd(lo, a)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	env := []string{docsBPFFSEnv + "=" + pins, docsEtcEnv + "=" + etc, "DIRECTOR_STATE_DIR=" + state}
	host := func(name string, ns netns.NsHandle) *docHost {
		real := t.TempDir()
		return &docHost{t: t, ns: ns, dir: t.TempDir(), env: append(env, docsRealEtcEnv+"="+real), name: name}
	}
	d := host("director", dirNS)
	os.WriteFile(filepath.Join(d.dir, "forwarding_table.json"), []byte(docsConfig), 0o600)

	// The quick start.
	d.must(docLoad)
	d.must(docPlan, 0, exitChanges)
	if _, err := os.Stat(filepath.Join(d.dir, "plan.json")); err != nil {
		t.Fatalf("%s wrote no plan.json: %v", docPlan, err)
	}
	d.must(docApply)
	d.must(docAttach)
	st := d.must(docStatus)
	for _, want := range []string{"attached     eth0, native mode", "table        api ", "table        vip "} {
		if !strings.Contains(st, want) {
			t.Errorf("%s says nothing of %s:\n%s", docStatus, want, st)
		}
	}
	_, stop := d.start(docStats, func(out string) bool { return strings.Contains(out, "encapsulated") })
	if code := stop(syscall.SIGINT); code != 0 { // a person's Ctrl-C
		t.Errorf("%s: exit %d on Ctrl-C (SIGINT)", docStats, code)
	}

	// capture: armed, then a SYN to the vip's bind arrives on eth0.
	capOut, stopCap := d.start(docCapture, func(out string) bool { return strings.Contains(out, "listening") })
	syn := pkt.Eth([6]byte(dirMAC), pkt.ClientMAC, 0, 0x0800,
		pkt.IPv4(netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("10.60.0.1"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{}))
	err := testrun.Do(network, func() error {
		s, err := testrun.Listen("up0")
		if err != nil {
			return err
		}
		defer s.Close()
		for i := 0; i < 50 && !strings.Contains(capOut.String(), "packets captured"); i++ {
			if err := s.Send(syn); err != nil {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testenv.Scaled(10 * time.Second))
	for !strings.Contains(capOut.String(), "packets captured") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if out := capOut.String(); !strings.Contains(out, "tx encapsulated table vip") || stopCap() != 0 {
		t.Errorf("%s, a SYN to 10.60.0.1:80 sent in: no encapsulated packet of table vip, or not exit 0:\n%s", docCapture, out)
	}

	if out := d.must(docExplain); !strings.Contains(out, "of table api") || !strings.Contains(out, "action    encapsulate") {
		t.Errorf("%s does not say table api steers the flow:\n%s", docExplain, out)
	}

	// director run, over what the quick start left: serving metrics.
	_, stopRun := d.start(docRun, func(string) bool {
		return strings.Contains(d.metrics("127.0.0.1:9464"), `director_interface_attached{interface="eth0"`)
	})
	if code := stopRun(); code != 0 {
		t.Errorf("%s: exit %d on SIGTERM", docRun, code)
	}

	// The backend host: backend run, then what the docs run beside it.
	b := host("backend", beNS)
	_, stopBe := b.start(docBackendRun, func(string) bool {
		return strings.Contains(b.metrics("127.0.0.1:9465"), "director_backend_host_attached 1")
	})
	// Forwarding is off in the backend's namespace: the doctor says so.
	if out := b.must(docBackendDoc, 1); !strings.Contains(out, "PROBLEM  forwarding") || !strings.Contains(out, "problems found on this backend host") {
		t.Errorf("%s does not tell the forwarding that is off:\n%s", docBackendDoc, out)
	}
	if out := b.must(docBackendExpl); !strings.Contains(out, "next hop  10.77.0.10") || !strings.Contains(out, "action") {
		t.Errorf("%s does not tell the next hop 10.77.0.10:\n%s", docBackendExpl, out)
	}
	if code := stopBe(); code != 0 {
		t.Errorf("%s: exit %d on SIGTERM", docBackendRun, code)
	}
}
