package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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
		raw, tables, err := loadForApply(e, pos[0])
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
		p := makePlan(e, loader.Tables(live), tables, raw)
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
			shown.Config = nil
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

// loadForApply reads a config, builds it and checks the datapath can serve
// it. It returns the config's bytes as well, for a plan file.
func loadForApply(e *env, path string) (json.RawMessage, []*table.Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return buildConfig(e, path, data)
}

func buildConfig(e *env, path string, data []byte) (json.RawMessage, []*table.Table, error) {
	cfg, err := table.ParseConfig(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	warnAll(e, cfg.Warnings)
	tables, err := table.BuildAll(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := loader.CheckDatapath(tables); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return json.RawMessage(data), tables, nil
}

func makePlan(e *env, live, tables []*table.Table, raw json.RawMessage) *table.Plan {
	d := table.Compare(live, tables)
	safe, reasons := table.Verdict(d)
	if reasons == nil {
		reasons = []string{}
	}
	return &table.Plan{PlanVersion: table.PlanVersion, Created: time.Now().UTC().Truncate(time.Second), BPFFS: e.bpffs,
		Base: table.PlanTables(live), Result: table.PlanTables(tables), Safe: safe, Reasons: reasons, Diff: d, Config: raw}
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
	if len(p.Config) == 0 {
		return nil, errors.New("plan has no config")
	}
	return &p, nil
}
