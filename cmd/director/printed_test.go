package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/director/director/internal/lab/testbed"
)

// runAsPrinted runs line, a command the tools printed for a person, as
// printed: in a shell in dir, with 'director' this test binary (and the
// tests' plan key), on host h's network namespace (this one when h is
// nil). It returns what it printed and its exit code.
func runAsPrinted(t *testing.T, h *testbed.Host, dir, line string) (string, int, error) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir() // not dir: it may be the repository's, whose bin/ is make's

	script := "#!/bin/sh\nDIRECTOR_TEST_AS_MAIN=1 DIRECTOR_TEST_PLANKEY_DIR='" + planKeyDir + "' exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "director"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", line)
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	var out bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &out
	if h != nil {
		err = h.Start(sh)
	} else {
		err = sh.Start()
	}
	if err != nil {
		t.Fatal(err)
	}
	err = sh.Wait()
	return out.String(), sh.ProcessState.ExitCode(), err
}

// TestPlanApplyHintsRunAsPrinted (issue 47, printed commands): what plan
// and apply tell a person to run next is run as printed, with pins and a
// director config elsewhere than the defaults, and a file name a shell
// must have quoted: apply of a config without --yes says how to plan and
// apply it; plan -o says how to apply the plan; each applies the config.
func TestPlanApplyHintsRunAsPrinted(t *testing.T) {
	dir := bpffsDir(t)
	work := t.TempDir()
	mustRun(t, 0, "--bpffs", dir, "load")
	dc, err := filepath.Abs(cfgDir + "director.conf")
	if err != nil {
		t.Fatal(err)
	}
	small, _ := filepath.Abs(cfgDir + "small.json")
	cfg := filepath.Join(work, "my config.json") // a name a shell splits
	data, _ := os.ReadFile(small)
	os.WriteFile(cfg, data, 0o600)

	// apply CONFIG without --yes: refused, naming the two commands.
	_, errOut, code := runCmd("--bpffs", dir, "--director-config", dc, "apply", cfg)
	cmds := regexp.MustCompile(`(?m)^director:   (director .*)$`).FindAllStringSubmatch(errOut, -1) // one a line
	if code == 0 || len(cmds) != 2 {
		t.Fatalf("apply of a config without --yes: exit %d, %d commands: %s", code, len(cmds), errOut)
	}
	for _, c := range cmds {
		out, code, err := runAsPrinted(t, nil, work, c[1])
		if err != nil && !(code == exitChanges && strings.Contains(c[1], " plan ")) {
			t.Fatalf("%s, as printed: exit %d\n%s", c[1], code, out)
		}
	}
	fp := func() string { out, _, _ := runCmd("--bpffs", dir, "status", "--json"); return out }
	if st := fp(); !strings.Contains(st, `"name": "api"`) && !strings.Contains(st, `"name":"api"`) {
		t.Fatalf("after the printed plan and apply, no table api is live:\n%s", st)
	}

	// plan -o: the line saying how to apply it, run as printed.
	data = bytes.Replace(data, []byte(`"state": "active"`), []byte(`"state": "draining"`), 1)
	os.WriteFile(cfg, data, 0o600)
	plan := filepath.Join(work, "the plan.json")
	out, errOut, code := runCmd("--bpffs", dir, "--director-config", dc, "plan", cfg, "-o", plan)
	_, line, ok := strings.Cut(out+errOut, "apply it with: ")
	line, _, _ = strings.Cut(line, "\n")
	if code != exitChanges || !ok {
		t.Fatalf("plan -o: exit %d, no 'apply it with':\n%s%s", code, out, errOut)
	}
	if o, code, err := runAsPrinted(t, nil, work, line); err != nil {
		t.Fatalf("%s, as printed: exit %d\n%s", line, code, o)
	}
	if _, _, code := runCmd("--bpffs", dir, "--director-config", dc, "plan", cfg); code != 0 {
		t.Errorf("after the printed apply, plan still finds changes (exit %d)", code)
	}

	// A plan apply refuses (edited after it was made): the commands that
	// make it again and apply it, run as printed.
	data = bytes.Replace(data, []byte(`"state": "draining"`), []byte(`"state": "active"`), 1)
	os.WriteFile(cfg, data, 0o600)
	if _, errOut, code := runCmd("--bpffs", dir, "--director-config", dc, "plan", cfg, "-o", plan); code != exitChanges {
		t.Fatalf("plan -o: exit %d\n%s", code, errOut)
	}
	pd, _ := os.ReadFile(plan)
	edited := regexp.MustCompile(`"created": ?"2`).ReplaceAll(pd, []byte(`"created": "1`))
	if bytes.Equal(edited, pd) {
		t.Fatalf("no created time to edit in the plan:\n%.300s", pd)
	}
	os.WriteFile(plan, edited, 0o600)
	_, errOut, code = runCmd("--bpffs", dir, "apply", plan)
	_, hint, ok := strings.Cut(errOut, "make the plan again here:\n")
	remake := regexp.MustCompile(`(?m)^director:   (director .*)$`).FindAllStringSubmatch(hint, -1)
	if code == 0 || !ok || len(remake) != 2 {
		t.Fatalf("apply of an edited plan: exit %d, want the two commands that make it again:\n%s", code, errOut)
	}
	for _, c := range remake {
		if o, code, err := runAsPrinted(t, nil, t.TempDir(), c[1]); err != nil && !(code == exitChanges && strings.Contains(c[1], " plan ")) {
			t.Fatalf("%s, as printed (from another directory): exit %d\n%s", c[1], code, o)
		}
	}
	if _, _, code := runCmd("--bpffs", dir, "--director-config", dc, "plan", cfg); code != 0 {
		t.Errorf("after the printed remake and apply, plan still finds changes (exit %d)", code)
	}
}
