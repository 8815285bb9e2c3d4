package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/director/director/internal/change"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
	"github.com/director/director/table/config"
)

var planCmd = &command{
	uses: usesBPFFS | usesDirectorConfig,
	name: "plan", args: "CONFIG [--director-config FILE] [-o PLAN] [--json] [--all] [--picture F.png|F.svg [--table NAME]] [--quic-window D]",
	summary: "Judge a change against what is live, and write it as a plan.",
	help: "Show what applying CONFIG (and the director config, when given) would change against what is live\n" +
		"in the kernel, with a verdict: safe, or unsafe with reasons. -o writes a plan file that 'director\n" +
		"apply' applies exactly as reviewed. --picture draws what the plan moves, as 'diff --picture' does,\n" +
		"against what is live. A table that does not change is shown in one line (its fingerprint), in the\n" +
		"output and the plan file; --all shows it whole. Exit status 0: no change, 2: changes, 1: error.",
	run: runPlan,
}

func runPlan(e *env, c *command, args []string) error {
	fs := e.flags(c)
	out := fs.String("o", "", "write the plan to `PLAN` (mode 0600: it holds the config's keys; - for stdout)")
	asJSON := fs.Bool("json", false, "print the plan as JSON (without the config)")
	pic := pictureFlags(fs, "draw what the plan moves into `FILE` (.png or .svg)")
	all := fs.Bool("all", false, "show every table whole, in the output and the plan file, also those unchanged")
	quicWindow := quicWindowFlag(fs)
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if err := pic.check(); err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	if *out == "-" && *asJSON {
		return errors.New("plan: -o - and --json would both write to stdout; give -o a FILE")
	}
	src, err := loadForApply(e, pos[0], e.liveHealth)
	if err != nil {
		return err
	}
	dc, err := e.directorConfig()
	if err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	d.QUICWindow = *quicWindow
	prop := &loader.Proposal{Tables: src.Tables, Input: src.Data, Config: dc}
	var p *table.Plan
	if e.live != nil {
		p, err = d.PlanOn(*e.live, prop) // the state src took its unchanged tables from
	} else {
		p, err = d.Plan(prop)
	}
	if err != nil {
		return aboutConfig(pos[0], err)
	}
	for _, w := range d.StateWarnings {
		fmt.Fprintf(e.stderr, "director: warning: %s\n", w)
	}
	if err := planReview(e, d, src, p, pic); err != nil {
		return err
	}
	if !*all {
		p.Diff = p.Diff.Brief()
	}
	if err := emitPlan(e, p, src, *out, *asJSON); err != nil {
		return err
	}
	if p.Changed() {
		return exitCode(exitChanges)
	}
	return nil
}

// madeFrom names the files a plan is made from, absolute, or nil for a
// config read from stdin: apply's hint for remaking a refused plan.
func madeFrom(e *env, cfg string) *table.PlanFiles {
	if cfg == "" || cfg == "-" {
		return nil
	}
	var f table.PlanFiles
	var err error
	if f.Config, err = filepath.Abs(cfg); err != nil {
		return nil
	}
	if e.dirConfig != "" {
		if f.DirectorConfig, err = filepath.Abs(e.dirConfig); err != nil {
			return nil
		}
	}
	return &f
}

// planReview adds to p what a person reviewing it needs beyond the
// diff: with --picture, what it moves drawn against what is live.
func planReview(e *env, d *loader.Director, src *config.Source, p *table.Plan, pic pictureOpts) error {
	if *pic.path != "" {
		live, err := d.Live()
		if err != nil {
			return err
		}
		verdict := "safe"
		if !p.Safe {
			verdict = "UNSAFE: " + strings.Join(p.Reasons, "; ")
		}
		panels, err := changePanels(pic, loader.Tables(live), src.Tables, p.Diff, verdict)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if err := writePicture(e, *pic.path, panels); err != nil {
			return err
		}
	}
	return nil
}

// emitPlan writes the plan file (with out) and the review: JSON or text.
func emitPlan(e *env, p *table.Plan, src *config.Source, out string, asJSON bool) error {
	if out != "" {
		var base []*table.Table
		if e.live != nil {
			base = e.live.Tables
		}
		key := planKey()
		if key == nil {
			return fmt.Errorf("plan: cannot seal %s: this host's plan key (%s) could not be made or read: the directory must be this user's and closed to others", wrote(out), filepath.Join(planKeyDir, "plan.key"))
		}
		p.Built = table.CarryBuilt(src.Tables, base, key)
		p.MadeFrom = madeFrom(e, src.Path)
		err := e.writeOutput(out, 0o600, func(w io.Writer) error { return writePlan(w, p, key) })
		if err != nil {
			return fmt.Errorf("plan: writing %s: %w", wrote(out), err)
		}
	}
	if asJSON {
		shown := *p
		shown.Config, shown.ConfigGLB, shown.Built = nil, nil, nil
		if err := writeJSON(e.stdout, shown); err != nil {
			return err
		}
	} else {
		r := e.reportTo(out) // the review goes to stderr when the plan goes to stdout
		printPlan(r, p)
		if out != "" {
			unsafe := ""
			if !p.Safe {
				unsafe = " --allow-unsafe"
			}
			fmt.Fprintf(r.stdout, "\nplan written to %s; apply it with: director apply %s%s%s\n", wrote(out), shellword.Join(out), e.bpffsFlag(), unsafe)
		}
	}
	return nil
}

// aboutConfig names the config file in an error about a place in it (a
// table, a backend): the loader's checks name the place, not the file.
func aboutConfig(path string, err error) error {
	var fe *table.FieldError
	var el table.ErrorList
	if errors.As(err, &fe) || errors.As(err, &el) {
		return config.InFile(path, err)
	}
	return err
}

// healthSource gives the health of backends a config leaves to the
// checks; nil where there is none to take it from.
type healthSource func() (func(table, backend int, tc *table.TableConfig) bool, error)

// loadForApply reads a config or GLB binary for the datapath: within its
// limits, built, and checked that the datapath can serve it. Health the
// config leaves to the checks comes from health, and without it such a
// config is refused.
func loadForApply(e *env, path string, health healthSource) (*config.Source, error) {
	data, err := config.ReadInput(path, mapimage.Limit)
	if err != nil {
		return nil, err
	}
	return buildForApply(e, path, data, health, nil)
}

// buildForApply is loadForApply of data read from path (or a plan),
// through the change pipeline (change.ForDatapath): with health (plan and
// apply), built against what is live, taking the live tables and the
// tables a plan carries (carried) that check out, and building the rest.
func buildForApply(e *env, path string, data []byte, health healthSource, carried []table.BuiltRows) (*config.Source, error) {
	a := change.Against{Carried: carried}
	if len(carried) > 0 {
		a.Key = planKey()
	}
	if health != nil {
		a.Live = func() ([]*table.Table, func(t, b int, tc *table.TableConfig) bool, error) {
			h, err := health()
			if err != nil || e.live == nil {
				return nil, h, err
			}
			return e.live.Tables, h, nil
		}
	}
	src, st, filled, err := change.ForDatapath(path, data, a)
	e.built = st
	if err != nil {
		return nil, err
	}
	if filled {
		fmt.Fprintf(e.stderr, "director: note: %s leaves health to the checks: it is taken from the live tables, where "+
			"'director run' keeps what its checks find (a backend they do not hold counts as down)\n", path)
	}
	warnAll(e, path, src.Warnings)
	return src, nil
}

func printPlan(e *env, p *table.Plan) {
	none := "no changes"
	if p.Director != nil && len(p.Director.Changes) > 0 {
		none = "tables: no changes" // the director config's follow
	}
	printDiff(e.stdout, p.Diff, none)
	if p.Director != nil {
		fmt.Fprintln(e.stdout)
		if len(p.Director.Changes) == 0 {
			fmt.Fprintln(e.stdout, "director config: unchanged")
		} else {
			fmt.Fprintln(e.stdout, "director config: changed")
		}
		for _, c := range p.Director.Changes {
			old := c.Old
			if old == "" {
				old = "(none)"
			}
			verdict := "safe"
			if !c.Safe {
				verdict = "UNSAFE"
			}
			fmt.Fprintf(e.stdout, "  ~ %-28s %s -> %s\n      %s: %s\n", c.Setting, old, c.New, verdict, c.Reason)
		}
	}
	fmt.Fprintln(e.stdout)
	if p.Safe {
		fmt.Fprintln(e.stdout, "verdict: safe")
		return
	}
	fmt.Fprintln(e.stdout, "verdict: UNSAFE (apply needs --allow-unsafe)")
	for _, r := range p.Reasons {
		fmt.Fprintf(e.stdout, "  - %s\n", r)
	}
}

// writePlan writes p as indented JSON with its config as it was read, not
// indented again: encoding/json would compact and re-indent the 1.2 MB of
// a config of 32 tables of 256 backends, a third of writing such a plan.
// The config is JSON that parsed as a config, so it is a valid value.
// The file is sealed whole with key (table.Sealer.SealPlanFile), which
// apply checks before it reads anything else of it.
func writePlan(w io.Writer, p *table.Plan, key table.Sealer) error {
	q := *p
	q.Config = nil
	b, err := json.MarshalIndent(&q, "", "  ")
	if err != nil {
		return err
	}
	if len(p.Config) > 0 {
		b = bytes.TrimSuffix(b, []byte("\n}"))
		b = append(b, ",\n  \"config\": "...)
		b = append(b, bytes.TrimSpace(p.Config)...)
		b = append(b, "\n}"...)
	}
	if b, err = key.SealPlanFile(b); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readPlan parses a plan file, or returns nil if data is not one.
func readPlan(data []byte) (*table.Plan, error) {
	// One decode, the diff (two thirds of a big plan's bytes) kept raw:
	// apply decodes it only to hold its change to it (reviewedDiff).
	var f struct {
		table.Plan
		PlanVersion *int            `json:"plan_version"`
		Diff        json.RawMessage `json:"diff"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		// A plan cut short is a broken plan, not a config.
		if bytes.Contains(data[:min(len(data), 64)], []byte(`"plan_version"`)) {
			return nil, fmt.Errorf("a broken plan (cut short, or edited into invalid JSON): %w; make a new plan", err)
		}
		return nil, nil
	}
	if f.PlanVersion == nil {
		return nil, nil
	}
	p := f.Plan
	p.PlanVersion = *f.PlanVersion
	p.Diff = nil
	p.SetRawDiff(f.Diff)
	if p.PlanVersion != table.PlanVersion {
		return nil, fmt.Errorf("plan format version %d, this director reads %d", p.PlanVersion, table.PlanVersion)
	}
	if len(p.Input()) == 0 {
		return nil, errors.New("plan has no config")
	}
	return &p, nil
}

// liveHealth gives the health the live tables hold: a backend's in the
// live table of the same name (or position, unnamed), down where there is
// none.
func (e *env) liveHealth() (func(table, backend int, tc *table.TableConfig) bool, error) {
	if e.live == nil {
		d, err := e.open()
		if err != nil {
			return nil, err
		}
		defer d.Close()
		live, err := d.LiveState()
		if err != nil {
			return nil, err
		}
		e.live = &live
	}
	tables := e.live.Tables
	return func(i, j int, tc *table.TableConfig) bool {
		h, _ := table.HealthOf(table.Replaced(tables, tc, i), tc.Backends[j].IP)
		return h
	}, nil
}

// quicWindowFlag is plan's and apply's --quic-window: how long a change
// that removes a QUIC-LB config from a live table watches the config's
// counters before judging whether it is still in use.
func quicWindowFlag(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("quic-window", loader.DefaultQUICWindow,
		"when the change removes a QUIC-LB config from a live table, watch its counters for `DURATION` to judge whether it is still in use")
}
