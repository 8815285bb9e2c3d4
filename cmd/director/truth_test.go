package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/director/director/internal/lab/testenv"
)

// TestPlanRunsApplysChecks: a table of IPv6 backends with a director
// config that has no outbound_src_ip6 cannot be served; plan says so, as
// apply does, naming the file and the table, rather than "safe".
func TestPlanRunsApplysChecks(t *testing.T) {
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	want := `ipv6-backends.json: tables[0]: its backends are IPv6, and the director config has no outbound_src_ip6 to send GUE over IPv6 from ("v6")`
	for _, args := range [][]string{
		{"plan", cfgDir + "ipv6-backends.json", "--director-config", cfgDir + "director.conf"},
		{"apply", cfgDir + "ipv6-backends.json", "--director-config", cfgDir + "director.conf", "--yes"},
	} {
		out, errOut, code := runCmd(append(b, args...)...)
		if code != 1 || !strings.Contains(errOut, want) || strings.Contains(out, "safe") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", args[0], code, out, errOut, want)
		}
	}
	// With an IPv6 source it plans.
	mustRun(t, 2, append(b, "plan", cfgDir+"ipv6-backends.json", "--director-config", cfgDir+"director6.conf")...)
	// IPv6 only, its gateway given as outbound_gateway_mac6 (issue 47,
	// item 11): planned and applied, and read back as what was applied.
	conf := filepath.Join(t.TempDir(), "director6only.conf")
	os.WriteFile(conf, []byte(`{"outbound_src_ip6": "fd00:1::1", "outbound_gateway_mac6": "02:00:00:00:00:06"}`), 0o644)
	mustRun(t, 2, append(b, "plan", cfgDir+"ipv6-backends.json", "--director-config", conf)...)
	mustRun(t, 0, append(b, "apply", cfgDir+"ipv6-backends.json", "--director-config", conf, "--yes")...)
	if out := mustRun(t, 0, append(b, "plan", cfgDir+"ipv6-backends.json", "--director-config", conf)...); strings.Contains(out, "director config: changed") {
		t.Errorf("the IPv6-only config applied, planned again: %s", out)
	}
	os.WriteFile(conf, []byte(`{"outbound_src_ip6": "fd00:1::1"}`), 0o644)
	if _, errOut, code := runCmd(append(b, "plan", cfgDir+"ipv6-backends.json", "--director-config", conf)...); code != 1 || !strings.Contains(errOut, "outbound_gateway_mac6 is not set") {
		t.Errorf("IPv6 only, no gateway MAC: exit %d: %s", code, errOut)
	}
}

// TestBackendAttachWarnings: backend attach says when IPv6 forwarding is
// off for a backend that forwards GUE over IPv6, and when a native veth's
// peer runs no program (what it sends on would be dropped there); and says
// nothing of either once they are right.
func TestBackendAttachWarnings(t *testing.T) {
	backendRig(t, func(b []string) error {
		_, errOut, code := runCmd(append(b, "attach", "bk0", "--self", "fd00:9::9", "--mode", "native", "--trust", "fd00:9::/64")...)
		if code != 0 || !strings.Contains(errOut, "net.ipv6.conf.bk0.forwarding is off: the kernel's route lookup refuses every second-chance next hop (drop_no_route); fix: sysctl -w net.ipv6.conf.bk0.forwarding=1") ||
			!strings.Contains(errOut, "bk0 is a veth in native mode whose peer runs no XDP program") || strings.Contains(errOut, "ipv4") {
			return fmt.Errorf("attach: exit %d: %s", code, errOut)
		}
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return err
		}
		_, errOut, code = runCmd(append(b, "attach", "bk0", "--self", "fd00:9::9", "--mode", "generic", "--trust", "fd00:9::/64")...)
		if code != 0 || strings.Contains(errOut, "warning") {
			return fmt.Errorf("attach, forwarding on, generic: exit %d: %s", code, errOut)
		}
		return nil
	})
}

// TestRefusedInput: what cannot mean anything is refused, saying where;
// what is odd but meant is a warning.
func TestRefusedInput(t *testing.T) {
	dir := t.TempDir()
	for _, flows := range []string{"0", "-5", "1000001"} {
		if _, errOut, code := runCmd("gen-capture", "--config", cfgDir+"small.json", "-o", filepath.Join(dir, "x.pcap"), "--flows", flows); code != 1 ||
			!strings.Contains(errOut, "gen-capture: --flows "+flows+": from 1 to 1000000") {
			t.Errorf("gen-capture --flows %s: exit %d: %s", flows, code, errOut)
		}
	}
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, []byte(`{"tables": []}`), 0o600)
	if _, errOut, code := runCmd("gen-capture", "--config", empty, "-o", filepath.Join(dir, "x.pcap")); code != 1 || !strings.Contains(errOut, "no binds to send traffic to") {
		t.Errorf("gen-capture of a config without binds: exit %d: %s", code, errOut)
	}
	small, err := os.ReadFile(cfgDir + "small.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{`"port": 80`, `"port": 0`, `tables[0].binds[0].port: 0 is not a port a client connects to (1-65535)`},
		{`"port": 80`, `"port_start": 0, "port_end": 80`, `tables[0].binds[0].port_start: 0 is not a port a client connects to`},
	} {
		p := filepath.Join(dir, "bad.json")
		os.WriteFile(p, []byte(strings.Replace(string(small), c.from, c.to, 1)), 0o600)
		if _, errOut, code := runCmd("show", p); code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("show with %s: exit %d: %s", c.to, code, errOut)
		}
	}
	// One backend with a domain, the others none: shown, with a warning.
	p := filepath.Join(dir, "domain.json")
	os.WriteFile(p, []byte(strings.Replace(string(small), `"healthy": true`, `"healthy": true, "domain": "rack-a"`, 1)), 0o600)
	if _, errOut, code := runCmd("show", p); code != 0 || !strings.Contains(errOut, "tables[0].backends: 1 of 4 have a domain and") ||
		!strings.Contains(errOut, "give every backend of the table a domain, or none") {
		t.Errorf("show with one domain of four: exit %d: %s", code, errOut)
	}
}

// TestHelpAndDocsSayWhatIs: claims that were true once and are not now.
// The backend program takes GUE over IPv6 too; healthcheck's GUE checks
// take outbound_src_ip (and _ip6), not GLB's old src_ip; every tool takes
// IPv6 backends.
func TestHelpAndDocsSayWhatIs(t *testing.T) {
	help := func(cmd string) string {
		out, errOut, _ := runCmd("help", cmd)
		return out + errOut
	}
	for _, c := range []struct {
		where, text   string
		must, mustNot []string
	}{
		{"help backend", help("backend"), []string{"over IPv6", "net.ipv6.conf.all.forwarding", "IPv4 or IPv6"}, []string{"any IPv4 address the host has", "this host's IPv4 ADDR"}},
		{"help healthcheck", help("healthcheck"), []string{"outbound_src_ip", "outbound_src_ip6"}, []string{"'s src_ip."}},
		{"docs/architecture.md", readDoc(t, "architecture.md"), []string{"Every tool takes tables of IPv6 backends"}, []string{"still refuse IPv6"}},
	} {
		for _, m := range c.must {
			if !strings.Contains(c.text, m) {
				t.Errorf("%s does not say %q", c.where, m)
			}
		}
		for _, m := range c.mustNot {
			if strings.Contains(c.text, m) {
				t.Errorf("%s still says %q", c.where, m)
			}
		}
	}
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlanSaysASourceIsNotHere (issue 47, item 10): plan and apply say,
// as doctor does, when outbound_src_ip is no address of this host, and
// say nothing of one that is.
func TestPlanSaysASourceIsNotHere(t *testing.T) {
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	t.Cleanup(func() { mustRun(t, 0, append(b, "unload")...) })
	const want = "outbound_src_ip 192.0.2.1 is not an address of this host"
	for _, verb := range [][]string{{"plan"}, {"apply", "--yes"}} {
		_, errOut, code := runCmd(append(append(b, verb...), cfgDir+"small.json", "--director-config", cfgDir+"director.conf")...)
		if code == 1 || !strings.Contains(errOut, want) || !strings.Contains(errOut, "director doctor: source-address") {
			t.Errorf("%s with a source not here: exit %d: %s", verb[0], code, errOut)
		}
	}
	here := filepath.Join(t.TempDir(), "here.conf")
	os.WriteFile(here, []byte(`{"outbound_src_ip": "127.0.0.1", "outbound_gateway_mac": "02:00:00:00:00:03"}`), 0o644)
	if _, errOut, _ := runCmd(append(b, "plan", cfgDir+"small.json", "--director-config", here)...); strings.Contains(errOut, "is not an address of this host") {
		t.Errorf("plan with a source here: %s", errOut)
	}
}

// TestPlanOfTheDirectorConfigAlone (issue 47, item 12): a plan that
// changes the director config only does not say "no changes" first.
func TestPlanOfTheDirectorConfigAlone(t *testing.T) {
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	t.Cleanup(func() { mustRun(t, 0, append(b, "unload")...) })
	mustRun(t, 0, append(b, "apply", cfgDir+"small.json", "--director-config", cfgDir+"director.conf", "--yes")...)
	data, err := os.ReadFile(cfgDir + "director.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "director.conf")
	os.WriteFile(conf, []byte(strings.Replace(string(data), `"outbound_src_ip": "192.0.2.1"`, `"outbound_src_ip": "192.0.2.2"`, 1)), 0o644)
	out, errOut, code := runCmd(append(b, "plan", cfgDir+"small.json", "--director-config", conf)...)
	if code != 2 || strings.Contains(out, "\nno changes\n") || !strings.Contains(out, "tables: no changes") || !strings.Contains(out, "director config: changed") {
		t.Errorf("plan of the director config alone: exit %d\n%s\n%s", code, out, errOut)
	}
	if out := mustRun(t, 0, append(b, "plan", cfgDir+"small.json", "--director-config", cfgDir+"director.conf")...); !strings.Contains(out, "\nno changes\n") {
		t.Errorf("plan of what is live: %s", out)
	}
}

// TestQUICKeyIsNeverShown: a quic block with a key (encrypted connection
// IDs) is applied like any other, reads back as what was applied (plan
// finds nothing to change), and no command shows the key: not show, not
// plan, status or stats, not a diff against another key (which says the
// key changed).
func TestQUICKeyIsNeverShown(t *testing.T) {
	const key, other = "8f95f09245765f80256934e50c66207f", "0123456789abcdef0123456789abcdef"
	path, path2 := keyedQUIC(t, key), keyedQUIC(t, other)
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	mustRun(t, 0, append(b, "apply", path, "--yes", "--allow-unsafe")...)
	for _, args := range [][]string{{"show", path}, {"show", path, "--json"}, {"diff", path, path2},
		append(b, "plan", path), append(b, "plan", path2), append(b, "status"), append(b, "status", "--json"), append(b, "stats")} {
		out, errOut, code := runCmd(args...)
		if code == 1 {
			t.Errorf("%v: exit 1: %s", args, errOut)
		}
		for _, k := range []string{key, other} {
			if strings.Contains(strings.ToLower(out+errOut), k[:8]) {
				t.Errorf("%v shows a key: %s%s", args, out, errOut)
			}
		}
		if args[0] == "diff" && !strings.Contains(out, "QUIC-LB key changed") {
			t.Errorf("%v does not say the key changed: %s", args, out)
		}
	}
	// Rotation: both keys in one table's configs, and the old config
	// removed.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(t.TempDir(), "both.json")
	rotated := strings.Replace(string(raw), `"key": "`+key+`"}`, `"key": "`+key+`"}, {"config_id": 2, "server_id_len": 2, "nonce_len": 6, "key": "`+other+`"}]`, 1)
	rotated = strings.Replace(rotated, `"quic": {`, `"quic": [{`, 1)
	if err := os.WriteFile(both, []byte(rotated), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"show", both}, {"show", both, "--json"}, {"diff", path, both}, {"diff", both, path2, "--json"},
		append(b, "plan", both), append(b, "plan", both, "--json")} {
		out, errOut, code := runCmd(args...)
		if code == 1 {
			t.Errorf("%v: exit 1: %s", args, errOut)
		}
		for _, k := range []string{key, other} {
			if strings.Contains(strings.ToLower(out+errOut), k[:8]) {
				t.Errorf("%v shows a key: %s%s", args, out, errOut)
			}
		}
	}
}

// TestReplayEncryptedQUIC: gen-capture writes a table's QUIC connections
// with IDs encrypted as its servers would, and replay routes them by the
// decrypted server ID, the kernel as the model.
func TestReplayEncryptedQUIC(t *testing.T) {
	testenv.Kernel(t)
	cfg, capture := keyedQUIC(t, "8f95f09245765f80256934e50c66207f"), filepath.Join(t.TempDir(), "keyed.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfg, "-o", capture, "--flows", "200", "--seed", "3")
	out := mustRun(t, 0, "replay", capture, "--config", cfg, "--verify")
	var routed, unknown int
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == "quic_routed" {
			fmt.Sscan(f[1], &routed)
		}
		if len(f) > 1 && f[0] == "quic_fallback_unknown_id" {
			fmt.Sscan(f[1], &unknown)
		}
	}
	// The unknown IDs are the unhealthy backend's: a quarter of the
	// connections at most.
	if routed < 100 || unknown > routed/3 || !strings.Contains(out, " 0 differ") {
		t.Errorf("%d packets routed by ID, %d of unknown IDs:\n%s", routed, unknown, out)
	}
}

// keyedQUIC is the path of testdata's quic.json with key (hex) in its quic
// block: its connection IDs encrypted.
func keyedQUIC(t *testing.T, key string) string {
	t.Helper()
	raw, err := os.ReadFile(cfgDir + "quic.json")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(raw), `"nonce_len": 6}`, `"nonce_len": 6, "key": "`+key+`"}`, 1)
	if s == string(raw) {
		t.Fatal("quic.json has no quic block to add a key to")
	}
	path := filepath.Join(t.TempDir(), "keyed.json")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
