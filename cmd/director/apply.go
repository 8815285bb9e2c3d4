package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/director/director/internal/service/status"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var applyCmd = &command{
	uses: usesBPFFS | usesDirectorConfig,
	name: "apply", args: "PLAN|CONFIG [--yes] [--allow-unsafe] [--director-config FILE] [--quic-window D]",
	summary: "Apply a reviewed plan, or a config with --yes.",
	help: "Make the tables (and the director config) live. A PLAN (from 'director plan -o') is applied exactly\n" +
		"as reviewed, and refused if what is live is no longer what it was computed against. A CONFIG needs\n" +
		"--yes, and is planned and applied in one go, with --director-config if given. An unsafe change needs\n" +
		"--allow-unsafe. Afterwards the tables are read back from the kernel and their fingerprints checked.\n" +
		"What is live already is not written again. While a 'director run' serves the pins, apply is refused\n" +
		"(naming its pid) but for --allow-unsafe of exactly the change it holds.",
	run: runApply,
}

func runApply(e *env, c *command, args []string) error {
	fs := e.flags(c)
	yes := fs.Bool("yes", false, "apply a CONFIG without a reviewed plan")
	unsafe := fs.Bool("allow-unsafe", false, "apply even if the verdict is unsafe")
	quicWindow := quicWindowFlag(fs)
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	plan, input, err := readApplyInput(e, pos[0], *yes)
	if err != nil {
		return err
	}
	var carried []table.BuiltRows
	if plan != nil {
		carried = plan.Built
	}
	src, err := buildForApply(e, pos[0], input, e.liveHealth, carried)
	if err != nil {
		return err
	}
	tables := src.Tables
	if plan != nil && !table.SamePlanTables(plan.Result, table.PlanTables(tables)) {
		return errors.New("apply: the plan's config no longer builds the tables it shows (edited plan?)")
	}
	dc, err := applyDirector(e, plan)
	if err != nil {
		return err
	}
	if err := checkServiceAllows(e, tables, dc, *unsafe); err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	d.QUICWindow = *quicWindow
	verdict, res, err := d.Commit(&loader.Proposal{Tables: tables, Input: src.Data, Config: dc}, applyAllows(plan, *unsafe))
	for _, w := range d.StateWarnings {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	if errors.Is(err, errNothingToApply) {
		what := "the config's tables and director config are"
		if plan != nil {
			what = "the plan is"
		}
		fmt.Fprintf(e.stdout, "nothing applied: %s live already\n", what)
		return nil
	}
	if err != nil {
		if res != nil { // applied, but not what was planned
			return fmt.Errorf("apply: %w", err)
		}
		return aboutConfig(pos[0], err)
	}
	return printApplied(e, d, verdict, res, dc)
}

// printApplied says what the kernel holds now: each table's fingerprint as
// remakePlan says how to make a refused plan again on this host and apply
// it, whole when the plan names the files it was made from.
func remakePlan(e *env, plan *table.Plan, path string) string {
	if plan.MadeFrom == nil || plan.MadeFrom.Config == "" {
		return fmt.Sprintf("  director plan CONFIG -o PLAN%s (CONFIG: the config it was made from)", e.bpffsFlag())
	}
	dc := ""
	if plan.MadeFrom.DirectorConfig != "" {
		dc = " --director-config " + shellword.Join(plan.MadeFrom.DirectorConfig)
	}
	return fmt.Sprintf("  director plan %s -o %s%s%s\n  director apply %s%s", shellword.Join(plan.MadeFrom.Config), shellword.Join(path), dc,
		e.bpffsFlag(), shellword.Join(path), e.bpffsFlag())
}

// readApplyInput reads what apply was given: a reviewed plan (for this
// director, with its config's bytes as input), or with --yes a config.
func readApplyInput(e *env, path string, yes bool) (plan *table.Plan, input []byte, err error) {
	data, err := config.ReadApplyInput(path, mapimage.Limit)
	if err != nil {
		return nil, nil, err
	}
	if plan, err = readPlan(data); err != nil {
		return nil, nil, config.InFile(path, err)
	}
	switch {
	case plan == nil && !yes:
		return nil, nil, fmt.Errorf("apply: %s is a config, not a reviewed plan: pass --yes, or review it and apply the plan:\n"+
			"  director plan %s -o plan.json%s%s\n  director apply plan.json%s",
			path, shellword.Join(path), e.bpffsFlag(), dirConfigFlag(e), e.bpffsFlag())
	case plan == nil:
		return nil, data, nil
	}
	if err := planKey().CheckPlanFile(data); err != nil {
		return nil, nil, fmt.Errorf("apply: %s: %w; make the plan again here:\n%s", path, err, remakePlan(e, plan, path))
	}
	switch {
	case !samePath(plan.BPFFS, e.bpffs):
		return nil, nil, fmt.Errorf("apply: the plan is for the director at %s, not %s", plan.BPFFS, e.bpffs)
	case e.dirConfig != "":
		return nil, nil, errors.New("apply: a plan carries its own director config (or none): give --director-config to 'director plan'")
	}
	return plan, plan.Input(), nil
}

// applyAllows is apply's judgement of the change against what is live:
// something to apply, the reviewed change exactly when there is a plan
// (the same base, diff and verdict), and safe unless unsafe is allowed.
func applyAllows(plan *table.Plan, unsafe bool) func(live loader.State, verdict *table.Plan) error {
	return func(live loader.State, verdict *table.Plan) error {
		if !verdict.Changed() {
			return errNothingToApply
		}
		if plan != nil && !sameBase(plan, live) {
			return errors.New("apply: what is live changed since the plan was made; make a new plan")
		}
		if plan != nil {
			// Only the change that was reviewed: the plan's config must
			// make, against what is live, the diff the plan shows (an
			// edited config, a bind added say, does not).
			reviewed, err := plan.RawDiff()
			if err != nil {
				return fmt.Errorf("apply: the plan's diff: %w", err)
			}
			if why := table.ChangeDiffers(reviewed, verdict.Diff); why != "" {
				return fmt.Errorf("apply: the plan's config does not make the change the plan shows (%s): edited plan? Make a new plan", why)
			}
			if verdict.Safe != plan.Safe {
				return fmt.Errorf("apply: the change is judged %s, the plan shows %s: make a new plan", safeWord(verdict.Safe), safeWord(plan.Safe))
			}
		}
		if !verdict.Safe && !unsafe {
			return fmt.Errorf("apply: unsafe change refused (pass --allow-unsafe to apply it):\n  - %s", strings.Join(verdict.Reasons, "\n  - "))
		}
		return nil
	}
}

// applyDirector is the director config an apply writes: the plan's
// reviewed one, or --director-config's (none: the live one is kept).
func applyDirector(e *env, plan *table.Plan) (*table.DirectorConfig, error) {
	if plan == nil || plan.Director == nil {
		return e.directorConfig()
	}
	dc, err := config.ParseDirector(plan.Director.Result)
	if err != nil {
		return nil, fmt.Errorf("apply: the plan's director config: %w", err)
	}
	if err := checkReviewedDirector(plan.Director, dc); err != nil {
		return nil, err
	}
	return dc, nil
}

// read back, and the director config.
func printApplied(e *env, d *loader.Director, verdict *table.Plan, res *loader.ApplyResult, dc *table.DirectorConfig) error {
	if now, err := d.LiveConfig(); err != nil {
		return err
	} else if now == nil {
		fmt.Fprintln(e.stderr, "director: warning: no director config is live: packets are passed until one is applied with --director-config")
	}
	fmt.Fprintf(e.stdout, "applied %d tables in %s; fingerprints read back from the kernel:\n", len(verdict.Result), res.Duration.Round(10000))
	for i, t := range verdict.Result {
		fmt.Fprintf(e.stdout, "  %s  %s\n", table.DisplayName(t.Name, i), table.ShortFingerprint(t.Fingerprint))
	}
	if dc != nil {
		fmt.Fprintf(e.stdout, "director config: source %s, gateway %s, hash %s, alt hash %s, ICMP echo forwarding %v\n",
			dc.SrcIP, dc.GatewayMAC, dc.HashFields, dc.AltHashFields, dc.ForwardICMPEcho)
	}
	return nil
}

// sameBase reports whether what is live is what plan was made against:
// the same tables, and when the plan changes the director config, the
// same director config.
func sameBase(plan *table.Plan, live loader.State) bool {
	if !table.SamePlanTables(plan.Base, table.PlanTables(live.Tables)) {
		return false
	}
	if plan.Director == nil {
		return true
	}
	base := []byte("null")
	if live.Config != nil {
		var err error
		if base, err = live.Config.MarshalGLB(); err != nil {
			return false
		}
	}
	// The plan file is indented: compare the documents, not their layout.
	var a, b bytes.Buffer
	return json.Compact(&a, base) == nil && json.Compact(&b, plan.Director.Base) == nil && bytes.Equal(a.Bytes(), b.Bytes())
}

// errNothingToApply is what the judge returns when what is proposed is
// live already: nothing is written.
var errNothingToApply = errors.New("nothing to apply")

// checkServiceAllows refuses an apply while a 'director run' serves the
// pins, unless it is the documented way to apply what the service holds:
// --allow-unsafe, of exactly the tables and director config it holds. Any
// other change the service would undo at its next look.
func checkServiceAllows(e *env, tables []*table.Table, dc *table.DirectorConfig, unsafe bool) error {
	err := loader.CheckNoRun(e.bpffs, "apply")
	if err == nil {
		return nil
	}
	var re *loader.RunningError
	if !errors.As(err, &re) {
		return err
	}
	st, serr := status.Read(status.DefaultLockDir, e.bpffs)
	if serr == nil && st != nil && st.PID == re.PID && unsafe && st.Holds(tables, dc) {
		return nil
	}
	if serr == nil && st != nil && st.PID == re.PID && len(st.Held) > 0 && !unsafe {
		return fmt.Errorf("%w; it holds an unsafe change: if this is it, pass --allow-unsafe", err)
	}
	return err
}

// checkReviewedDirector refuses a plan whose director config is not the
// change it showed for review: the changes from its base to its result,
// computed again, must be the ones it lists. (The tables are checked the
// same way, by fingerprint.)
func checkReviewedDirector(dp *table.DirectorPlan, result *table.DirectorConfig) error {
	var base *table.DirectorConfig
	if len(dp.Base) > 0 && string(dp.Base) != "null" {
		b, err := config.ParseDirector(dp.Base)
		if err != nil {
			return fmt.Errorf("apply: the plan's base director config: %w", err)
		}
		base = b
	}
	now, _ := json.Marshal(table.CompareDirectorConfig(base, result))
	shown, _ := json.Marshal(dp.Changes)
	if !bytes.Equal(now, shown) {
		return errors.New("apply: the plan's director config is not the change it shows for review (edited plan?); make a new plan")
	}
	return nil
}

// samePath reports whether a and b name the same directory: as files,
// not strings, so a trailing slash or a symlink does not matter.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

func safeWord(safe bool) string {
	if safe {
		return "safe"
	}
	return "unsafe"
}
