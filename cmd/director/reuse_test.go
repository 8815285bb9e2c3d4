package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/internal/change"
	"github.com/director/director/internal/lab/testenv"
	"github.com/director/director/loader"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

// drainedCopy writes medium.json with backend k of table i draining.
func drainedCopy(t *testing.T, i, k int) (string, *table.Config) {
	t.Helper()
	data, err := os.ReadFile(cfgDir + "medium.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	doc["tables"].([]any)[i].(map[string]any)["backends"].([]any)[k].(map[string]any)["state"] = "draining"
	out, _ := json.Marshal(doc)
	path := filepath.Join(t.TempDir(), "drained.json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return path, c
}

// resealPlan is a plan file of doc's members sealed again with the
// host's key (the tests' own), as only the host could: to reach what
// apply checks after the seal.
func resealPlan(t *testing.T, doc map[string]json.RawMessage) []byte {
	t.Helper()
	doc = maps.Clone(doc)
	delete(doc, "plan_seal")
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := planKey().SealPlanFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return sealed
}

// servingMedium loads a director serving medium.json into a directory of
// its own, unloaded when the test ends, and returns the directory and
// the --bpffs flag naming it.
func servingMedium(t *testing.T) (string, []string) {
	t.Helper()
	testenv.Kernel(t)
	dir := bpffsDir(t)
	b := []string{"--bpffs", dir}
	mustRun(t, 0, append(b, "load")...)
	t.Cleanup(func() { mustRun(t, 0, append(b, "unload")...) })
	mustRun(t, 0, append(b, "apply", cfgDir+"medium.json", "--yes", "--director-config", cfgDir+"director.conf")...)
	return dir, b
}

// liveRowFingerprints are the fingerprints of the tables live in dir, by
// name, computed from the rows read from the kernel (liveFingerprints,
// through status, may give what the registry claims).
func liveRowFingerprints(t *testing.T, dir string) map[string]string {
	t.Helper()
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, lt := range live {
		out[lt.Table.Name] = table.Fingerprint(lt.Table)
	}
	return out
}

// builtFingerprints are the fingerprints of c's tables built in full, by
// name.
func builtFingerprints(t *testing.T, c *table.Config) map[string]string {
	t.Helper()
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tb := range tabs {
		out[tb.Name] = table.Fingerprint(tb)
	}
	return out
}

// TestPlanAndApplyReuseLiveTables: plan and apply build only the tables a
// config changes; the others are the live ones, taken by their registry
// digest checked against their rows, and the result is what a full build
// makes. A tampered digest (the one the new config's table would record)
// does not make apply skip the table it lies about: it is built, written
// and read back.
func TestPlanAndApplyReuseLiveTables(t *testing.T) {
	dir, b := servingMedium(t)
	liveFPs := func() map[string]string { return liveRowFingerprints(t, dir) }
	full := func(c *table.Config) map[string]string { return builtFingerprints(t, c) }

	// One backend of "git" drained: web and dns are taken as they are.
	path, c := drainedCopy(t, 2, 0)
	plan := filepath.Join(t.TempDir(), "plan.json")
	if st := mustRunBuilt(t, 2, append(b, "plan", path, "-o", plan)...); st.Live != 2 || st.Full != 1 {
		t.Fatalf("plan took %d live tables (want 2: web, dns) and built %d (want 1)", st.Live, st.Full)
	}
	if st := mustRunBuilt(t, 0, append(b, "apply", plan)...); st.Live != 2 || st.Carried != 1 || st.Full != 0 {
		t.Fatalf("apply of the plan took %d live tables (want 2) and %d the plan built (want 1, git), and built %d", st.Live, st.Carried, st.Full)
	}
	want := full(c)
	if got := liveFPs(); got["git"] != want["git"] || got["web"] != want["web"] || got["dns"] != want["dns"] {
		t.Fatalf("live %v, a full build %v", got, want)
	}

	// Tamper: web's registry says it was built from a config whose web
	// differs, with the digest that config's web would record.
	path2, c2 := drainedCopy(t, 0, 3)
	tabs2, err := table.BuildAll(c2)
	if err != nil {
		t.Fatal(err)
	}
	d, err := loader.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	live, err := d.Live()
	if err != nil {
		t.Fatal(err)
	}
	for _, lt := range live {
		if lt.Table.Name != "web" {
			continue
		}
		var reg abi.Registry
		if err := d.Maps.Registry.Lookup(uint32(lt.Slot), &reg); err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(reg.Fingerprint[:]) != table.Fingerprint(lt.Table) {
			t.Fatal("the registry's fingerprint is not the table's")
		}
		reg.Digest = tabs2[0].Digest
		if err := d.Maps.Registry.Put(uint32(lt.Slot), &reg); err != nil {
			t.Fatal(err)
		}
	}
	d.Close()
	if st := mustRunBuilt(t, 0, append(b, "apply", path2, "--yes")...); st.Live != 1 { // dns; not git (its drain is undone) nor web
		t.Fatalf("apply took %d live tables, want 1 (dns): the tampered web was skipped?", st.Live)
	}
	want2 := full(c2)
	if got := liveFPs(); got["web"] != want2["web"] || got["git"] != want2["git"] || got["dns"] != want2["dns"] {
		t.Fatalf("after the tampered registry: live %v, a full build %v", got, want2)
	}
}

// TestApplyTakesOnlyTheReviewedChange: a plan whose config was edited
// after review (a bind added, so the tables' rows are the same) is
// refused, and nothing changes: by its seal, also with the diff edited to
// match (issue 46, item 7), and, sealed again with the host's key, by the
// diff it must make; rows forged in the file with the digest
// the file's own seed makes for them are not taken (their seal, the
// host's, does not check out): what is live after applying such a plan
// is what a full build of its config makes, and plan then says so.
func TestApplyTakesOnlyTheReviewedChange(t *testing.T) {
	dir, b := servingMedium(t)
	path, c := drainedCopy(t, 2, 0)
	plan := filepath.Join(t.TempDir(), "plan.json")
	mustRun(t, 2, append(b, "plan", path, "-o", plan)...)
	data, err := os.ReadFile(plan)
	if err != nil {
		t.Fatal(err)
	}
	before := liveRowFingerprints(t, dir)

	// The config edited in the file: a bind added to git.
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(doc["config"], &cfg); err != nil {
		t.Fatal(err)
	}
	git := cfg["tables"].([]any)[2].(map[string]any)
	git["binds"] = append(git["binds"].([]any), map[string]any{"ip": "0.0.0.0/1", "proto": "tcp", "port": 22})
	doc["config"], _ = json.Marshal(cfg)
	refused := func(what string, edited []byte, want string) {
		t.Helper()
		if err := os.WriteFile(plan+".edited", edited, 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runCmd(append(b, "apply", plan+".edited")...)
		if code != 1 || !strings.Contains(errOut, want) {
			t.Fatalf("apply of a plan with %s: exit %d (want 1 and %q): %s", what, code, want, errOut)
		}
		if got := liveRowFingerprints(t, dir); !maps.Equal(got, before) {
			t.Fatalf("a refused plan (%s) changed what is live: %v, was %v", what, got, before)
		}
	}
	edited, _ := json.Marshal(doc)
	refused("its config edited", edited, "the plan is not sealed")
	// Issue 46, item 7: the diff edited to show the bind too.
	configOnly := maps.Clone(doc)
	var d struct {
		Tables []map[string]any `json:"tables"`
	}
	var dd map[string]any
	if json.Unmarshal(doc["diff"], &d) != nil || json.Unmarshal(doc["diff"], &dd) != nil {
		t.Fatal("the plan's diff does not decode")
	}
	found := false
	for _, td := range d.Tables {
		if td["name"] == git["name"] {
			added, _ := td["binds_added"].([]any)
			td["binds_added"], found = append(added, "tcp 0.0.0.0/1:22"), true
		}
	}
	if !found {
		t.Fatalf("no table %v in the plan's diff", git["name"])
	}
	dd["tables"] = d.Tables
	doc["diff"], _ = json.Marshal(dd)
	edited, _ = json.Marshal(doc)
	refused("its config and diff edited together", edited, "the plan is not sealed")
	delete(doc, "plan_seal")
	indented, _ := json.MarshalIndent(doc, "", "  ")
	edited, err = table.Sealer(bytes.Repeat([]byte{1}, 32)).SealPlanFile(indented)
	if err != nil {
		t.Fatal(err)
	}
	refused("both edited and sealed with another key", edited, "the plan's seal does not check out")
	// Sealed again with the host's key, as only the host can: the config
	// is still held to the diff.
	refused("its config edited and sealed again", resealPlan(t, configOnly), "does not make the change the plan shows")

	// Rows forged for git, with the digest its config's seed makes, in
	// the field plans once carried them in.
	tabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	git0 := tabs[2]
	rows := slices.Clone(git0.Rows)
	rows[777].Primary = (rows[777].Primary + 1) % uint32(len(git0.Backends))
	forged := &table.Table{Name: git0.Name, HashKey: git0.HashKey, Binds: git0.Binds, Backends: git0.Backends, Rows: rows, Balance: git0.Balance}
	raw := make([]byte, 0, 2*len(rows))
	for _, r := range rows {
		raw = append(raw, byte(r.Primary), byte(r.Secondary))
	}
	dg := table.InputDigest(&c.Tables[2], rows, table.Fingerprint(forged))
	doc = nil
	if err := json.Unmarshal(data, &doc); err != nil { // the plan as made
		t.Fatal(err)
	}
	var built []table.BuiltRows
	if err := json.Unmarshal(doc["built"], &built); err != nil || len(built) != 1 {
		t.Fatalf("the plan carries %d built tables (want 1, git): %v", len(built), err)
	}
	built[0].Rows, built[0].Digest = raw, hex.EncodeToString(dg[:]) // the seal kept: the one for git's real rows
	doc["built"], _ = json.Marshal(built)
	if err := os.WriteFile(plan, resealPlan(t, doc), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := mustRunBuilt(t, 0, append(b, "apply", plan)...); st.Carried != 0 || st.Live != 2 {
		t.Fatalf("apply took %d tables from the forged plan (want 0) and %d live (want 2)", st.Carried, st.Live)
	}
	if got, want := liveRowFingerprints(t, dir), builtFingerprints(t, c); !maps.Equal(got, want) {
		t.Errorf("live %v is not what a full build makes, %v", got, want)
	}
	mustRun(t, 0, append(b, "plan", path)...)
}

// TestDiffReusesTheOtherSide: diff builds OLD, and of NEW only the tables
// whose inputs differ; what it reports is what two full builds compare to.
func TestDiffReusesTheOtherSide(t *testing.T) {
	path, c := drainedCopy(t, 2, 0)
	out, errOut, code, st := runCmdBuilt("diff", cfgDir+"medium.json", path, "--json", "--all")
	if code != exitChanges || st.Other != 2 || st.Full != 4 {
		t.Fatalf("diff: exit %d, took %d of OLD's tables (want 2), built %d (want 4)\n%s", code, st.Other, st.Full, errOut)
	}
	oldSrc, err := config.Load(cfgDir + "medium.json")
	if err != nil {
		t.Fatal(err)
	}
	newTabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.MarshalIndent(table.Compare(oldSrc.Tables, newTabs), "", "  ")
	var got, wantDoc any
	json.Unmarshal([]byte(out), &got)
	json.Unmarshal(want, &wantDoc)
	if g, w := fmt.Sprint(got), fmt.Sprint(wantDoc); g != w {
		t.Fatalf("the diff differs from two full builds':\n%s\nwant\n%s", out, want)
	}
}

// TestDiffLeavesSameInputsUnbuilt: without --all, a table whose inputs are
// the same on both sides is not built and is reported unchanged in one
// line; the changed table's report is what two full builds give.
func TestDiffLeavesSameInputsUnbuilt(t *testing.T) {
	path, c := drainedCopy(t, 2, 0)
	out, errOut, code, st := runCmdBuilt("diff", cfgDir+"medium.json", path, "--json")
	if code != exitChanges || st.Unbuilt != 2 || st.Other != 0 || st.Full != 2 {
		t.Fatalf("diff: exit %d, %d tables left unbuilt (want 2), %d reused, %d built (want 2)\n%s", code, st.Unbuilt, st.Other, st.Full, errOut)
	}
	var d table.Diff
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	oldSrc, err := config.Load(cfgDir + "medium.json")
	if err != nil {
		t.Fatal(err)
	}
	newTabs, err := table.BuildAll(c)
	if err != nil {
		t.Fatal(err)
	}
	full := table.Compare(oldSrc.Tables, newTabs)
	for i, td := range d.Tables {
		if i == 2 {
			g, _ := json.Marshal(td)
			w, _ := json.Marshal(full.Tables[i])
			if string(g) != string(w) {
				t.Errorf("the changed table's report differs from two full builds':\n%s\nwant\n%s", g, w)
			}
			continue
		}
		if !td.SameInputs || td.Status != table.StatusUnchanged || td.OldFingerprint != "" || full.Tables[i].Status != table.StatusUnchanged {
			t.Errorf("table %d: %+v", i, td)
		}
	}
	text, _, _ := runCmd("diff", cfgDir+"medium.json", path)
	if want := "unchanged (the same inputs on both sides: not built; --all shows it whole)"; strings.Count(text, want) != 2 {
		t.Errorf("diff's text lacks two one-line unchanged tables:\n%s", text)
	}
}

// TestPlanShowsUnchangedTablesInOneLine: a plan gives a table it does not
// change one line, in its output and its file; --all shows it whole in
// both. The changed table is shown whole either way.
func TestPlanShowsUnchangedTablesInOneLine(t *testing.T) {
	_, b := servingMedium(t)
	path, _ := drainedCopy(t, 2, 0)
	tmp := t.TempDir()
	for _, all := range []bool{false, true} {
		file := filepath.Join(tmp, fmt.Sprint("plan-", all, ".json"))
		args := append(b, "plan", path, "-o", file)
		if all {
			args = append(args, "--all")
		}
		out := mustRun(t, 2, args...)
		web := out[strings.Index(out, "table web:"):]
		web = web[:strings.Index(web, "\ntable ")]
		short := strings.Contains(web, "table web: unchanged (fingerprint ") && !strings.Contains(web, "primary share")
		if short == all {
			t.Errorf("--all %v: web shown\n%s", all, web)
		}
		if git := out[strings.Index(out, "table git:"):]; !strings.Contains(git, "primary share") {
			t.Errorf("--all %v: the changed table is not shown whole:\n%s", all, git)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var p table.Plan
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatal(err)
		}
		for _, td := range p.Diff.Tables {
			if brief := td.Name != "git"; td.Brief != (brief && !all) || (td.Brief && len(td.Backends) > 0) {
				t.Errorf("--all %v: the plan file's %s: brief %v with %d backends", all, td.Name, td.Brief, len(td.Backends))
			}
		}
		if !json.Valid(p.Config) {
			t.Errorf("--all %v: the plan's config is not kept", all)
		}
	}
}

// runCmdBuilt is runCmd, also giving what the change pipeline did.
func runCmdBuilt(args ...string) (stdout, stderr string, code int, st change.Stats) {
	var o, e bytes.Buffer
	code, st = runEnv(args, &o, &e)
	return o.String(), e.String(), code, st
}

// mustRunBuilt is mustRun, giving what the change pipeline did.
func mustRunBuilt(t *testing.T, code int, args ...string) change.Stats {
	t.Helper()
	out, errOut, got, st := runCmdBuilt(args...)
	if got != code {
		t.Fatalf("director %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), got, code, out, errOut)
	}
	return st
}
