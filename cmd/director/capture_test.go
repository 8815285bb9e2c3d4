package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/datapath/gue"
	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/format/pcapfile"
	"github.com/director/director/internal/format/pcapfilter"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
)

// TestCaptureCommand runs 'director capture' against a director attached
// to a veth, real frames going through it: lines naming the decision
// (table, row, primary and secondary for what it steers, the reason for
// what it passes), -w pcap (mode 0600, read back) with a filter
// expression, pcapng with the decision in each packet's comment, -c and
// Ctrl-C ending it, and the hook off after each.
func TestCaptureCommand(t *testing.T) {
	testenv.Kernel(t)
	if _, err := pcapfilter.Compile("ip", 100); errors.Is(err, pcapfilter.ErrNoLibpcap) {
		testenv.Libpcap(t, err)
	}
	dir := bpffsDir(t)
	tmp := t.TempDir()
	err := testrun.InNetns(func() error {
		for _, k := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0o644); err != nil {
				return err
			}
		}
		b := []string{"--bpffs", dir}
		sock, err := captureRig(b, "small.json")
		if err != nil {
			return err
		}
		defer sock.Close()
		steered := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.10.10.10"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{}))
		noBind := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.99.0.1"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{}))
		// sending sends both frames every 20 ms until stop.
		sending := func() (stop func()) {
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					case <-time.After(20 * time.Millisecond):
					}
					sock.Send(steered)
					sock.Send(noBind)
				}
			}()
			return func() { close(done); wg.Wait() }
		}
		hookOff := func(what string) error {
			d, err := loader.Open(dir)
			if err != nil {
				return err
			}
			defer d.Close()
			var v abi.Capture
			if err := d.Maps.Capture.Lookup(uint32(0), &v); err != nil || v.On != 0 {
				return fmt.Errorf("after %s: the capture hook is on (%v)", what, err)
			}
			return nil
		}

		// Lines.
		stop := sending()
		out, errOut, code := runCmd(append(b, "capture", "-c", "4")...) // IPv6 is off: no neighbour discovery among them
		stop()
		if code != 0 || !strings.Contains(errOut, "capture: 4 packets captured, 4 shown") {
			return fmt.Errorf("capture -c 4: exit %d: %s%s", code, out, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var tx, pass bool
		for _, l := range lines {
			switch {
			case strings.Contains(l, " cap0 tx encapsulated table api row 0x") && strings.Contains(l, " primary 192.168.50.") &&
				strings.Contains(l, " secondary 192.168.50.") && strings.Contains(l, "gue proto 4") && strings.Contains(l, "198.18.0.1 > 10.10.10.10"):
				tx = true
			case strings.Contains(l, " cap0 pass pass_no_bind | eth "):
				pass = true
			default:
				return fmt.Errorf("a line that says neither: %q", l)
			}
		}
		if len(lines) != 4 || !tx || !pass {
			return fmt.Errorf("capture lines:\n%s", out)
		}
		if err := hookOff("-c"); err != nil {
			return err
		}

		// pcap, with an expression: only the GUE packets.
		file := filepath.Join(tmp, "gue.pcap")
		// Another user's file there is replaced by one of this user's, mode
		// 0600: the capture is never written into a file someone else can read.
		os.WriteFile(file, []byte("theirs"), 0o644)
		os.Chown(file, 65534, 65534)
		link := filepath.Join(tmp, "link.pcap")
		os.Symlink(filepath.Join(tmp, "target"), link)
		if _, errOut, code := runCmd(append(b, "capture", "-c", "1", "-w", link)...); code != 1 || !strings.Contains(errOut, "is a symbolic link") {
			return fmt.Errorf("capture -w to a symbolic link: exit %d: %s", code, errOut)
		}
		if _, err := os.Lstat(filepath.Join(tmp, "target")); !os.IsNotExist(err) {
			return fmt.Errorf("capture -w followed a symbolic link: %v", err)
		}
		stop = sending()
		_, errOut, code = runCmd(append(b, "capture", "-c", "3", "-w", file, "udp", "dst", "port", "19523")...)
		stop()
		if code != 0 {
			return fmt.Errorf("capture -w: exit %d: %s", code, errOut)
		}
		if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			return fmt.Errorf("capture file mode %v, owner %d, %v", st.Mode(), st.Sys().(*syscall.Stat_t).Uid, err)
		}
		rd, err := pcapfile.Open(file)
		if err != nil {
			return err
		}
		n := 0
		for {
			p, err := rd.Read()
			if err != nil {
				break
			}
			n++
			if h, _, err := gue.ParseFrame(p.Frame); err != nil || !strings.HasPrefix(h.Hops[0].String(), "192.168.50.") {
				rd.Close()
				return fmt.Errorf("packet %d of the file is not a GUE packet to a backend: %v", n, err)
			}
		}
		rd.Close()
		if n != 3 {
			return fmt.Errorf("reading %s: %d packets", file, n)
		}

		// pcapng: the decision in each packet's comment.
		ng := filepath.Join(tmp, "pass.pcapng")
		stop = sending()
		_, errOut, code = runCmd(append(b, "capture", "-c", "1", "--action", "pass", "-w", ng)...)
		stop()
		raw, _ := os.ReadFile(ng)
		if code != 0 || !bytes.Contains(raw, []byte("pass pass_no_bind")) {
			return fmt.Errorf("capture -w pcapng: exit %d: %s; comment in the file: %v", code, errOut, bytes.Contains(raw, []byte("pass_no_bind")))
		}

		// Ctrl-C ends a capture run as its own process, cleanly.
		cmd := asDirector(os.Args[0], append(b, "capture")...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		stop = sending()
		deadline := time.Now().Add(testenv.Scaled(5 * time.Second))
		for !strings.Contains(stdout.String(), " tx encapsulated ") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGINT)
		err = cmd.Wait()
		stop()
		if err != nil || !strings.Contains(stderr.String(), "packets captured") {
			return fmt.Errorf("capture after Ctrl-C: %v: %s", err, stderr.String())
		}
		if err := hookOff("Ctrl-C"); err != nil {
			return err
		}

		// Refused: a table that is not live, a second capture.
		if _, errOut, code := runCmd(append(b, "capture", "--table", "nosuch")...); code != 1 || !strings.Contains(errOut, `--table "nosuch": no such live table (live: api)`) {
			return fmt.Errorf("--table nosuch: %d %s", code, errOut)
		}
		// Issue 47, item 12: a --backend no live table has is refused at
		// once, rather than waited on for ever.
		for _, args := range [][]string{{"--backend", "192.0.2.77"}, {"--backend", "192.0.2.77", "--table", "api"}} {
			if _, errOut, code := runCmd(append(append(b, "capture", "-c", "1"), args...)...); code != 1 || !strings.Contains(errOut, "--backend 192.0.2.77:") ||
				!strings.Contains(errOut, "so nothing would be captured") {
				return fmt.Errorf("capture %v: %d %s", args, code, errOut)
			}
		}
		if _, errOut, code := runCmd(append(b, "capture", "tcp port")...); code != 1 || !strings.Contains(errOut, "syntax error") {
			return fmt.Errorf("a bad expression: %d %s", code, errOut)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without privileges: said, and nothing else tried. (Where setpriv is
	// busybox's, as in 'make test-kernels' guests, it cannot drop the
	// bounding set; the host's run checks this.)
	if help, _ := exec.Command("setpriv", "--help").CombinedOutput(); !strings.Contains(string(help), "bounding-set") {
		t.Log("setpriv cannot drop the bounding set here: the check without privileges is the host's")
		return
	}
	cmd := asDirector("setpriv", "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--", os.Args[0], "--bpffs", dir, "capture")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(stderr.String(), "needs root, or CAP_BPF") {
		t.Fatalf("capture without capabilities: exit %d: %s", cmd.ProcessState.ExitCode(), stderr.String())
	}
}

// TestBackendCaptureCommand: backend capture shows the backend program's
// frames (it once opened no capture maps, and panicked).
func TestBackendCaptureCommand(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t) + "-backend"
	t.Cleanup(func() { loader.Unload(dir) })
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("bc0", "bc1"); err != nil {
			return err
		}
		b := []string{"backend", "--backend-bpffs", dir}
		if out, errOut, code := runCmd(append(b, "attach", "bc0", "--self", "192.0.2.9", "--mode", "generic")...); code != 0 {
			return fmt.Errorf("attach: %s%s", out, errOut)
		}
		sock, err := testrun.Listen("bc1")
		if err != nil {
			return err
		}
		defer sock.Close()
		frame := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("192.0.2.9"), 17, pkt.UDP(40000, 53, []byte("q")), pkt.V4Opts{}))
		defer sendEvery(sock, frame)()
		out, errOut, code := runCmd(append(b, "capture", "-c", "1", "--action", "pass", "udp", "port", "53")...)
		if code != 0 || !strings.Contains(out, " bc0 pass ") || !strings.Contains(out, "ipv4 198.18.0.1 > 192.0.2.9") || !strings.Contains(out, "udp 40000 > 53") {
			return fmt.Errorf("backend capture: exit %d: %s%s", code, out, errOut)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCaptureQUIC: capture says of a QUIC packet whether its connection ID
// routed it, and prints the ID: routed to the backend the ID names, or
// sent by the row with the reason.
func TestCaptureQUIC(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	err := testrun.InNetns(func() error {
		b := []string{"--bpffs", dir}
		sock, err := captureRig(b, "quic.json")
		if err != nil {
			return err
		}
		defer sock.Close()
		quic := func(cid string) []byte {
			id, _ := hex.DecodeString(cid)
			payload := append([]byte{0x41}, id...)
			payload = append(payload, make([]byte, 40)...)
			return pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.10.10.10"), 17, pkt.UDP(40000, 443, payload), pkt.V4Opts{}))
		}
		routed, unknown := quic("3f5e02a1a2a3a4a5a6"), quic("3f5e77a1a2a3a4a5a6")
		stop := sendEvery(sock, routed, unknown)
		out, errOut, code := runCmd(append(b, "capture", "-c", "4", "--action", "tx")...) // not the neighbour discovery the stack sends
		stop()
		if code != 0 {
			return fmt.Errorf("capture -c 4 --action tx: exit %d: %s%s", code, out, errOut)
		}
		var r, u bool
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			switch {
			case strings.Contains(l, " tx encapsulated table h3 row 0x") && strings.Contains(l, " primary 192.168.50.11 ") &&
				strings.Contains(l, " quic routed cid 3f5e02a1a2a3a4a5a6 |"):
				r = true
			case strings.Contains(l, " tx encapsulated table h3 row 0x") && strings.Contains(l, " quic fallback unknown_id cid 3f5e77a1a2a3a4a5a6 |"):
				u = true
			default:
				return fmt.Errorf("a line that says neither: %q", l)
			}
		}
		if !r || !u {
			return fmt.Errorf("capture lines:\n%s", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// captureRig is what the capture tests send through, in the network
// namespace they run in: a director with cfg loaded, applied and attached
// (generic) to one end of a veth pair, and a packet socket on the other
// end to send frames in by.
func captureRig(b []string, cfg string) (*testrun.Socket, error) {
	if err := testrun.Veth("cap0", "cap1"); err != nil {
		return nil, err
	}
	for _, args := range [][]string{{"load"}, {"apply", cfgDir + cfg, "--yes", "--director-config", cfgDir + "director.conf"},
		{"attach", "cap0", "--mode", "generic"}} {
		if out, errOut, code := runCmd(append(b, args...)...); code != 0 {
			return nil, fmt.Errorf("%v: %s%s", args, out, errOut)
		}
	}
	return testrun.Listen("cap1")
}

// sendEvery sends frames through sock every 20 ms until the function it
// returns is called.
func sendEvery(sock *testrun.Socket, frames ...[]byte) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			for _, f := range frames {
				sock.Send(f)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
