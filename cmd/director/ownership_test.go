package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/director/director/loader"
)

// child is a 'director ...' process of this test binary, its output kept.
type child struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan error
}

func startChild(args ...string) (*child, error) {
	c := &child{cmd: asDirector(os.Args[0], args...), done: make(chan error, 1)}
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { c.done <- c.cmd.Wait() }()
	return c, nil
}

// holding waits until the child holds dir's run lock.
func (c *child) holding(dir string) error {
	if !within(10*time.Second, func() bool { pid, _ := loader.RunHolder(dir); return pid == c.cmd.Process.Pid }) {
		return fmt.Errorf("%v never took the run lock of %s:\n%s", c.cmd.Args[1:], dir, c.out.String())
	}
	return nil
}

func (c *child) stop() {
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// expect runs the CLI and checks its exit code and that its output holds
// each of want.
func expect(code int, args []string, want ...string) error {
	out, errOut, got := runCmd(args...)
	if got != code {
		return fmt.Errorf("director %s: exit %d, want %d\n%s%s", strings.Join(args, " "), got, code, out, errOut)
	}
	for _, w := range want {
		if !strings.Contains(out+errOut, w) {
			return fmt.Errorf("director %s: %q not in\n%s%s", strings.Join(args, " "), w, out, errOut)
		}
	}
	return nil
}

// TestOneOwnerPerPinDirectory (issue 46, items 1, 2, 3, 11): a command of
// one program given the other's pins refuses and says what is there
// (backend unload of a director's pins above all); every command that
// changes pins refuses while a service, 'director run' or 'director
// backend run', serves them, naming it; a second 'backend run' is refused
// and leaves the first one's second chance on.
func TestOneOwnerPerPinDirectory(t *testing.T) {
	d := bpffsDir(t)
	backendRig(t, func(b []string) error {
		be := b[2]
		dir := []string{"--bpffs", d}
		if err := expect(0, append(dir, "load"), "loaded"); err != nil {
			return err
		}
		bk0, _ := netlink.LinkByName("bk0")
		if err := addAddr(bk0, "10.77.0.2/24"); err != nil {
			return err
		}
		if err := expect(0, append(b, "attach", "bk0", "--mode", "generic")); err != nil {
			return err
		}
		// Item 11: the director's read commands on backend pins.
		noDirector := "no director is loaded here (a backend program is"
		for _, args := range [][]string{{"status"}, {"stats"}, {"explain", "tcp", "198.51.100.7:40000", "10.10.10.10:80"}} {
			if err := expect(1, append([]string{"--bpffs", be}, args...), noDirector); err != nil {
				return err
			}
		}
		if err := expect(1, []string{"backend", "--backend-bpffs", d, "status"}, "no backend program is loaded here (a director is"); err != nil {
			return err
		}
		// Item 1, and the reverse: nothing done to the other's pins.
		for _, args := range [][]string{{"backend", "--backend-bpffs", d, "unload"}, {"backend", "--backend-bpffs", d, "attach", "bk1", "--mode", "generic"}} {
			if err := expect(1, args, "no backend program is loaded here (a director is", "nothing was done"); err != nil {
				return err
			}
		}
		for _, args := range [][]string{{"unload"}, {"load"}, {"detach", "bk0"}} {
			if err := expect(1, append([]string{"--bpffs", be}, args...), noDirector); err != nil {
				return err
			}
		}
		if err := expect(0, append(dir, "status")); err != nil {
			return fmt.Errorf("the director after the refusals: %w", err)
		}
		if err := expect(0, append(b, "status"), "bk0"); err != nil {
			return fmt.Errorf("the backend program after the refusals: %w", err)
		}

		// A 'director run' serving the director's pins: every command
		// that changes them is refused, naming it.
		run, err := startChild("run", "--bpffs", d, "--config", cfgDir+"small.json", "--director-config", cfgDir+"director.conf")
		if err != nil {
			return err
		}
		if err := run.holding(d); err != nil {
			run.stop()
			return err
		}
		serving := fmt.Sprintf("'director run' (pid %d) serves the pins in %s", run.cmd.Process.Pid, d)
		for _, args := range [][]string{{"unload"}, {"load"}, {"attach", "bk1", "--mode", "generic"}, {"detach", "bk1"}} {
			if err := expect(1, append(dir, args...), serving); err != nil {
				run.stop()
				return err
			}
		}
		if err := expect(1, []string{"backend", "--backend-bpffs", d, "unload"}, "no backend program is loaded here"); err != nil {
			run.stop()
			return err
		}
		run.stop()
		if err := expect(0, append(dir, "status")); err != nil {
			return fmt.Errorf("the director after its service: %w", err)
		}

		// Items 2 and 3: 'backend run' owns the backend's pins.
		br, err := startChild(append(b, "run", "--attach", "bk0", "--mode", "generic", "--interval", "200ms", "--trust", "192.0.2.0/24")...)
		if err != nil {
			return err
		}
		defer br.stop()
		if err := br.holding(be); err != nil {
			return err
		}
		// The lock is taken before the program is set up: wait for its
		// settings (second chance needs --trust set, the last of them),
		// so that what is read after the refusals is theirs to change.
		setUp := func() bool {
			bp, err := loader.OpenBackend(be)
			if err != nil {
				return false
			}
			defer bp.Close()
			on, err := bp.SecondChance()
			atts, _ := bp.Attachments()
			return err == nil && on && len(atts) == 1
		}
		if !within(10*time.Second, setUp) {
			return fmt.Errorf("'backend run --trust' never set second chance on")
		}
		serving = fmt.Sprintf("'director backend run' (pid %d) serves the pins in %s", br.cmd.Process.Pid, be)
		for _, args := range [][]string{{"unload"}, {"attach", "bk0", "--no-second-chance", "--mode", "generic"}, {"detach", "bk0"}} {
			if err := expect(1, append(b, args...), serving); err != nil {
				return err
			}
		}
		if err := expect(1, append(b, "run", "--attach", "bk0", "--mode", "generic", "--no-second-chance"),
			fmt.Sprintf("another 'director backend run' (pid %d) already serves the pins in %s", br.cmd.Process.Pid, be)); err != nil {
			return err
		}
		bp, err := loader.OpenBackend(be)
		if err != nil {
			return err
		}
		defer bp.Close()
		if on, err := bp.SecondChance(); err != nil || !on {
			return fmt.Errorf("second chance under the first 'backend run' after a second was refused: %v %v", on, err)
		}
		if atts, err := bp.Attachments(); err != nil || len(atts) != 1 {
			return fmt.Errorf("attachments under 'backend run' after the refusals: %v %v", atts, err)
		}
		return nil
	})
}

// TestFailedBackendRunLeavesNothing (issue 46, item 4): a 'backend run'
// refused for its --metrics (not an address; a port in use) exits 1 with
// nothing pinned and nothing attached.
func TestFailedBackendRunLeavesNothing(t *testing.T) {
	backendRig(t, func(b []string) error {
		be := b[2]
		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer busy.Close()
		lo, _ := netlink.LinkByName("lo")
		netlink.LinkSetUp(lo)
		bk0, _ := netlink.LinkByName("bk0")
		if err := addAddr(bk0, "10.77.0.2/24"); err != nil {
			return err
		}
		for _, m := range []string{"nope", busy.Addr().String()} {
			if err := expect(1, append(b, "run", "--attach", "bk0", "--mode", "generic", "--metrics", m), "metrics"); err != nil {
				return err
			}
			if _, err := os.Lstat(be); !os.IsNotExist(err) {
				return fmt.Errorf("--metrics %s: the failed start left %s (%v)", m, be, err)
			}
			l, err := netlink.LinkByName("bk0")
			if err != nil {
				return err
			}
			if x := l.Attrs().Xdp; x != nil && x.Attached {
				return fmt.Errorf("--metrics %s: the failed start left bk0 with an XDP program (%+v)", m, x)
			}
		}
		return nil
	})
}
