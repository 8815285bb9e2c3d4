package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/director/director/internal/lab/testbed"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader/testrun"
)

// TestMakeLab: 'make lab' brings the lab up and prints commands that work
// as printed (a client reaches the VIP through the director; status,
// explain, both doctors with nothing found, a drain planned and applied);
// 'make lab-down' removes everything: the holder, the namespaces, the
// pins, the files. After a lab whose holder died half way (its
// namespaces named, its pins left), 'make lab-down' removes those too.
func TestMakeLab(t *testing.T) {
	testenv.Kernel(t)
	for _, tool := range []string{"make", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v ('make test' and CI install it)", tool, err)
		}
	}
	name := fmt.Sprintf("labtest%d", os.Getpid())
	tmp := t.TempDir()
	vars := []string{"LAB_NAME=" + name, "BIN=" + filepath.Join(tmp, "director"), "LAB_BIN=" + filepath.Join(tmp, "director-lab")}
	make := func(target string, env ...string) (string, error) {
		cmd := exec.Command("make", append([]string{"-s", "-C", "../../..", target}, vars...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() { make("lab-down") })
	left := func() []string {
		var found []string
		for _, g := range []string{testbed.NetnsDir + "/" + name + "-*", "/sys/fs/bpf/director-" + name + "*", "/run/director-" + name} {
			m, _ := filepath.Glob(g)
			found = append(found, m...)
		}
		return found
	}

	out, err := make("lab")
	if err != nil {
		t.Fatalf("make lab: %v\n%s", err, out)
	}
	// A client reaches the VIP through the director.
	body, err := httpGet(testbed.NetnsDir+"/"+name+"-client", testbed.VIP.String()+":80")
	if err != nil || !strings.HasPrefix(body, "backend") {
		t.Fatalf("GET http://%s/ from the client: %v %q", testbed.VIP, err, body)
	}
	// Its configs hold hash_key and seed: read by root alone, as plans
	// are (issue 47, item 12).
	for _, f := range []string{"forwarding_table.json", "draining.json", "director.conf"} {
		if fi, err := os.Stat(filepath.Join("/run/director-"+name, f)); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("the lab's %s is mode %v: its hash_key and seed open to others", f, fi.Mode().Perm())
		}
	}
	// The commands it printed, run as printed.
	ran := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "nsenter ") || strings.Contains(line, "&") || strings.Contains(line, "|") {
			continue
		}
		o, err := exec.Command("sh", "-c", line).CombinedOutput() // as a person's shell runs it, comment and all
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		verb := ""
		for _, v := range []string{"status", "explain", "doctor", "plan", "apply", "curl"} {
			if strings.Contains(line, " "+v+" ") || strings.HasSuffix(line, " "+v) {
				verb = v
			}
		}
		if verb == "curl" && !strings.HasPrefix(string(o), "backend") { // a backend answers with its name
			t.Errorf("%s: %q, not a backend's name", line, o)
		}
		want := 0
		if verb == "plan" {
			want = 2 // the drain changes the table
		}
		if code != want {
			t.Errorf("%s: exit %d, want %d\n%s", line, code, want, o)
		}
		ran[verb] = true
	}
	for _, v := range []string{"status", "explain", "doctor", "plan", "apply", "curl"} {
		if !ran[v] {
			t.Errorf("make lab printed no %s command to try:\n%s", v, out)
		}
	}
	// The capture line, as printed, three times (issue 47, item 3): it
	// waits for the capture to listen, then the curl's packets are what
	// it shows.
	capLine := ""
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "nsenter ") && strings.Contains(line, " capture ") {
			capLine = line
		}
	}
	if capLine == "" {
		t.Errorf("make lab printed no capture command:\n%s", out)
	}
	for try := 1; capLine != "" && try <= 3; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		o, err := exec.CommandContext(ctx, "sh", "-c", capLine).CombinedOutput()
		cancel()
		lines := strings.Split(strings.TrimSpace(string(o)), "\n")
		vip := 0
		for _, l := range lines {
			if strings.Contains(l, testbed.VIP.String()) {
				vip++
			}
		}
		if err != nil || !strings.HasPrefix(lines[0], "capture: listening on") || vip != 4 || !strings.Contains(string(o), "capture: 4 packets captured, 4 shown") {
			t.Errorf("try %d of the printed capture line: %v; want the listening line, then the curl's 4 packets:\n%s\n%s", try, err, capLine, o)
		}
	}
	// Up again: it says so, and changes nothing.
	if again, err := make("lab"); err != nil || !strings.Contains(again, "the lab is already up") {
		t.Errorf("make lab twice: %v\n%s", err, again)
	}
	if out, err := make("lab-down"); err != nil || !strings.Contains(out, "removed the holder") {
		t.Fatalf("make lab-down: %v\n%s", err, out)
	}
	if l := left(); len(l) > 0 {
		t.Fatalf("make lab-down left %v", l)
	}
	if out, err := make("lab-down"); err != nil || !strings.Contains(out, "nothing to remove") {
		t.Errorf("make lab-down twice: %v\n%s", err, out)
	}

	// A holder that dies after naming its namespaces, its pins loaded.
	hold := exec.Command(filepath.Join(tmp, "director-lab"), "--director", filepath.Join(tmp, "director"), "--lab", "hold", "--lab-name", name)
	hold.Env = append(os.Environ(), "DIRECTOR_LAB_FAIL=after-namespaces")
	if out, err := hold.CombinedOutput(); err == nil || !strings.Contains(string(out), "dying on purpose") {
		t.Fatalf("the failing holder: %v\n%s", err, out)
	}
	if l := left(); len(l) < 5 {
		t.Fatalf("the failed lab left only %v: the test of lab-down is void", l)
	}
	if out, err := make("lab-down"); err != nil {
		t.Fatalf("make lab-down after a failed lab: %v\n%s", err, out)
	}
	if l := left(); len(l) > 0 {
		t.Fatalf("make lab-down after a failed lab left %v", l)
	}

	// Issue 46, item 9: a name under the lab's prefix that no lab made,
	// and a holder.pid naming a process that is not the holder (a pid
	// reused): lab-down leaves both alone.
	mine := testbed.NetnsDir + "/" + name + "-mine"
	if err := os.WriteFile(mine, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(mine)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()
	run := "/run/director-" + name
	os.MkdirAll(run, 0o755)
	if err := os.WriteFile(run+"/holder.pid", []byte(fmt.Sprint(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := make("lab-down"); err != nil || strings.Contains(out, "holder") {
		t.Errorf("make lab-down with a pid that is not the holder's: %v\n%s", err, out)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("make lab-down removed %s, which no lab made: %v", mine, err)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("make lab-down signalled pid %d, which is not the holder: %v", sleeper.Process.Pid, err)
	}
}

// httpGet fetches http://addr/ from inside the namespace bound at path.
func httpGet(path, addr string) (string, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return "", err
	}
	defer ns.Close()
	var body string
	err = testrun.Do(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, testenv.Scaled(3*time.Second))
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(testenv.Scaled(3 * time.Second)))
		fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
		r := bufio.NewReader(c)
		status, err := r.ReadString('\n')
		if err != nil || !strings.Contains(status, " 200 ") {
			return fmt.Errorf("status %q: %v", status, err)
		}
		rest, err := io.ReadAll(r)
		_, b, _ := strings.Cut(string(rest), "\r\n\r\n")
		body = b
		return err
	})
	return body, err
}

// TestMakeDemo (issue 47, printed commands): the README's 'make demo' and
// 'make demo-ipv6' run as printed (the binary built elsewhere) and end
// with exit 0: each checks, as it goes, what it shows.
func TestMakeDemo(t *testing.T) {
	testenv.Kernel(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make: %v ('make test' and CI install it)", err)
	}
	bin := filepath.Join(t.TempDir(), "director")
	for _, target := range []string{"demo", "demo-ipv6"} {
		cmd := exec.Command("make", "-s", "-C", "../../..", target, "BIN="+bin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("make %s: %v\n%s", target, err, out)
		}
	}
}
