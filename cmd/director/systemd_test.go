package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitSettings reads a systemd unit's Key=Value lines.
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m
}

// TestSystemdUnit: the unit runs 'director run' as Type=notify (the
// service sends READY=1 after its first apply: TestRun in the testbed
// checks that), restarts on failure, reloads on SIGHUP and is bounded to
// the capabilities docs/operations.md lists.
func TestSystemdUnit(t *testing.T) {
	u := unitSettings(t, "systemd/director.service")
	for k, want := range map[string]string{
		"Type": "notify", "Restart": "on-failure", "ExecReload": "/bin/kill -HUP $MAINPID", "NoNewPrivileges": "yes",
		"CapabilityBoundingSet": "CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_ADMIN CAP_NET_RAW",
	} {
		if u[k] != want {
			t.Errorf("%s=%q, want %q", k, u[k], want)
		}
	}
	if !strings.HasPrefix(u["ExecStart"], "/usr/local/bin/director run --config ") {
		t.Errorf("ExecStart=%s", u["ExecStart"])
	}
}

// TestBackendSystemdUnit: the backend unit runs 'director backend run'
// as Type=notify (READY=1 once attached), restarts on failure, and is
// bounded to the capabilities it needs; its arguments are flags
// 'backend run' takes.
func TestBackendSystemdUnit(t *testing.T) {
	u := unitSettings(t, "systemd/director-backend.service")
	for k, want := range map[string]string{
		"Type": "notify", "Restart": "on-failure", "NoNewPrivileges": "yes",
		"CapabilityBoundingSet": "CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_ADMIN",
		"ExecStart":             "/usr/local/bin/director backend --bpffs /sys/fs/bpf/director-backend run $DIRECTOR_BACKEND_ARGS",
	} {
		if u[k] != want {
			t.Errorf("%s=%q, want %q", k, u[k], want)
		}
	}
	// The default arguments parse: a run without the root it needs fails
	// on loading, not on its flags.
	args := strings.Fields(strings.Trim(strings.TrimPrefix(u["Environment"], "DIRECTOR_BACKEND_ARGS="), `"`))
	_, errOut, _ := runCmd(append([]string{"backend", "--bpffs", t.TempDir() + "/none", "run", "--interval", "0s"}, args...)...)
	if !strings.Contains(errOut, "--interval 0s: must be more than zero") {
		t.Errorf("the unit's arguments %v: %s", args, errOut)
	}
}

// TestMakeInstall installs into a temporary prefix and checks what lands
// there; systemd-analyze, where there is one, verifies the installed unit.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	tmp := t.TempDir()
	prefix, units := filepath.Join(tmp, "usr"), filepath.Join(tmp, "units")
	cmd := exec.Command("make", "-C", "../..", "install", "PREFIX="+prefix, "UNITDIR="+units, "ETCDIR="+filepath.Join(tmp, "etc"),
		"BIN="+filepath.Join(tmp, "build", "director"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	bin := filepath.Join(prefix, "bin", "director")
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil {
		t.Fatalf("the installed binary: %v\n%s", err, out)
	}
	unit := filepath.Join(units, "director.service")
	if u := unitSettings(t, unit); !strings.HasPrefix(u["ExecStart"], bin+" run ") {
		t.Errorf("the installed unit runs %q, not the installed binary", u["ExecStart"])
	}
	beUnit := filepath.Join(units, "director-backend.service")
	if u := unitSettings(t, beUnit); !strings.HasPrefix(u["ExecStart"], bin+" backend ") {
		t.Errorf("the installed backend unit runs %q, not the installed binary", u["ExecStart"])
	}
	if sa, err := exec.LookPath("systemd-analyze"); err == nil {
		for _, u := range []string{unit, beUnit} {
			if out, err := exec.Command(sa, "verify", u).CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("systemd-analyze verify %s: %v\n%s", u, err, out)
			}
		}
	}
}
