package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/director/director/internal/lab/golden"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

const cfgDir = "../../testdata/configs/"

// TestMain lets the test binary be the director binary, for tests that
// must run it as a separate process (under ip netns exec, nsenter).
func TestMain(m *testing.M) {
	if line, ok := os.LookupEnv(docsShellEnv); ok {
		os.Exit(docsShell(line)) // a docHost's command (docs_hosts_test.go)
	}
	if os.Getenv("DIRECTOR_TEST_AS_MAIN") == "1" {
		if d := os.Getenv("DIRECTOR_TEST_PLANKEY_DIR"); d != "" {
			planKeyDir = d // the tests' key, not the host's
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// The host's plan key in a directory of the tests' own.
	dir, err := os.MkdirTemp("", "director-plankey-")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	planKeyDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// asDirector is a command that runs this test binary as director.
func asDirector(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "DIRECTOR_TEST_AS_MAIN=1")
	return cmd
}

// runCmd runs the CLI in-process.
func runCmd(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

// TestGolden checks every read command's output against testdata/golden.
// Regenerate with: go test ./cmd/director -run Golden -update
func TestGolden(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "small.bin")
	if _, e, code := runCmd("build", cfgDir+"small.json", "-o", bin); code != 0 {
		t.Fatalf("build: %s", e)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"show-small", []string{"show", cfgDir + "small.json"}, 0},
		{"show-medium", []string{"show", cfgDir + "medium.json"}, 0},
		{"show-ipv6", []string{"show", cfgDir + "ipv6.json"}, 0},
		{"show-glb-example", []string{"show", cfgDir + "glb-example.json"}, 0},
		{"show-two-bad", []string{"show", cfgDir + "small-two-bad.json"}, 0},
		{"show-medium-json", []string{"show", "--json", cfgDir + "medium.json"}, 0},
		{"show-binary", []string{"show", bin}, 0},
		{"show-lookup", []string{"show", cfgDir + "glb-example.json", "--lookup", "203.0.113.9:40000", "--to", "10.10.20.7:1500", "--proto", "udp"}, 0},
		{"show-lookup-all", []string{"show", cfgDir + "medium.json", "--lookup", "2001:db8::7"}, 0},
		{"show-lookup-json", []string{"show", "--json", cfgDir + "small.json", "--lookup", "198.51.100.1"}, 0},
		{"diff-same", []string{"diff", cfgDir + "small.json", cfgDir + "small.json"}, 0},
		{"diff-binary-same", []string{"diff", bin, cfgDir + "small.json"}, 0},
		{"diff-draining", []string{"diff", cfgDir + "small.json", cfgDir + "small-draining.json"}, 2},
		{"diff-unhealthy", []string{"diff", cfgDir + "small.json", cfgDir + "small-unhealthy.json"}, 2},
		{"diff-added", []string{"diff", cfgDir + "small.json", cfgDir + "small-added.json"}, 2},
		{"diff-removed", []string{"diff", bin, cfgDir + "small-removed.json"}, 2},
		{"diff-two-bad", []string{"diff", cfgDir + "small-draining.json", cfgDir + "small-two-bad.json"}, 2},
		{"diff-draining-json", []string{"diff", "--json", cfgDir + "small.json", cfgDir + "small-draining.json"}, 2},
		{"diff-tables", []string{"diff", cfgDir + "medium.json", cfgDir + "small.json"}, 2},
		{"show-weighted", []string{"show", cfgDir + "small-weighted.json"}, 0},
		{"diff-weighted", []string{"diff", cfgDir + "small.json", cfgDir + "small-weighted.json"}, 2},
		{"show-domains", []string{"show", cfgDir + "small-domains.json"}, 0},
		{"diff-domains", []string{"diff", cfgDir + "small.json", cfgDir + "small-domains.json"}, 2},
		{"show-balanced", []string{"show", cfgDir + "small-balanced.json"}, 0},
		{"show-balanced-json", []string{"show", "--json", cfgDir + "small-balanced.json"}, 0},
		{"diff-balanced", []string{"diff", cfgDir + "small.json", cfgDir + "small-balanced.json"}, 2},
		{"show-quic", []string{"show", cfgDir + "quic.json"}, 0},
		{"show-quic-json", []string{"show", "--json", cfgDir + "quic.json"}, 0},
		{"show-lookup-cid", []string{"show", cfgDir + "quic.json", "--lookup", "3f5e02a1a2a3a4a5a6"}, 0},
		{"show-lookup-cid-draining", []string{"show", cfgDir + "quic.json", "--lookup", "0x3f5e03a1a2a3a4a5a6", "--to", "10.10.10.10:443"}, 0},
		{"show-lookup-cid-unhealthy", []string{"show", cfgDir + "quic.json", "--lookup", "3f5e04a1a2a3a4a5a6"}, 0},
		{"show-lookup-cid-unroutable-json", []string{"show", "--json", cfgDir + "quic.json", "--lookup", "ff5e02a1a2a3a4a5a6"}, 0},
		{"diff-quic-server-id", []string{"diff", cfgDir + "quic.json", cfgDir + "quic-server-id.json"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runCmd(c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, c.code, errOut)
			}
			got := out
			if errOut != "" {
				got += "--- stderr\n" + errOut
			}
			golden.Check(t, c.name+".txt", []byte(got))
			if strings.Contains(c.name, "json") {
				var v map[string]any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					t.Errorf("not JSON: %v", err)
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"tables": [{"hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
	  "binds": [{"ip": "10.0.0.1", "proto": "tcp", "port": 80}],
	  "backends": [{"ip": "10.0.0.2", "state": "active", "healthy": true},
	               {"ip": "10.0.0.3", "state": "active", "healthy": true},
	               {"ip": "10.0.0.4", "state": "active", "healthy": true},
	               {"ip": "10.0.0.300", "state": "active", "healthy": true}]}]}`), 0o644)
	out := filepath.Join(dir, "out.bin")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"show", bad}, `tables[0].backends[3].ip: "10.0.0.300" is not an IP address`},
		{[]string{"build", bad, "-o", out}, `tables[0].backends[3].ip: "10.0.0.300" is not an IP address`},
		{[]string{"diff", cfgDir + "small.json", bad}, `backends[3].ip`},
		{[]string{"show", filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{"build", cfgDir + "small.json"}, "-o FILE is required"},
		{[]string{"build", cfgDir + "small.json", "-o", out, "--format", "xml"}, `--format "xml" unknown`},
		{[]string{"show"}, "wrong number of arguments"},
		{[]string{"show", cfgDir + "small.json", "--lookup", "nope"}, `"nope" is not an address`},
		{[]string{"show", cfgDir + "small.json", "--lookup", "1.2.3.4", "--to", "9.9.9.9:1"}, "no table has a tcp bind matching 9.9.9.9:1"},
		{[]string{"show", cfgDir + "small.json", "--bogus"}, "flag provided but not defined"},
		{[]string{"show", cfgDir + "small.json", "--lookup", "3f5e02a1a2a3a4a5a6"}, "no table has a quic block: a connection ID names no backend"},
		{[]string{"show", cfgDir + "quic.json", "--lookup", "3f5e02", "--to", "10.10.10.11:443"}, "no table with a quic block has a udp bind matching 10.10.10.11:443"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	} {
		stdout, stderr, code := runCmd(c.args...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1", c.args, code)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr %q does not contain %q", c.args, stderr, c.want)
		}
		if !strings.Contains(stderr, "director: ") {
			t.Errorf("%v: stderr %q lacks the director: prefix", c.args, stderr)
		}
		if c.args[0] != "show" && stdout != "" && c.args[0] != "build" {
			t.Errorf("%v: printed to stdout on error: %q", c.args, stdout)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed build left %s behind", out)
	}
}

func TestBuildWritesGLB(t *testing.T) {
	out := filepath.Join(t.TempDir(), "t.bin")
	stdout, stderr, code := runCmd("build", cfgDir+"medium.json", "-o", out, "--format", "glb")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	src, err := config.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := config.Load(cfgDir + "medium.json")
	if len(src.Tables) != 3 {
		t.Fatalf("%d tables", len(src.Tables))
	}
	for i := range src.Tables {
		fp := table.Fingerprint(src.Tables[i])
		if fp != table.Fingerprint(cfg.Tables[i]) {
			t.Errorf("table %d fingerprint differs between config and binary", i)
		}
		if !strings.Contains(stdout, table.ShortFingerprint(fp)) {
			t.Errorf("build output lacks fingerprint %s:\n%s", table.ShortFingerprint(fp), stdout)
		}
	}
	// The binary holds every hash_key: owner only, whatever the umask.
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("build wrote %v, want mode 0600 (%v)", fi.Mode().Perm(), err)
	}
	// build refuses a binary as input.
	if _, stderr, code := runCmd("build", out, "-o", out+"2"); code != 1 || !strings.Contains(stderr, "already a GLB binary") {
		t.Errorf("build of a binary: exit %d, %s", code, stderr)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	data, _ := os.ReadFile(cfgDir + "medium.json")
	var cfg struct {
		Tables []struct {
			HashKey string `json:"hash_key"`
			Seed    string `json:"seed"`
		} `json:"tables"`
	}
	json.Unmarshal(data, &cfg)
	bin := filepath.Join(t.TempDir(), "m.bin")
	runs := [][]string{
		{"show", cfgDir + "medium.json"}, {"show", "--json", cfgDir + "medium.json"},
		{"show", cfgDir + "medium.json", "--lookup", "10.0.0.1"},
		{"diff", cfgDir + "medium.json", cfgDir + "small.json"}, {"diff", "--json", cfgDir + "medium.json", cfgDir + "small.json"},
		{"build", cfgDir + "medium.json", "-o", bin}, {"show", bin},
	}
	for _, args := range runs {
		out, errOut, _ := runCmd(args...)
		for _, tc := range cfg.Tables {
			for _, secret := range []string{tc.HashKey, tc.Seed} {
				if strings.Contains(strings.ToLower(out+errOut), secret) {
					t.Errorf("%v printed a secret", args)
				}
			}
		}
	}
}

// TestHelp: help, --help and -h succeed on stdout; every command is listed
// and described, its synopsis names every flag it has, and flags are
// written as they are typed (--name; -o for one letter).
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"--bpffs", "/x", "--help"}} {
		out, errOut, code := runCmd(args...)
		if code != 0 || errOut != "" || !strings.Contains(out, "usage: director") {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		for _, c := range commands {
			if !strings.Contains(out, "\n  "+c.name+" ") {
				t.Errorf("%v does not list %s", args, c.name)
			}
		}
	}
	for _, c := range commands {
		for _, args := range [][]string{{"help", c.name}, {c.name, "-h"}, {c.name, "--help"}} {
			o, errOut, code := runCmd(args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(o, "usage: director "+c.name) || strings.Count(o, "usage:") != 1 {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, o, errOut)
			}
			if strings.Contains(o, "\n  -"+"json") || strings.Contains(o, " -bpffs") {
				t.Errorf("%v lists a long flag with one dash:\n%s", args, o)
			}
		}
		// The synopsis names every flag the command has.
		if c.run == nil {
			continue
		}
		o, _, _ := runCmd("help", c.name)
		i := strings.Index(o, "\nflags:\n")
		if i < 0 {
			continue
		}
		flagsPart, _, _ := strings.Cut(o[i+8:], "\n\n")
		for _, line := range strings.Split(flagsPart, "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], "-") {
				continue
			}
			if !strings.Contains(c.args, f[0]) {
				t.Errorf("%s: synopsis %q does not name %s", c.name, c.args, f[0])
			}
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		if out, _, code := runCmd(args...); code != 0 || !strings.HasPrefix(out, "director ") {
			t.Errorf("%v: %d %q", args, code, out)
		}
	}
}

// TestGlobalFlagsEverywhere: --bpffs and --director-config work before or
// after every command that reads them, and are refused, never ignored, by
// one that does not; a flag error is printed once.
func TestGlobalFlagsEverywhere(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "s.bin")
	for _, args := range [][]string{
		{"build", cfgDir + "small.json", "-o", bin},
		{"show", cfgDir + "small.json", "--director-config", cfgDir + "director.conf"},
		{"--director-config", cfgDir + "director.conf", "show", cfgDir + "small.json"},
		{"--bpffs", "/x", "help", "show"}, {"--bpffs", "/x", "--version"},
	} {
		if _, errOut, code := runCmd(args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"build", cfgDir + "small.json", "-o", bin, "--bpffs", "/x"}, "build: --bpffs is not used by 'build'"},
		{[]string{"--bpffs", "/x", "show", cfgDir + "small.json"}, "show: --bpffs is not used by 'show'"},
		{[]string{"diff", "--bpffs", "/x", cfgDir + "small.json", cfgDir + "small.json"}, "diff: --bpffs is not used by 'diff'"},
		{[]string{"status", "--director-config", cfgDir + "director.conf"}, "status: --director-config is not used by 'status'"},
		{[]string{"gen-capture", "--config", cfgDir + "small.json", "-o", bin, "--director-config", cfgDir + "director.conf"},
			"gen-capture: --director-config is not used by 'gen-capture'"},
	} {
		if _, errOut, code := runCmd(c.args...); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d: %s", c.args, code, errOut)
		}
	}
	out, errOut, code := runCmd("show", cfgDir+"small.json", "--bogus")
	if code != 1 || out != "" || strings.Count(errOut, "bogus") != 1 || !strings.Contains(errOut, "not defined: --bogus (see 'director help show')") {
		t.Errorf("a bad flag: exit %d, %q", code, errOut)
	}
}

// TestReplayWithoutRootSaysWhatItNeeds: as a normal user, replay says it
// needs root or CAP_BPF, and that --model needs neither.
func TestReplayWithoutRootSaysWhatItNeeds(t *testing.T) {
	if os.Geteuid() != 0 {
		_, errOut, code := runCmd("replay", capDir+"small.pcap", "--config", cfgDir+"small.json")
		if code != 1 || !strings.Contains(errOut, "needs root") || !strings.Contains(errOut, "--model") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		return
	}
	// As root, replay in a process without capabilities.
	checkUnprivileged(t, "replay", capDir+"small.pcap", "--config", cfgDir+"small.json")
}

// TestSameVerdictEverywhere: a command that can read what it cannot use
// warns where it reads it, with the words the commands that refuse it use.
func TestSameVerdictEverywhere(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "v6.bin")
	// ipv6.json's table has eight IPv6 backends, then an IPv4 one.
	const refusal = `tables[0].backends[8].ip: "192.168.60.1" is IPv4, and tables[0].backends[0] is IPv6: a table's backends are one family, since its GUE packets carry one family of hops`
	for _, args := range [][]string{
		{"show", cfgDir + "ipv6.json"}, {"show", "--json", cfgDir + "ipv6.json"},
		{"build", cfgDir + "ipv6.json", "-o", bin}, {"show", bin},
		{"diff", cfgDir + "small.json", cfgDir + "ipv6.json"},
	} {
		out, errOut, code := runCmd(args...)
		if code == 1 {
			t.Fatalf("%v: exit 1: %s", args, errOut)
		}
		if !strings.Contains(strings.ReplaceAll(out+errOut, `\"`, `"`), refusal+", so plan and apply refuse this table") {
			t.Errorf("%v does not warn of the IPv6 backends:\n%s%s", args, out, errOut)
		}
	}
	for _, args := range [][]string{{"plan", cfgDir + "ipv6.json"}, {"plan", bin}, {"apply", cfgDir + "ipv6.json", "--yes"}} {
		_, errOut, code := runCmd(append([]string{"--bpffs", "/nonexistent"}, args...)...)
		if code != 1 || !strings.Contains(errOut, refusal) {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
	}
}

// TestErrorLinesNameTheFile: every line of a multi-problem error names
// the file it is about.
func TestErrorLinesNameTheFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"tables": [{"hash_key": "x", "seed": "y", "binds": [], "backends": []}]}`), 0o600)
	for _, cmd := range []string{"show", "plan"} {
		_, errOut, code := runCmd(cmd, bad)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if code != 1 || len(lines) < 4 {
			t.Fatalf("%s: exit %d, %q", cmd, code, errOut)
		}
		for _, l := range lines {
			if !strings.HasPrefix(l, "director: "+bad+": tables[0].") {
				t.Errorf("%s: line %q does not name the file", cmd, l)
			}
		}
	}
}

// TestWarningsNameTheFile: a warning says which file it is about, the
// director config's included.
func TestWarningsNameTheFile(t *testing.T) {
	_, errOut, _ := runCmd("show", cfgDir+"small.json", "--lookup", "198.51.100.7:4000", "--director-config", cfgDir+"glb-director.conf")
	for _, want := range []string{"director: warning: " + cfgDir + "glb-director.conf: num_worker_queues: ignored"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		if !strings.HasPrefix(l, "director: warning: "+cfgDir) {
			t.Errorf("warning %q names no file", l)
		}
	}
}

// TestPlanRefusesMoreTablesThanTheDatapathAtOnce: the datapath's 32 tables
// are checked before anything is built or the kernel is asked.
func TestPlanRefusesMoreTablesThanTheDatapathAtOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"tables": [`)
	for i := 0; i < 2000; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"hash_key": "12345678901234561234567890123456", "seed": "34567890123456783456789012345678",
		  "binds": [{"ip": "10.%d.%d.1", "proto": "tcp", "port": 80}], "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}]}`, i/256, i%256)
	}
	b.WriteString("]}")
	path := filepath.Join(t.TempDir(), "many.json")
	os.WriteFile(path, []byte(b.String()), 0o600)
	for _, args := range [][]string{{"plan", path}, {"apply", path, "--yes"}, {"replay", "x.pcap", "--config", path, "--model"}, {"show", path}} {
		start := time.Now()
		_, errOut, code := runCmd(args...)
		if code != 1 || !strings.Contains(errOut, path+": tables: 2000 tables; the ") {
			t.Errorf("%v: exit %d, %s", args, code, errOut)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%v: took %v to refuse", args, took)
		}
	}
}

// TestStatsFlags: bad --interval and --count values are errors that say
// what is wanted, never a panic, and need no director.
func TestStatsFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--watch", "--interval", "0"}, "stats: --interval 0s: must be more than zero"},
		{[]string{"--watch", "--interval", "-1s"}, "stats: --interval -1s: must be more than zero"},
		{[]string{"--watch", "--interval", "1"}, `"1" has no unit: write it as 1s, 500ms or 2m`},
		{[]string{"--watch", "--interval", "soon"}, `"soon" is not a duration (such as 1s, 500ms or 2m)`},
		{[]string{"--count", "2"}, "stats: --interval and --count go with --watch"},
		{[]string{"--interval", "2s"}, "stats: --interval and --count go with --watch"},
		{[]string{"--watch", "--count", "-1"}, "must be zero (until interrupted) or more"},
	} {
		_, errOut, code := runCmd(append([]string{"stats", "--bpffs", "/nonexistent"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "goroutine") {
			t.Errorf("stats %v: exit %d, %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

// TestAttachmentLines: status never shows an attachment whose interface
// is gone, or is in another namespace, as plainly attached.
func TestAttachmentLines(t *testing.T) {
	for _, c := range []struct {
		a    loader.Attachment
		want string
	}{
		{loader.Attachment{Interface: "eth0", State: loader.StateAttached, Mode: "native", LinkID: 3}, "attached     eth0, native mode (link 3)"},
		{loader.Attachment{Interface: "a0", State: loader.StateOtherNamespace, Ifindex: 2, LinkID: 3}, "attached     a0, in another network namespace (ifindex 2 there, link 3)"},
		{loader.Attachment{Interface: "a0", State: loader.StateGone, LinkID: 3}, "gone         a0: the interface no longer exists, so the link steers nothing (link 3); 'detach a0' removes it"},
	} {
		if got := attachmentLine(c.a); got != c.want {
			t.Errorf("%s: %q, want %q", c.a.State, got, c.want)
		}
	}
}

// TestLoadWithoutRootSaysWhatItNeeds: load and backend status without
// privileges name the capabilities missing (not cilium/ebpf's MEMLOCK
// hint, nor a bare "permission denied"), and a failed load leaves no pin
// directory behind.
func TestLoadWithoutRootSaysWhatItNeeds(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run as root: it drops root's capabilities for the commands it runs")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	dir := testenv.PinDir("director-nocaps")
	t.Cleanup(func() { os.RemoveAll(dir) })
	// A backend program pinned, as root, for the unprivileged status.
	be := dir + "-backend"
	b, err := loader.LoadBackend(be)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	t.Cleanup(func() { loader.Unload(be) })
	d, err := loader.Load(dir + "-director")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	t.Cleanup(func() { loader.Unload(dir + "-director") })
	asUser := []string{"--reuid=65534", "--regid=65534", "--clear-groups"}
	for _, c := range []struct {
		user bool // as a normal user too, not only root without capabilities
		args []string
	}{{false, []string{"load", "--bpffs", dir}}, {true, []string{"load", "--bpffs", dir}},
		{true, []string{"backend", "status", "--bpffs", be}}, {true, []string{"status", "--bpffs", dir + "-director"}}} {
		args := c.args
		pre := []string{"--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"}
		if c.user {
			pre = append(asUser, pre...)
		}
		cmd := asDirector("setpriv", append(append(pre, "--", os.Args[0]), args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		errOut := stderr.String()
		if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errOut, "needs root, or CAP_BPF, CAP_NET_ADMIN") || strings.Contains(errOut, "MEMLOCK") {
			t.Errorf("%v without capabilities (as a normal user: %v): exit %d: %s", args, c.user, cmd.ProcessState.ExitCode(), errOut)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed load left %s behind", dir)
	}
}

// TestUnloadOfAMistypedPathRemovesNothing: both unloads refuse a directory
// that is not a director's pins, exit non-zero and never say "unloaded".
func TestUnloadOfAMistypedPathRemovesNothing(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"unload", "--bpffs", dir}, {"backend", "unload", "--bpffs", dir}} {
		out, errOut, code := runCmd(args...)
		if code == 0 || strings.Contains(out, "unloaded") || !strings.Contains(errOut, "not on a bpf filesystem") {
			t.Errorf("%v: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("%v removed %s: %v", args, keep, err)
		}
	}
}

// TestOutputToStdoutAndLinks: -o - writes the output to stdout (the
// command's report to stderr), and no -o or --picture writes through or
// over a symbolic link.
func TestOutputToStdoutAndLinks(t *testing.T) {
	out, errOut, code := runCmd("build", cfgDir+"small.json", "-o", "-")
	if code != 0 || !strings.HasPrefix(out, "GLBD") || !strings.Contains(errOut, "wrote stdout: 1 tables") {
		t.Fatalf("build -o -: code %d, stdout %.20q, stderr %q", code, out, errOut)
	}
	tables, err := table.ReadGLB([]byte(out))
	if err != nil || len(tables) != 1 {
		t.Fatalf("build -o - wrote what is not the table: %v", err)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Fatal("build -o - wrote a file named -")
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"build", cfgDir + "small.json", "-o", link},
		{"gen-capture", "--config", cfgDir + "small.json", "-o", link},
		{"show", cfgDir + "small.json", "--picture", link + ".png"},
	} {
		if args[0] == "show" {
			os.Symlink(target, link+".png")
		}
		if _, errOut, code := runCmd(args...); code != 1 || !strings.Contains(errOut, "is a symbolic link (to "+target+")") {
			t.Errorf("%v: code %d, %s", args, code, errOut)
		}
	}
	if data, _ := os.ReadFile(target); string(data) != "keep" {
		t.Errorf("a write went through a symbolic link: %q", data)
	}
	for _, l := range []string{link, link + ".png"} {
		if st, err := os.Lstat(l); err != nil || st.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is no longer the symbolic link: %v", l, err)
		}
	}
}

// TestPlanToStdout: plan -o - writes the plan to stdout and its review to
// stderr.
func TestPlanToStdout(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	mustRun(t, 0, "--bpffs", dir, "load")
	out, errOut, code := runCmd("--bpffs", dir, "plan", cfgDir+"small.json", "--director-config", cfgDir+"director.conf", "-o", "-")
	var p table.Plan
	if code != 2 || json.Unmarshal([]byte(out), &p) != nil || !strings.Contains(errOut, "plan written to stdout") || !strings.Contains(errOut, "verdict: ") {
		t.Fatalf("plan -o -: code %d, stdout %.40q, stderr %q", code, out, errOut)
	}
	if _, errOut, code := runCmd("--bpffs", dir, "plan", cfgDir+"small.json", "-o", "-", "--json"); code != 1 || !strings.Contains(errOut, "both write to stdout") {
		t.Fatalf("plan -o - --json: %d %s", code, errOut)
	}
}
