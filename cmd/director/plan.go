package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/director/director/loader"
	"github.com/director/director/table"
)

func init() {
	c := &command{
		name: "plan", args: "CONFIG [-o PLAN] [--json]",
		summary: "Show what applying CONFIG would change against the tables live in the kernel, with a verdict:\n" +
			"safe, or unsafe with reasons. -o writes a plan file that 'director apply' applies exactly as\n" +
			"reviewed. Exit status 0: no change, 2: changes, 1: error.",
	}
	c.run = func(e *env, args []string) error {
		fs := e.flags(c)
		e.globalFlags(fs)
		out := fs.String("o", "", "write the plan to `PLAN` (mode 0600: it holds the config's keys)")
		asJSON := fs.Bool("json", false, "print the plan as JSON (without the config)")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		src, err := loadForApply(e, pos[0])
		if err != nil {
			return err
		}
		d, err := e.open()
		if err != nil {
			return err
		}
		defer d.Close()
		live, err := d.Live()
		if err != nil {
			return err
		}
		p := makePlan(e, loader.Tables(live), src)
		if *out != "" {
			err := table.WriteFileAtomic(*out, 0o600, func(w io.Writer) error {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(p)
			})
			if err != nil {
				return fmt.Errorf("plan: writing %s: %w", *out, err)
			}
		}
		if *asJSON {
			shown := *p
			shown.Config, shown.ConfigGLB = nil, nil
			if err := writeJSON(e.stdout, shown); err != nil {
				return err
			}
		} else {
			printPlan(e, p)
			if *out != "" {
				fmt.Fprintf(e.stdout, "\nplan written to %s; apply it with: director apply %s\n", *out, *out)
			}
		}
		if p.Diff.Changed {
			return exitCode(exitChanges)
		}
		return nil
	}
	register(c)
}

// loadForApply reads a config or GLB binary for the datapath: within its
// limits, built, and checked that the datapath can serve it.
func loadForApply(e *env, path string) (*table.Source, error) {
	data, err := table.ReadInput(path, loader.Limit)
	if err != nil {
		return nil, err
	}
	return buildForApply(e, path, data)
}

// buildForApply is loadForApply of data read from path (or a plan).
func buildForApply(e *env, path string, data []byte) (*table.Source, error) {
	src, err := table.ParseSource(path, data, loader.Limit)
	if err != nil {
		return nil, err
	}
	if err := loader.CheckDatapath(src.Tables); err != nil {
		return nil, table.InFile(path, err)
	}
	warnAll(e, src.Warnings)
	return src, nil
}

func makePlan(e *env, live []*table.Table, src *table.Source) *table.Plan {
	d := table.Compare(live, src.Tables)
	safe, reasons := table.Verdict(d)
	if reasons == nil {
		reasons = []string{}
	}
	p := &table.Plan{PlanVersion: table.PlanVersion, Created: time.Now().UTC().Truncate(time.Second), BPFFS: e.bpffs,
		Base: table.PlanTables(live), Result: table.PlanTables(src.Tables), Safe: safe, Reasons: reasons, Diff: d}
	p.SetInput(src.Data)
	return p
}

func printPlan(e *env, p *table.Plan) {
	printDiff(e.stdout, p.Diff)
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

// readPlan parses a plan file, or returns nil if data is not one.
func readPlan(data []byte) (*table.Plan, error) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(data, &probe) != nil {
		return nil, nil
	}
	if _, ok := probe["plan_version"]; !ok {
		return nil, nil
	}
	var p table.Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("reading plan: %w", err)
	}
	if p.PlanVersion != table.PlanVersion {
		return nil, fmt.Errorf("plan format version %d, this director reads %d", p.PlanVersion, table.PlanVersion)
	}
	if len(p.Input()) == 0 {
		return nil, errors.New("plan has no config")
	}
	return &p, nil
}
