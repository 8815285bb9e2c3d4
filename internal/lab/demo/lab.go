package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/director/director/internal/lab/testbed"
	"github.com/director/director/loader"
)

// 'make lab' and 'make lab-down': the testbed left running for a person
// to try commands in. 'lab up' starts a holder process (this program,
// 'lab hold', in a session of its own) that builds a deployed testbed
// (testbed.New with Options.Deploy), names its namespaces lab-* under /run/netns, pins
// under /sys/fs/bpf/director-lab, keeps the backends' servers running,
// and tears it all down on SIGTERM. 'lab down' stops the holder and
// removes whatever any lab left: names, pins, files; it works after a
// 'lab up' that failed half way, or a holder killed.

// The lab's names, from --lab-name (lab): its namespaces' (lab-director,
// lab-backend1, ...), its pins (the director's; the backends' are
// labPins-beN), and where it keeps its configs, its holder's pid and log.
var (
	labPrefix = "lab"
	labPins   = "/sys/fs/bpf/director-lab"
	labDir    = "/run/director-lab"
)

// nameLab names the lab name.
func nameLab(name string) error {
	if name == "" || strings.ContainsAny(name, "/ .") {
		return fmt.Errorf("--lab-name %q: a name without slashes, dots or spaces", name)
	}
	labPrefix, labPins, labDir = name, "/sys/fs/bpf/director-"+name, "/run/director-"+name
	return nil
}

func labUp(bin string) error {
	if pid, alive := labHolder(); alive {
		fmt.Printf("the lab is already up (holder pid %d); 'make lab-down' removes it\n\n", pid)
		return printLabGuide()
	}
	if err := labDown(false); err != nil {
		return fmt.Errorf("clearing what a lab left: %w", err)
	}
	absBin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(absBin); err != nil {
		return fmt.Errorf("the director binary: %w (make build)", err)
	}
	if err := os.MkdirAll(labDir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(labDir, "holder.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	holder := exec.Command("/proc/self/exe", "--director", absBin, "--lab", "hold", "--lab-name", labPrefix)
	holder.Stdout, holder.Stderr = logf, logf
	holder.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := holder.Start(); err != nil {
		return err
	}
	os.WriteFile(filepath.Join(labDir, "holder.pid"), []byte(strconv.Itoa(holder.Process.Pid)), 0o644)
	exited := make(chan error, 1)
	go func() { exited <- holder.Wait() }()
	ready := filepath.Join(labDir, "ready")
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logf.Name())
			labDown(false)
			return fmt.Errorf("the lab did not come up (%v); its log:\n%s\neverything it made is removed again", err, log)
		case <-deadline:
			holder.Process.Signal(syscall.SIGTERM)
			labDown(false)
			return errors.New("the lab did not come up in 2 minutes; everything it made is removed again")
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := os.Stat(ready); err == nil {
			holder.Process.Release()
			return printLabGuide()
		}
	}
}

func printLabGuide() error {
	guide, err := os.ReadFile(filepath.Join(labDir, "ready"))
	if err != nil {
		return err
	}
	os.Stdout.Write(guide)
	return nil
}

// labHold builds the lab and keeps it until SIGTERM or SIGINT.
func labHold(bin string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	tb, err := testbed.New(testbed.Options{Backends: 3, Pins: labPins, Deploy: true})
	if err != nil {
		return err
	}
	defer tb.Close()
	named, err := tb.NameNamespaces(labPrefix)
	// What 'make lab-down' may remove: the names this lab made, and no
	// other under its prefix. Written before anything can fail.
	if werr := errors.Join(os.MkdirAll(labDir, 0o755), os.WriteFile(filepath.Join(labDir, "namespaces"), []byte(strings.Join(named, "\n")), 0o600)); werr != nil {
		testbed.UnnameNamespaces(named)
		return werr
	}
	if err != nil {
		return err
	}
	if os.Getenv("DIRECTOR_LAB_FAIL") == "after-namespaces" {
		// The tests' failed 'make lab': the holder dies as a crash would,
		// leaving its namespaces named and its pins.
		fmt.Println("dying on purpose, leaving the namespaces and pins (DIRECTOR_LAB_FAIL)")
		os.Exit(3)
	}
	defer testbed.UnnameNamespaces(named)
	for i := range tb.Backends {
		if err := tb.ServeHealth(i + 1); err != nil {
			return err
		}
	}
	files := map[string]string{
		"forwarding_table.json": tb.Config(nil, nil),
		"draining.json":         tb.Config(map[int]string{2: "draining"}, nil),
	}
	dc := tb.DirectorConfig()
	data, err := dc.MarshalGLB()
	if err != nil {
		return err
	}
	files["director.conf"] = string(data)
	for name, body := range files {
		// 0600: the configs hold the tables' hash_key and seed.
		if err := os.WriteFile(filepath.Join(labDir, name), []byte(body), 0o600); err != nil {
			return err
		}
	}
	apply := exec.Command(bin, "--bpffs", labPins, "--director-config", filepath.Join(labDir, "director.conf"),
		"apply", filepath.Join(labDir, "forwarding_table.json"), "--yes")
	if out, err := runIn(tb.Director, apply); err != nil {
		return fmt.Errorf("director apply: %v\n%s", err, out)
	}
	guide := labGuide(bin)
	if err := os.WriteFile(filepath.Join(labDir, "ready"), []byte(guide), 0o644); err != nil {
		return err
	}
	fmt.Println("the lab is up")
	<-sig
	fmt.Println("taking the lab down")
	return nil
}

// runIn runs cmd inside h's namespace (a process forked there stays).
func runIn(h *testbed.Host, cmd *exec.Cmd) ([]byte, error) {
	var out []byte
	err := h.Do(func() error {
		var err error
		out, err = cmd.CombinedOutput()
		return err
	})
	return out, err
}

func labGuide(bin string) string {
	d := "nsenter --net=" + testbed.NetnsDir + "/" + labPrefix + "-director " + bin + " --bpffs " + labPins
	b1 := "nsenter --net=" + testbed.NetnsDir + "/" + labPrefix + "-backend1 " + bin + " backend --bpffs " + labPins + "-be1"
	c := "nsenter --net=" + testbed.NetnsDir + "/" + labPrefix + "-client"
	return fmt.Sprintf(`The lab is up: a client (%s), a director (%s, XDP on eth0), a router, three backends (%s-%s;
backend program, VIP %s on lo, a server on its port 80, /health on :%d), in network namespaces %s/%s-*.
Its configs are in %s. As root, try:

  %s curl -s http://%s/                # through the director: a backend answers with its name
  %s status
  %s capture --table vip -c 4 2>&1 | { read -r ready; echo "$ready"; %s curl -s -o /dev/null http://%s/; cat; }
  %s explain tcp %s:40000 %s:80
  %s --director-config %s/director.conf doctor --config %s/forwarding_table.json
  %s doctor --config %s/forwarding_table.json

Drain backend2, reviewed then applied (its open connections carry on by second chance):

  %s --director-config %s/director.conf plan %s/draining.json -o %s/plan.json
  %s apply %s/plan.json

'make lab-down%s' removes it all.
`, testbed.ClientIP, testbed.DirIP, testbed.BackendIP(1), testbed.BackendIP(3), testbed.VIP, testbed.HealthPort, testbed.NetnsDir, labPrefix,
		labDir,
		c, testbed.VIP, d, d, c, testbed.VIP, d, testbed.ClientIP, testbed.VIP,
		d, labDir, labDir, b1, labDir,
		d, labDir, labDir, labDir, d, labDir, downArgs())
}

// labHolder is the holder's pid, and whether it runs.
func labHolder() (int, bool) {
	data, err := os.ReadFile(filepath.Join(labDir, "holder.pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, syscall.Kill(pid, 0) == nil && isLabHolder(pid)
}

// isLabHolder says whether process pid is this lab's holder ('--lab hold
// --lab-name NAME' on its command line): a pid the file names may have
// been reused by another process after the holder died.
func isLabHolder(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	i := slices.Index(args, "--lab-name")
	return slices.Contains(args, "hold") && i >= 0 && i+1 < len(args) && args[i+1] == labPrefix
}

// labNamespaces are the namespace names the lab recorded making.
func labNamespaces() []string {
	data, err := os.ReadFile(filepath.Join(labDir, "namespaces"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// labDown stops the holder and removes whatever a lab left.
func labDown(say bool) error {
	var removed []string
	if pid, alive := labHolder(); alive {
		syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		removed = append(removed, fmt.Sprintf("the holder (pid %d)", pid))
	}
	var errs []error
	names, err := testbed.UnnameNamespaces(labNamespaces())
	errs = append(errs, err)
	removed = append(removed, names...)
	pins, _ := filepath.Glob(labPins + "-be*")
	if _, err := os.Stat(labPins); err == nil {
		pins = append([]string{labPins}, pins...)
	}
	for _, p := range pins {
		errs = append(errs, loader.Unload(p))
		removed = append(removed, p)
	}
	if _, err := os.Stat(labDir); err == nil {
		errs = append(errs, os.RemoveAll(labDir))
		removed = append(removed, labDir)
	}
	if say {
		if len(removed) == 0 {
			fmt.Println("no lab was up: nothing to remove")
		} else {
			fmt.Printf("removed %s\n", strings.Join(removed, ", "))
		}
	}
	return errors.Join(errs...)
}

// downArgs is what 'make lab-down' needs to find a lab not named "lab".
func downArgs() string {
	if labPrefix == "lab" {
		return ""
	}
	return " LAB_NAME=" + labPrefix
}
