package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/director/director/internal/datapath/pkt"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/loader/testrun"
	"github.com/director/director/loader/xdpbuild"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// bpffsDir gives a test its own director pin directory, unloaded at the end.
func bpffsDir(t *testing.T) string {
	t.Helper()
	testenv.Kernel(t)
	dir := testenv.PinDir("director-cli")
	t.Cleanup(func() { loader.Unload(dir) })
	return dir
}

func mustRun(t *testing.T, code int, args ...string) string {
	t.Helper()
	out, errOut, got := runCmd(args...)
	if got != code {
		t.Fatalf("director %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errOut)
	}
	return out + errOut
}

func liveFingerprints(t *testing.T, dir string) []string {
	t.Helper()
	out := mustRun(t, 0, "--bpffs", dir, "status", "--json")
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	var fps []string
	for _, tb := range doc.Tables {
		fps = append(fps, tb.Name+"="+tb.Fingerprint)
	}
	return fps
}

func TestKernelCommands(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	run := func(code int, args ...string) string {
		return mustRun(t, code, append(append([]string{}, b...), args...)...)
	}
	plan := filepath.Join(t.TempDir(), "plan.json")

	if out := run(1, "status"); !strings.Contains(out, "no director is loaded") {
		t.Fatalf("status before load: %s", out)
	}
	run(0, "load")
	run(0, "load") // idempotent
	if out := run(0, "status"); !strings.Contains(out, "tables       (none)") || !strings.Contains(out, "config       (none") {
		t.Fatalf("status: %s", out)
	}
	// The kernel it runs on, which lacks nothing: on every kernel tested.
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	if out := run(0, "status"); !strings.Contains(out, "kernel       "+release+": has everything the programs use\n") {
		t.Fatalf("status does not report kernel %s as whole: %s", release, out)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(run(0, "status", "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Kernel == nil || doc.Kernel.Release != release || doc.Kernel.Missing == nil || len(doc.Kernel.Missing) != 0 {
		t.Fatalf("status --json kernel: %+v", doc.Kernel)
	}
	// The maps' memory: no table's inner map before a table is applied.
	if doc.Memory.Bytes == 0 || doc.Memory.Of("tables").Inner != 0 {
		t.Fatalf("status --json memory before any table: %+v", doc.Memory)
	}
	if out := run(0, "status"); !strings.Contains(out, "maps         "+sizeString(doc.Memory.Bytes)+" in ") ||
		!strings.Contains(out, "the tables "+sizeString(doc.Memory.Of("tables").Bytes)+" in 0 inner maps") {
		t.Fatalf("status's maps line: %s", out)
	}

	// A reviewed plan, applied exactly, the director config with it.
	if out := run(2, "plan", cfgDir+"small.json", "--director-config", cfgDir+"director.conf", "-o", plan); !strings.Contains(out, "verdict: safe") ||
		!strings.Contains(out, "outbound_gateway_mac         (none) -> 02:00:00:00:00:03") {
		t.Fatalf("plan: %s", out)
	}
	if fi, err := os.Stat(plan); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("plan file: %v %v", fi, err)
	}
	if out := run(0, "apply", plan); !strings.Contains(out, "applied 1 tables") {
		t.Fatalf("apply: %s", out)
	}
	src, _ := config.Load(cfgDir + "small.json")
	want := []string{"api=" + table.Fingerprint(src.Tables[0])}
	if got := liveFingerprints(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("live %v, want %v", got, want)
	}
	if out := run(0, "status"); !strings.Contains(out, " in 1 inner maps (every slot written since load") {
		t.Fatalf("status's maps line after a table is applied: %s", out)
	}
	// The same plan again: it is live already, and nothing is written;
	// a config with --yes that is live already, likewise.
	if out := run(0, "apply", plan); !strings.Contains(out, "nothing applied: the plan is live already") {
		t.Fatalf("a plan applied twice: %s", out)
	}
	if out := run(0, "apply", cfgDir+"small.json", "--yes"); !strings.Contains(out, "nothing applied: the config's tables and director config are live already") {
		t.Fatalf("a live config with --yes: %s", out)
	}
	// A plan whose base is gone is refused.
	other := filepath.Join(t.TempDir(), "other.json")
	run(2, "plan", cfgDir+"small-draining.json", "-o", other)
	run(0, "apply", cfgDir+"small-unhealthy.json", "--yes", "--allow-unsafe")
	if out := run(1, "apply", other); !strings.Contains(out, "what is live changed since the plan was made") {
		t.Fatalf("stale plan: %s", out)
	}
	run(0, "apply", cfgDir+"small.json", "--yes", "--allow-unsafe")
	if out := run(0, "status"); !strings.Contains(out, "gateway 02:00:00:00:00:03") {
		t.Fatalf("status: %s", out)
	}
	// A plan's picture is drawn against what is live: the removal's rows
	// at risk (with GLB's two hops: history_hops false), as many as the
	// plan counts, and its verdict.
	svg := filepath.Join(t.TempDir(), "plan.svg")
	twoHops := filepath.Join(t.TempDir(), "small-removed-two-hops.json")
	removed := strings.Replace(string(mustReadFile(t, cfgDir+"small-removed.json")), `"name": "api",`, `"name": "api", "history_hops": false,`, 1)
	if err := os.WriteFile(twoHops, []byte(removed), 0o600); err != nil {
		t.Fatal(err)
	}
	var pl struct {
		Diff struct {
			Tables []struct {
				Rows struct {
					AtRisk int `json:"at_risk"`
				} `json:"rows"`
			} `json:"tables"`
		} `json:"diff"`
	}
	planOut, planErr, code := runCmd(append(b, "plan", twoHops, "--json", "--picture", svg)...)
	if err := json.Unmarshal([]byte(planOut), &pl); err != nil || code != 2 || len(pl.Diff.Tables) != 1 || !strings.Contains(planErr, "picture of 1 table written to "+svg) {
		t.Fatalf("plan --json --picture: exit %d, %v\n%s", code, err, planErr)
	}
	if data, err := os.ReadFile(svg); err != nil || !strings.Contains(string(data), "verdict: UNSAFE: ") ||
		!strings.Contains(string(data), fmt.Sprintf("%d rows at risk", pl.Diff.Tables[0].Rows.AtRisk)) || pl.Diff.Tables[0].Rows.AtRisk == 0 {
		t.Fatalf("plan --picture: %v\n%.600s", err, data)
	}
	// Nothing to do is a plan with no changes.
	run(0, "plan", cfgDir+"small.json")
	if out := run(0, "plan", cfgDir+"small.json", "--director-config", cfgDir+"director.conf"); !strings.Contains(out, "director config: unchanged") {
		t.Fatalf("plan with the live director config: %s", out)
	}

	// Invalid input changes nothing.
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"tables": [{"hash_key": "x"}]}`), 0o644)
	if out := run(1, "apply", bad, "--yes"); !strings.Contains(out, "tables[0].hash_key") {
		t.Fatalf("bad apply: %s", out)
	}
	if out := run(1, "apply", cfgDir+"ipv6.json", "--yes"); !strings.Contains(out, "a table's backends are one family") {
		t.Fatalf("mixed backend families: %s", out)
	}
	if out := run(1, "apply", cfgDir+"small-draining.json"); !strings.Contains(out, "pass --yes") {
		t.Fatalf("config without --yes: %s", out)
	}
	if got := liveFingerprints(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after refused applies, live %v, want %v", got, want)
	}

	// Unsafe changes need --allow-unsafe.
	if out := run(1, "apply", twoHops, "--yes"); !strings.Contains(out, "rows at risk") {
		t.Fatalf("unsafe apply: %s", out)
	}
	run(0, "apply", twoHops, "--yes", "--allow-unsafe")
	src, _ = config.Load(cfgDir + "small-removed.json")
	if got := liveFingerprints(t, dir); got[0] != "api="+table.Fingerprint(src.Tables[0]) {
		t.Fatalf("after unsafe apply, live %v", got)
	}

	// Counters, once and watched.
	var st loader.Stats
	if err := json.Unmarshal([]byte(run(0, "stats", "--json")), &st); err != nil || len(st.Tables) != 1 {
		t.Fatalf("stats --json: %v %+v", err, st)
	}
	if out := run(0, "stats", "--watch", "--interval", "10ms", "--count", "2"); strings.Count(out, "processed") != 2 {
		t.Fatalf("stats --watch: %s", out)
	}
	// Every counter's value ends in one column (issue 47, item 12: the
	// quic_fallback_* lines did not).
	end := -1
	for _, l := range strings.Split(run(0, "stats"), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 || strings.HasPrefix(l, " ") {
			continue
		}
		if e := len(strings.TrimRight(l, " ")); end < 0 {
			end = e
		} else if e != end {
			t.Errorf("stats: %q's value ends at column %d, the first line's at %d", f[0], e, end)
		}
	}
	if end < 0 {
		t.Error("stats printed no counter lines")
	}

	if out := run(1, "attach", "nosuch0"); !strings.Contains(out, "no interface nosuch0 in this network namespace") {
		t.Fatalf("attach of an interface this namespace lacks: %s", out)
	}
	// Detaching what is not attached is an error naming what is; unloading
	// twice is a no-op.
	if out := run(1, "detach", "lo"); !strings.Contains(out, "lo is not attached: nothing is attached here") {
		t.Fatalf("detach of what is not attached: %s", out)
	}
	run(0, "unload")
	run(0, "unload")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("unload left %s", dir)
	}
}

// backendRig runs f in a network namespace of its own with a veth pair
// bk0/bk1, b the backend command's start with a pin directory of the
// test's; the test fails with f's error.
func backendRig(t *testing.T, f func(b []string) error) {
	t.Helper()
	testenv.Kernel(t)
	dir := bpffsDir(t) + "-backend"
	t.Cleanup(func() { loader.Unload(dir) })
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("bk0", "bk1"); err != nil {
			return err
		}
		return f([]string{"backend", "--backend-bpffs", dir})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBackendCommands(t *testing.T) {
	backendRig(t, func(b []string) error {
		dir := b[2]
		if _, errOut, code := runCmd(append(b, "status")...); code != 1 || !strings.Contains(errOut, "no backend program is loaded") {
			return fmt.Errorf("status before attach: %d %s", code, errOut)
		}
		// --trust as an operator might write it wrong: refused, nothing loaded.
		for bad, want := range map[string]string{
			"192.0.2.1,frob":   `--trust: "frob": not an address or a prefix`,
			"192.0.2.1/16":     `--trust: "192.0.2.1/16": has bits set past its length (192.0.0.0/16?)`,
			"::ffff:192.0.2.1": `--trust: "::ffff:192.0.2.1": give an IPv4-mapped address as IPv4`,
		} {
			if _, errOut, code := runCmd(append(b, "attach", "bk0", "--mode", "generic", "--trust", bad)...); code != 1 || !strings.Contains(errOut, want) {
				return fmt.Errorf("attach --trust %s: %d %s", bad, code, errOut)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				return fmt.Errorf("attach --trust %s left %s (%v)", bad, dir, err)
			}
		}
		// No list: nothing is sent on, and attach says so.
		out, errOut, code := runCmd(append(b, "attach", "bk0", "--self", "192.0.2.9", "--mode", "generic")...)
		if code != 0 || !strings.Contains(errOut, "second chance is off: no directors and backends listed to trust (--trust)") ||
			strings.Contains(errOut, "forwarding is off") {
			return fmt.Errorf("attach with no --trust: %d %s %s", code, out, errOut)
		}
		if out, _, _ := runCmd(append(b, "status")...); !strings.Contains(out, "trusts nobody listed (--trust): GUE is taken from any source") ||
			!strings.Contains(out, "second chance OFF") {
			return fmt.Errorf("status with no --trust: %s", out)
		}
		out, errOut, code = runCmd(append(b, "attach", "bk0", "--self", "192.0.2.9", "--mode", "generic", "--trust", "192.0.2.0/24, 2001:db8::1")...)
		if code != 0 || !strings.Contains(out, "attached to bk0 in generic mode") || !strings.Contains(out, "192.0.2.9") ||
			!strings.Contains(out, "GUE taken from, and sent on to, only 192.0.2.0/24, 2001:db8::1/128") ||
			!strings.Contains(errOut, "net.ipv4.conf.bk0.forwarding is off") {
			return fmt.Errorf("attach: %d %s %s", code, out, errOut)
		}
		// --bpffs is the same directory as --backend-bpffs, before or
		// after the command; the two at odds are refused.
		for _, args := range [][]string{{"backend", "status", "--bpffs", dir}, {"--bpffs", dir, "backend", "status"}} {
			if out, errOut, code := runCmd(args...); code != 0 || !strings.Contains(out, "bk0") {
				return fmt.Errorf("%v: %d %s %s", args, code, out, errOut)
			}
		}
		// capture, too, after the directory's flags.
		for _, args := range [][]string{append(b, "capture", "--table", "x"), {"backend", "--bpffs=" + dir, "capture", "--table", "x"}} {
			if _, errOut, code := runCmd(args...); code != 1 || !strings.Contains(errOut, "--table and --backend are the director's") {
				return fmt.Errorf("%v: %d %s", args, code, errOut)
			}
		}
		if _, errOut, code := runCmd("backend", "status", "--bpffs", dir, "--backend-bpffs", dir+"-other"); code != 1 || !strings.Contains(errOut, "give one") {
			return fmt.Errorf("--bpffs and --backend-bpffs at odds: %d %s", code, errOut)
		}
		out, _, code = runCmd(append(b, "status", "--json")...)
		var doc struct {
			Attachments []loader.Attachment `json:"attachments"`
			Counters    map[string]uint64   `json:"counters"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Attachments) != 1 || doc.Attachments[0].Mode != "generic" {
			return fmt.Errorf("status: %d %s", code, out)
		}
		if _, ok := doc.Counters["forwarded"]; !ok {
			return fmt.Errorf("status counters: %v", doc.Counters)
		}
		if out, _, _ := runCmd(append(b, "status")...); !strings.Contains(out, "accepts GUE for 192.0.2.9") || !strings.Contains(out, "second chance on") ||
			!strings.Contains(out, "trusts 192.0.2.0/24, 2001:db8::1/128: GUE is taken only from them, and sent on only to them") {
			return fmt.Errorf("status lacks the accepted addresses or second chance: %s", out)
		}
		// The operator's switch for second chance, and back.
		if _, errOut, code := runCmd(append(b, "attach", "bk0", "--self", "192.0.2.9", "--mode", "generic", "--no-second-chance", "--trust", "192.0.2.0/24")...); code != 0 ||
			!strings.Contains(errOut, "second chance is off") {
			return fmt.Errorf("attach --no-second-chance: %d %s", code, errOut)
		}
		if out, _, _ := runCmd(append(b, "status")...); !strings.Contains(out, "second chance OFF") {
			return fmt.Errorf("status after --no-second-chance: %s", out)
		}
		runCmd(append(b, "attach", "bk0", "--self", "192.0.2.9", "--mode", "generic", "--trust", "192.0.2.0/24")...)
		if out, _, _ := runCmd(append(b, "status")...); !strings.Contains(out, "second chance on") {
			return fmt.Errorf("status after attaching again: %s", out)
		}
		if out, errOut, code := runCmd(append(b, "detach", "bk0x")...); code != 1 || !strings.Contains(errOut, "bk0x is not attached: bk0 (attached) is attached here") {
			return fmt.Errorf("detach of a typo: %d %s %s", code, out, errOut)
		}
		if out, errOut, code := runCmd(append(b, "detach", "bk0")...); code != 0 || !strings.Contains(out, "backend unload") {
			return fmt.Errorf("detach: %d %s %s", code, out, errOut)
		}
		if _, errOut, code := runCmd(append(b, "detach", "bk0")...); code != 1 || !strings.Contains(errOut, "bk0 is not attached: nothing is attached here") {
			return fmt.Errorf("detach twice: %d %s", code, errOut)
		}
		// unload removes everything, and twice is fine too.
		for i := 0; i < 2; i++ {
			if out, errOut, code := runCmd(append(b, "unload")...); code != 0 {
				return fmt.Errorf("unload: %d %s %s", code, out, errOut)
			}
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			return fmt.Errorf("backend unload left %s (%v)", dir, err)
		}
		if _, errOut, code := runCmd(append(b, "frobnicate")...); code != 1 || !strings.Contains(errOut, "want attach IFACE, detach IFACE, unload, status, capture, explain, doctor or run") {
			return fmt.Errorf("bad subcommand: %d %s", code, errOut)
		}
		return nil
	})
}

// TestPlanAndApplyGLBBinary: plan and apply take the GLB binaries that
// show and diff read, and the plan carries the binary as reviewed.
func TestPlanAndApplyGLBBinary(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	tmp := t.TempDir()
	bin, plan := filepath.Join(tmp, "small.bin"), filepath.Join(tmp, "plan.json")
	mustRun(t, 0, "build", cfgDir+"small.json", "-o", bin)
	mustRun(t, 0, "--bpffs", dir, "load")
	mustRun(t, 2, "--bpffs", dir, "plan", bin, "-o", plan)
	os.Remove(bin) // the plan holds what was reviewed
	if out := mustRun(t, 0, "--bpffs", dir, "apply", plan); !strings.Contains(out, "applied 1 tables") {
		t.Fatalf("apply: %s", out)
	}
	src, _ := config.Load(cfgDir + "small.json")
	if got := liveFingerprints(t, dir); len(got) != 1 || got[0] != "="+table.Fingerprint(src.Tables[0]) {
		t.Fatalf("live %v, want the binary's table", got)
	}
}

// TestDirectorConfigIsPlanned: director config changes go through the
// plan, each with a verdict, and only plan and apply make them.
func TestDirectorConfigIsPlanned(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	tmp := t.TempDir()
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	conf := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const base = `"outbound_src_ip": "192.0.2.1", "outbound_gateway_mac": "02:00:00:00:00:03"`
	live := func() string {
		var doc statusDoc
		if err := json.Unmarshal([]byte(run(0, "status", "--json")), &doc); err != nil || doc.Config == nil {
			t.Fatalf("status: %v %+v", err, doc)
		}
		return fmt.Sprintf("%s %s %s %s", doc.Config.GatewayMAC, doc.Config.SourceIP, doc.Config.HashFields, doc.Config.AltHashFields)
	}
	run(0, "load")
	run(0, "apply", cfgDir+"small.json", "--yes", "--director-config", cfgDir+"director.conf")
	want := "02:00:00:00:00:03 192.0.2.1 src_addr none"
	if got := live(); got != want {
		t.Fatalf("live config %q, want %q", got, want)
	}

	// New hash fields rehash every flow: unsafe, refused, nothing changed.
	rehash := conf("rehash.conf", `{`+base+`, "hash_fields": {"src_addr": true, "src_port": true}}`)
	plan := filepath.Join(tmp, "plan.json")
	out := run(2, "plan", cfgDir+"small.json", "--director-config", rehash, "-o", plan)
	for _, s := range []string{"hash_fields                  src_addr -> src_addr+src_port", "UNSAFE: every flow hashes to a new row",
		"set alt_hash_fields to the old fields (src_addr)", "verdict: UNSAFE",
		"apply it with: director apply " + plan + " --bpffs " + dir + " --allow-unsafe"} {
		if !strings.Contains(out, s) {
			t.Errorf("plan of a rehash lacks %q:\n%s", s, out)
		}
	}
	if out := run(1, "apply", cfgDir+"small.json", "--yes", "--director-config", rehash); !strings.Contains(out, "unsafe change refused") {
		t.Fatalf("unsafe apply: %s", out)
	}
	if out := run(1, "apply", plan); !strings.Contains(out, "unsafe change refused") {
		t.Fatalf("unsafe plan: %s", out)
	}
	if got := live(); got != want {
		t.Fatalf("after refused applies, live config %q, want %q", got, want)
	}

	// GLB's migration path: the old fields as alt_hash_fields.
	migrate := conf("migrate.conf", `{`+base+`, "hash_fields": {"src_addr": true, "src_port": true}, "alt_hash_fields": {"src_addr": true}}`)
	if out := run(2, "plan", cfgDir+"small.json", "--director-config", migrate, "-o", plan); !strings.Contains(out, "verdict: safe") ||
		!strings.Contains(out, "GLB's migration path") {
		t.Fatalf("plan of a migration: %s", out)
	}
	run(0, "apply", plan)
	want = "02:00:00:00:00:03 192.0.2.1 src_addr+src_port src_addr"
	if got := live(); got != want {
		t.Fatalf("after the migration, live config %q, want %q", got, want)
	}

	// A new gateway MAC is unsafe.
	gw := conf("gw.conf", `{"outbound_src_ip": "192.0.2.1", "outbound_gateway_mac": "02:00:00:00:00:04", "hash_fields": {"src_addr": true, "src_port": true}, "alt_hash_fields": {"src_addr": true}}`)
	if out := run(2, "plan", cfgDir+"small.json", "--director-config", gw); !strings.Contains(out, "outbound_gateway_mac         02:00:00:00:00:03 -> 02:00:00:00:00:04") ||
		!strings.Contains(out, "UNSAFE: every GUE packet goes to the new next hop") {
		t.Fatalf("plan of a new gateway: %s", out)
	}
	// A plan made against another director config is stale.
	run(2, "plan", cfgDir+"small.json", "--director-config", gw, "-o", plan)
	run(0, "apply", cfgDir+"small.json", "--yes", "--director-config", cfgDir+"director.conf", "--allow-unsafe")
	if out := run(1, "apply", plan, "--allow-unsafe"); !strings.Contains(out, "what is live changed since the plan was made") {
		t.Fatalf("stale director config plan: %s", out)
	}

	// load never changes it; it says whether the file is what is live.
	if out := run(1, "load", "--director-config", gw); !strings.Contains(out, "load does not change the director config") ||
		!strings.Contains(out, "director plan CONFIG --director-config "+gw+" -o plan.json --bpffs "+dir) {
		t.Fatalf("load with another director config: %s", out)
	}
	if out := run(0, "load", "--director-config", cfgDir+"director.conf"); !strings.Contains(out, "the live one is") {
		t.Fatalf("load with the live director config: %s", out)
	}
	if got, want := live(), "02:00:00:00:00:03 192.0.2.1 src_addr none"; got != want {
		t.Fatalf("live config %q, want %q", got, want)
	}

	// No MAC and no interface to resolve one from: an error, never a guess
	// from this namespace's default route.
	nomac := conf("nomac.conf", `{"outbound_src_ip": "192.0.2.1"}`)
	if out := run(1, "plan", cfgDir+"small.json", "--director-config", nomac); !strings.Contains(out, nomac+": outbound_gateway_mac is not set: set it, or set outbound_interface") {
		t.Fatalf("plan without a MAC: %s", out)
	}
}

// TestLoadUnderIPNetnsExec: 'ip netns exec' gives each command a private
// mount namespace, where a bpffs load would mount vanishes with the
// command. load refuses and says what to do; status says why it sees
// nothing; nsenter --net, which keeps the host's mounts, works.
func TestLoadUnderIPNetnsExec(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	ns := "director-" + filepath.Base(dir)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out, err := asDirector("ip", "netns", "exec", ns, exe, "--bpffs", dir, "load").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "this command runs in a private mount namespace (as 'ip netns exec' gives every command)") ||
		!strings.Contains(string(out), "nsenter --net=/run/netns/NAME director") {
		t.Fatalf("load under ip netns exec: %v\n%s", err, out)
	}
	// A bpffs mounted inside that namespace goes with it as well.
	out, err = asDirector("ip", "netns", "exec", ns, "sh", "-c", "mount -t bpf bpf /sys/fs/bpf && exec \"$0\" \"$@\"",
		exe, "--bpffs", dir, "load").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "where /sys/fs/bpf is a bpf filesystem the host does not see") {
		t.Fatalf("load into a bpffs mounted under ip netns exec: %v\n%s", err, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused load left %s on the host (%v)", dir, err)
	}
	// nsenter --net keeps the host's mounts: the pins outlive the command.
	if out, err := asDirector("nsenter", "--net=/run/netns/"+ns, exe, "--bpffs", dir, "load").CombinedOutput(); err != nil {
		t.Fatalf("load under nsenter: %v\n%s", err, out)
	}
	mustRun(t, 0, "--bpffs", dir, "status")
	out, err = asDirector("ip", "netns", "exec", ns, exe, "--bpffs", dir, "status").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no director is loaded there: this command runs in a private mount namespace") {
		t.Fatalf("status under ip netns exec: %v\n%s", err, out)
	}
}

// TestStatsShowsInterfaceDrops: a veth whose peer runs no XDP program
// drops every frame the director sends back with XDP_TX. The program
// counts them encapsulated; stats and status show the interface's drops
// beside that. stats --watch --json gives one versioned, timestamped
// document per line.
func TestStatsShowsInterfaceDrops(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	err := testrun.InNetns(func() error {
		if err := testrun.Veth("drop0", "drop1"); err != nil {
			return err
		}
		b := []string{"--bpffs", dir}
		for _, args := range [][]string{{"load"}, {"apply", cfgDir + "small.json", "--yes", "--director-config", cfgDir + "director.conf"}} {
			if out, errOut, code := runCmd(append(b, args...)...); code != 0 {
				return fmt.Errorf("%v: %s%s", args, out, errOut)
			}
		}
		// Native on a veth whose peer runs no XDP program: warned of.
		if _, errOut, code := runCmd(append(b, "attach", "drop0", "--mode", "native")...); code != 0 ||
			!strings.Contains(errOut, "warning: drop0 is a veth in native mode whose peer runs no XDP program") {
			return fmt.Errorf("attach native: %d %s", code, errOut)
		}
		sock, err := testrun.Listen("drop1")
		if err != nil {
			return err
		}
		defer sock.Close()
		frame := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("10.10.10.10"), 6, pkt.TCP(40000, 80, 0x02, nil), pkt.V4Opts{}))
		for i := 0; i < 20; i++ {
			if err := sock.Send(frame); err != nil {
				return err
			}
		}
		time.Sleep(100 * time.Millisecond)
		out, errOut, code := runCmd(append(b, "stats", "--json")...)
		var st loader.Stats
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
			return fmt.Errorf("stats --json: %d %s %s", code, out, errOut)
		}
		if st.Version != 1 || st.Time.IsZero() || st.Global["encapsulated"] < 20 || len(st.Interfaces) != 1 ||
			st.Interfaces[0].Interface != "drop0" || st.Interfaces[0].TxDropped < 20 {
			return fmt.Errorf("stats: %+v", st)
		}
		// Once, the count says since when; watched, drops are flagged only
		// while they happen.
		if out, _, _ := runCmd(append(b, "stats")...); !strings.Contains(out, "interface drop0: rx ") ||
			!strings.Contains(out, "frames dropped on their way out since the interface came up") || strings.Contains(out, "  !") {
			return fmt.Errorf("stats text: %s", out)
		}
		if out, _, _ := runCmd(append(b, "stats", "--watch", "--interval", "50ms", "--count", "2")...); strings.Contains(out, "  !") {
			return fmt.Errorf("stats --watch with no new drops flags some: %s", out)
		}
		// Frames keep coming for the whole watch, so that drops fall between
		// its two looks however long a slow guest takes to start it.
		sending := make(chan struct{})
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for {
				select {
				case <-sending:
					return
				case <-time.After(20 * time.Millisecond):
					sock.Send(frame)
				}
			}
		}()
		watched, _, _ := runCmd(append(b, "stats", "--watch", "--interval", "400ms", "--count", "2")...)
		close(sending)
		<-sent
		if !strings.Contains(watched, "frames dropped on their way out in the last") {
			return fmt.Errorf("stats --watch with new drops: %s", watched)
		}
		// Switching modes is one command, which says what it did.
		if out, errOut, code := runCmd(append(b, "attach", "drop0", "--mode", "generic")...); code != 0 ||
			!strings.Contains(out, "switched drop0 from native to generic mode") || !strings.Contains(out, "it ran no program for") {
			return fmt.Errorf("attach --mode generic over native: %d %s %s", code, out, errOut)
		}
		if out, _, _ := runCmd(append(b, "status")...); !strings.Contains(out, "drop0, generic mode") {
			return fmt.Errorf("status after the switch: %s", out)
		}
		var doc statusDoc
		out, _, _ = runCmd(append(b, "status", "--json")...)
		if json.Unmarshal([]byte(out), &doc) != nil || len(doc.Interfaces) != 1 || doc.Interfaces[0].TxDropped < 20 {
			return fmt.Errorf("status: %s", out)
		}
		out, _, code = runCmd(append(b, "stats", "--watch", "--json", "--interval", "10ms", "--count", "2")...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 2 {
			return fmt.Errorf("stats --watch --json: %d lines: %s", len(lines), out)
		}
		for _, l := range lines {
			var st loader.Stats
			if err := json.Unmarshal([]byte(l), &st); err != nil || st.Version != 1 || st.Time.IsZero() {
				return fmt.Errorf("stats --watch --json line %q: %v", l, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkUnprivileged runs this test binary as director with args, as root
// without any capability (root's euid is kept, as a sandbox might, so it
// is the errors that must tell): setpriv empties the bounding set, so that
// exec gives root none, in every thread. It checks the command said it
// needs root or CAP_BPF, and that --model does not.
func checkUnprivileged(t *testing.T, args ...string) {
	t.Helper()
	cmd := asDirector("setpriv", append([]string{"--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--", os.Args[0]}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	errOut := stderr.String()
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(errOut, "needs root, or CAP_BPF") || !strings.Contains(errOut, "--model") ||
		strings.Contains(errOut, "MEMLOCK") {
		t.Fatalf("without capabilities: exit %d: %s", cmd.ProcessState.ExitCode(), errOut)
	}
}

// TestLookupMatchesTheKernel: for 10,000 random flows, 'show --lookup'
// with a director config whose hash takes ports (and an alternate hash)
// names the hops the program in the kernel puts on the wire: the outer
// destination, and the GUE hop list.
func TestLookupMatchesTheKernel(t *testing.T) {
	testenv.Kernel(t)
	src, err := config.Load(cfgDir + "medium.json")
	if err != nil {
		t.Fatal(err)
	}
	dc := table.DefaultDirectorConfig()
	dc.SrcIP = netip.MustParseAddr("192.0.2.1")
	dc.GatewayMAC = net.HardwareAddr{2, 0, 0, 0, 0, 3}
	dc.HashFields = table.HashSrcAddr | table.HashSrcPort
	dc.AltHashFields = table.HashSrcAddr | table.HashDstAddr | table.HashDstPort
	d, err := loader.Private(&dc, src.Tables)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	testenv.Hold(t, d.Prog)
	type bind struct {
		vip  netip.Addr
		port uint16
	}
	var binds []bind
	for _, tb := range src.Tables {
		for _, b := range tb.Binds {
			if b.Proto == 6 && b.Prefix.IsSingleIP() {
				binds = append(binds, bind{b.Prefix.Addr(), b.PortStart})
			}
		}
	}
	rng := rand.New(rand.NewPCG(4, 5))
	for i := 0; i < testenv.Reduced(10000); i++ {
		b := binds[rng.IntN(len(binds))]
		var client netip.Addr
		if b.vip.Is4() {
			client = netip.AddrFrom4([4]byte{198, 51, byte(rng.Uint32()), byte(rng.Uint32())})
		} else {
			var a [16]byte
			a[0], a[1] = 0x20, 0x01
			for j := 2; j < 16; j++ {
				a[j] = byte(rng.Uint32())
			}
			client = netip.AddrFrom16(a)
		}
		cport := uint16(1024 + rng.IntN(60000))
		var frame []byte
		if b.vip.Is4() {
			frame = pkt.Frame(pkt.IPv4(client, b.vip, 6, pkt.TCP(cport, b.port, 0x10, nil), pkt.V4Opts{}))
		} else {
			frame = pkt.Frame(pkt.IPv6(client, b.vip, 6, pkt.TCP(cport, b.port, 0x10, nil)))
		}
		verdict, out, err := testrun.Run(d.Prog, frame)
		if err != nil || verdict != 3 {
			t.Fatalf("flow %d: verdict %d, %v", i, verdict, err)
		}
		hop := func(off int) string { a, _ := netip.AddrFromSlice(out[off : off+4]); return a.String() }
		kernel := [4]string{hop(14 + 16), hop(50), hop(54), hop(58)} // outer destination, then the GUE hop list
		ls, err := lookupAll(src.Tables, &dc, netip.AddrPortFrom(client, cport).String(), netip.AddrPortFrom(b.vip, b.port).String(), 6)
		if err != nil {
			t.Fatal(err)
		}
		l := ls[0]
		if got := [4]string{l.Primary, l.Secondary, l.AltPrimary, l.AltSecondary}; got != kernel {
			t.Fatalf("flow %d (%s:%d to %s:%d): lookup %v, kernel %v", i, client, cport, b.vip, b.port, got, kernel)
		}
	}
}

// TestLoadRefusesAPinDirectoryOthersControl: a pin directory another user
// owns, or others may write, is refused with the way out: whoever can
// write it could move pins under root's director.
func TestLoadRefusesAPinDirectoryOthersControl(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, 1, "load", "--bpffs", dir); !strings.Contains(out, "belongs to uid 65534, not this user (uid 0)") {
		t.Fatalf("load into another user's directory: %s", out)
	}
	os.Chown(dir, 0, 0)
	os.Chmod(dir, 0o777)
	if out := mustRun(t, 1, "load", "--bpffs", dir); !strings.Contains(out, "is writable by group or others (mode 0777)") {
		t.Fatalf("load into a world-writable directory: %s", out)
	}
	os.Chmod(dir, 0o700)
	mustRun(t, 0, "load", "--bpffs", dir)
}

// TestPlanEditsAreCaught: a plan covers everything apply writes: an edit
// of its director config is refused like an edit of its tables; its pin
// directory is compared as a file (a trailing slash is the same one); and
// a plan cut short is called broken, not taken for a config.
func TestPlanEditsAreCaught(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	mustRun(t, 0, "load", "--bpffs", dir)
	plan := filepath.Join(t.TempDir(), "plan.json")
	mustRun(t, 2, "plan", cfgDir+"small.json", "--director-config", cfgDir+"director.conf", "-o", plan, "--bpffs", dir)
	data, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	edited := filepath.Join(t.TempDir(), "edited.json")
	os.WriteFile(edited, bytes.Replace(data, []byte(`"outbound_src_ip": "192.0.2.1"`), []byte(`"outbound_src_ip": "192.0.2.99"`), 1), 0o600)
	if bytes.Equal(mustReadFile(t, edited), data) {
		t.Fatal("the edit did not take")
	}
	if out := mustRun(t, 1, "apply", edited, "--bpffs", dir); !strings.Contains(out, "the plan's seal does not check out") {
		t.Fatalf("an edited director config: %s", out)
	}
	// Sealed again with the host's key: held to the change it shows.
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(mustReadFile(t, edited), &doc); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(edited, resealPlan(t, doc), 0o600)
	if out := mustRun(t, 1, "apply", edited, "--bpffs", dir); !strings.Contains(out, "not the change it shows for review") {
		t.Fatalf("an edited director config, sealed again: %s", out)
	}
	cut := filepath.Join(t.TempDir(), "cut.json")
	os.WriteFile(cut, data[:len(data)/2], 0o600)
	if out := mustRun(t, 1, "apply", cut, "--bpffs", dir); !strings.Contains(out, "a broken plan") || strings.Contains(out, "is a config") {
		t.Fatalf("a plan cut short: %s", out)
	}
	if out := mustRun(t, 0, "apply", plan, "--bpffs", dir+"/"); !strings.Contains(out, "applied 1 tables") {
		t.Fatalf("the plan, its pins named with a trailing slash: %s", out)
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// weightConfig is a one-table config of 16 backends at weight 10000, the
// first two at w0 and w1, under seed, with extra table settings
// (history_hops, say).
func weightConfig(seed string, w0, w1 int, extra string) string {
	var bs []string
	for i := 0; i < 16; i++ {
		weight := 10000
		switch i {
		case 0:
			weight = w0
		case 1:
			weight = w1
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "192.168.60.%d", "state": "active", "healthy": true, "weight": %d}`, 10+i, weight))
	}
	return `{"tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "` + seed + `",` + extra + `
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}], "backends": [` + strings.Join(bs, ",\n") + `]}]}`
}

// TestPlanJudgesBySequence is the case two hops could not hold, through
// the commands: one backend's weight raised, then another's, each
// applied. A row the first moved reads [first, old primary]; the second
// moves it to [second, first], and the old primary's connections have
// nowhere to go. With the earlier primaries in the packets both plans
// count 0 rows at risk, and the second lists rows with an earlier primary
// after the secondary, until when; with GLB's two hops (history_hops
// false) the second counts them at risk, though against what is live
// alone it looks safe.
func TestPlanJudgesBySequence(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	tmp := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	seed := fmt.Sprintf("%032x", 1000)
	type doc struct {
		Safe bool `json:"safe"`
		Diff struct {
			Tables []struct {
				Rows struct {
					AtRisk int `json:"at_risk"`
				} `json:"rows"`
				History *table.HistoryDiff `json:"history"`
			} `json:"tables"`
		} `json:"diff"`
	}
	plan := func(code int, path string) doc {
		var d doc
		out := run(code, "plan", path, "--json")
		if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Diff.Tables) != 1 {
			t.Fatalf("plan --json %s: %v\n%s", path, err, out)
		}
		return d
	}
	for _, hops := range []string{"", `"history_hops": false,`} {
		run(0, "load")
		run(0, "apply", write("start.json", weightConfig(seed, 10000, 10000, hops)), "--yes")
		first := write("first.json", weightConfig(seed, 30000, 10000, hops))
		if d := plan(2, first); !d.Safe || d.Diff.Tables[0].Rows.AtRisk != 0 {
			t.Fatalf("%s: raising a weight: safe %v, %d at risk", hops, d.Safe, d.Diff.Tables[0].Rows.AtRisk)
		}
		run(0, "apply", first, "--yes")
		second := write("second.json", weightConfig(seed, 30000, 30000, hops))
		d := plan(2, second)
		h := d.Diff.Tables[0].History
		if hops == "" {
			if !d.Safe || d.Diff.Tables[0].Rows.AtRisk != 0 || h == nil || !h.Hops || h.HopRows == 0 || h.Until == nil {
				t.Fatalf("with history: safe %v, %d at risk, history %+v", d.Safe, d.Diff.Tables[0].Rows.AtRisk, h)
			}
			out := run(2, "plan", second)
			if !strings.Contains(out, "verdict: safe") || !strings.Contains(out, fmt.Sprintf("history: %d rows remember an earlier primary, until ", h.Rows)) {
				t.Fatalf("plan:\n%s", out)
			}
		} else if d.Safe || d.Diff.Tables[0].Rows.AtRisk == 0 || h == nil || h.Hops {
			t.Fatalf("with two hops: safe %v, %d at risk, history %+v", d.Safe, d.Diff.Tables[0].Rows.AtRisk, h)
		}
		run(0, "unload")
	}
}

// balancedConfig is a one-table config of n equal backends with a
// balance factor of 1.01; inactive names a backend (by position) to list
// inactive and without the factor, as a balance ramp's step is.
func balancedConfig(seed string, n, inactive int) string {
	var bs []string
	for i := 0; i < n; i++ {
		state := "active"
		if i == inactive {
			state = "inactive"
		}
		bs = append(bs, fmt.Sprintf(`{"ip": "192.168.63.%d", "state": "%s", "healthy": true}`, 10+i, state))
	}
	factor := `"balance_factor": 1.01,`
	if inactive >= 0 {
		factor = ""
	}
	return `{"tables": [{"name": "api", "hash_key": "12345678901234561234567890123456", "seed": "` + seed + `", ` + factor + `
	  "binds": [{"ip": "10.10.10.10", "proto": "tcp", "port": 80}], "backends": [` + strings.Join(bs, ",\n") + `]}]}`
}

// TestPlanAddsUnderABalanceFactor: adding a backend under a balance
// factor moves rows whose swapped-in primary the new backend displaces,
// which GLB's two hops cannot hold (history_hops false: unsafe); with
// the earlier primaries in the packets the add is safe and applied in one
// step.
func TestPlanAddsUnderABalanceFactor(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	tmp := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const n = 40
	seed := fmt.Sprintf("%032x", 3000)
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	run(0, "load")
	twoHops := strings.Replace(balancedConfig(seed, n, -1), `"balance_factor"`, `"history_hops": false, "balance_factor"`, 1)
	run(0, "apply", write("from.json", twoHops), "--yes")
	added := strings.Replace(balancedConfig(seed, n+1, -1), `"balance_factor"`, `"history_hops": false, "balance_factor"`, 1)
	if out := run(2, "plan", write("to.json", added)); !strings.Contains(out, "verdict: UNSAFE") || !strings.Contains(out, "rows at risk") {
		t.Fatalf("plan of an added backend under a balance factor, two hops:\n%s", out)
	}
	run(0, "apply", write("from.json", balancedConfig(seed, n, -1)), "--yes", "--allow-unsafe")
	with := write("with.json", balancedConfig(seed, n+1, -1))
	if out := run(2, "plan", with); !strings.Contains(out, "verdict: safe") {
		t.Fatalf("plan of an added backend under a balance factor, with history:\n%s", out)
	}
	run(0, "apply", with, "--yes")
}

// TestStatsShowsCaps: stats of a live table with a balance factor gives
// each backend's primary rows and cap as the table has them.
func TestStatsShowsCaps(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	run(0, "load")
	run(0, "apply", cfgDir+"small-balanced.json", "--yes")
	src, err := config.Load(cfgDir + "small-balanced.json")
	if err != nil {
		t.Fatal(err)
	}
	want := src.Tables[0]
	caps := table.Caps(want.Backends, want.Balance)
	prim := make([]int, len(want.Backends))
	for _, r := range want.Rows {
		prim[r.Primary]++
	}
	var doc loader.Stats
	if err := json.Unmarshal([]byte(run(0, "stats", "--json")), &doc); err != nil || len(doc.Tables) != 1 {
		t.Fatalf("stats --json: %v", err)
	}
	atCap := 0
	for j, b := range doc.Tables[0].Backends {
		if b.PrimaryRows != prim[j] || b.Cap != caps[j] || b.AtCap != (prim[j] >= caps[j]) {
			t.Errorf("%s: %d rows, cap %d, at cap %v; the table has %d, %d", b.IP, b.PrimaryRows, b.Cap, b.AtCap, prim[j], caps[j])
		}
		if b.AtCap {
			atCap++
		}
	}
	if atCap == 0 {
		t.Error("no backend at its cap: the test tests nothing")
	}
	if out := run(0, "stats"); !strings.Contains(out, fmt.Sprintf("cap %d (at cap)", caps[0])) {
		t.Errorf("stats does not show caps:\n%s", out)
	}
}

// TestStatsShowsQUICByConfig: a QUIC table's counters in stats are kept
// by the config its packets' IDs carry: one routed by the table's own
// config, a client's Initial of another config, one too short to read an
// ID from; the text and the JSON say the same.
func TestStatsShowsQUICByConfig(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	run(0, "load")
	run(0, "apply", cfgDir+"quic.json", "--director-config", cfgDir+"director.conf", "--yes")
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	vip := netip.MustParseAddr("10.10.10.10")
	send := func(payload []byte) {
		f := pkt.Frame(pkt.IPv4(netip.MustParseAddr("198.18.0.9"), vip, 17, pkt.UDP(40000, 443, payload), pkt.V4Opts{}))
		if _, _, err := testrun.Run(d.Prog, f); err != nil {
			t.Fatal(err)
		}
	}
	// quic.json: config 1, 2-byte server IDs, 6-byte nonces; 5e02 is an
	// active, healthy backend's.
	routed := append([]byte{0x40, 1<<5 | 8, 0x5e, 0x02}, make([]byte, 30)...)
	initial := append([]byte{0xc0, 0, 0, 0, 1, 8, 3 << 5}, make([]byte, 30)...)
	send(routed)
	send(routed)
	send(initial)
	send([]byte{0x40, 1})
	var doc loader.Stats
	if err := json.Unmarshal([]byte(run(0, "stats", "--json")), &doc); err != nil || len(doc.Tables) != 1 {
		t.Fatalf("stats --json: %v", err)
	}
	got := map[string]map[string]uint64{}
	for _, q := range doc.Tables[0].QUIC {
		name := "none"
		if q.ConfigID != nil {
			name = fmt.Sprint(*q.ConfigID)
		}
		got[name] = q.Counters
	}
	want := map[string]map[string]uint64{"1": {"quic_routed": 2}, "3": {"quic_fallback_other_config": 1}, "none": {"quic_fallback_short": 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) || doc.Tables[0].QUIC[0].ConfigID == nil || *doc.Tables[0].QUIC[0].ConfigID != 1 {
		t.Errorf("QUIC counters %v (the table's own config first), want %v", got, want)
	}
	out := run(0, "stats")
	for _, line := range []string{"QUIC config 1:  routed 2\n", "QUIC config 3:  fallback_other_config 1\n", "QUIC no ID read: fallback_short 1\n"} {
		if !strings.Contains(out, line) {
			t.Errorf("stats lacks %q:\n%s", line, out)
		}
	}
}

// TestApplyBalanceOnlyChange: a balance factor that moves no row is still
// applied (the kernel's table records it), and shown as a change.
func TestApplyBalanceOnlyChange(t *testing.T) {
	testenv.Kernel(t)
	dir := bpffsDir(t)
	run := func(code int, args ...string) string {
		return mustRun(t, code, append([]string{"--bpffs", dir}, args...)...)
	}
	run(0, "load")
	run(0, "apply", cfgDir+"small.json", "--yes")
	data, err := os.ReadFile(cfgDir + "small.json")
	if err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(t.TempDir(), "loose.json")
	if err := os.WriteFile(loose, []byte(strings.Replace(string(data), `"binds"`, `"balance_factor": 2, "binds"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := run(2, "plan", loose); !strings.Contains(out, "balance factor  none -> 2") {
		t.Fatalf("plan of a balance factor alone:\n%s", out)
	}
	run(0, "apply", loose, "--yes")
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	live, err := d.Live()
	if err != nil || len(live) != 1 || live[0].Table.Balance != 2000 {
		t.Fatalf("live: %v, balance %d", err, live[0].Table.Balance)
	}
	run(0, "plan", loose) // nothing left to do
}

// TestSingleBufferBuildCommands: the commands on the single-buffer build
// (DIRECTOR_BUILD, which the loader otherwise picks only on a kernel
// without multi-buffer XDP): load, apply and status, which names the build
// and what it does without. On a kernel that has multi-buffer XDP it says
// the kernel lacks nothing; the guests of 5.10 show the rest.
func TestSingleBufferBuildCommands(t *testing.T) {
	dir := bpffsDir(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	director := func(args ...string) string {
		t.Helper()
		cmd := asDirector(exe, append([]string{"--bpffs", dir}, args...)...)
		cmd.Env = append(cmd.Env, "DIRECTOR_BUILD=single-buffer")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("director %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	director("load")
	director("apply", cfgDir+"small.json", "--director-config", cfgDir+"director.conf", "--yes")
	out := director("status")
	if !strings.Contains(out, "build        single-buffer") || !strings.Contains(out, "no bpf_check_mtu: the too-big check uses outbound_mtu") ||
		!strings.Contains(out, "native mode needs an MTU of about 3,500 bytes or less") || !strings.Contains(out, "table        api ") {
		t.Fatalf("status on the single-buffer build:\n%s", out)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(director("status", "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Kernel == nil || doc.Kernel.Build != xdpbuild.SingleBuffer || len(doc.Kernel.Fallbacks) != 2 {
		t.Fatalf("status --json kernel: %+v", doc.Kernel)
	}
	// The program pinned is the other build's: not the one this process
	// loads on this kernel.
	other := bpffsDir(t)
	mustRun(t, 0, "--bpffs", other, "load")
	var mine statusDoc
	if err := json.Unmarshal([]byte(mustRun(t, 0, "--bpffs", other, "status", "--json")), &mine); err != nil {
		t.Fatal(err)
	}
	if cur, _ := xdpbuild.Current(); cur == xdpbuild.MultiBuffer && (doc.Program.Tag == "" || doc.Program.Tag == mine.Program.Tag) {
		t.Errorf("the single-buffer build's program has tag %q, the multi-buffer one's %q", doc.Program.Tag, mine.Program.Tag)
	}
}
