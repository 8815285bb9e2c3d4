package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/director/director/loader"
	"github.com/director/director/table"
)

func init() {
	c := &command{
		name: "apply", args: "PLAN|CONFIG [--yes] [--allow-unsafe]",
		summary: "Make the tables live. A PLAN (from 'director plan -o') is applied exactly as reviewed, and refused\n" +
			"if the live tables are no longer the ones it was computed against. A CONFIG needs --yes. An unsafe\n" +
			"change needs --allow-unsafe. Afterwards the tables are read back from the kernel and their\n" +
			"fingerprints checked.",
	}
	c.run = func(e *env, args []string) error {
		fs := e.flags(c)
		e.globalFlags(fs)
		yes := fs.Bool("yes", false, "apply a CONFIG without a reviewed plan")
		unsafe := fs.Bool("allow-unsafe", false, "apply even if the verdict is unsafe")
		pos, err := parse(fs, args, 1, 1)
		if err != nil {
			return err
		}
		data, err := table.ReadApplyInput(pos[0], loader.Limit)
		if err != nil {
			return err
		}
		plan, err := readPlan(data)
		if err != nil {
			return fmt.Errorf("%s: %w", pos[0], err)
		}
		if plan == nil && !*yes {
			return fmt.Errorf("apply: %s is a config, not a reviewed plan: run 'director plan %s -o PLAN' and apply the plan, or pass --yes", pos[0], pos[0])
		}
		if plan != nil && plan.BPFFS != e.bpffs {
			return fmt.Errorf("apply: the plan is for the director at %s, not %s", plan.BPFFS, e.bpffs)
		}
		input := data
		if plan != nil {
			input = plan.Input()
		}
		src, err := buildForApply(e, pos[0], input)
		if err != nil {
			return err
		}
		tables := src.Tables
		if plan != nil && !table.SamePlanTables(plan.Result, table.PlanTables(tables)) {
			return errors.New("apply: the plan's config no longer builds the tables it shows (edited plan?)")
		}
		d, err := e.open()
		if err != nil {
			return err
		}
		defer d.Close()
		if err := e.configure(d); err != nil {
			return err
		}
		var verdict *table.Plan
		res, err := d.Apply(tables, func(live []*table.Table) error {
			if plan != nil && !table.SamePlanTables(plan.Base, table.PlanTables(live)) {
				return errors.New("apply: the live tables changed since the plan was made; make a new plan")
			}
			verdict = makePlan(e, live, src)
			if !verdict.Safe && !*unsafe {
				return fmt.Errorf("apply: unsafe change refused (pass --allow-unsafe to apply it):\n  - %s", strings.Join(verdict.Reasons, "\n  - "))
			}
			return nil
		})
		if err != nil {
			return err
		}
		// What the kernel holds now must be what was reviewed.
		if got := table.PlanTables(tablesOf(res)); !table.SamePlanTables(got, verdict.Result) {
			return errors.New("apply: the tables read back from the kernel differ from the ones applied")
		}
		if _, _, ok, _ := d.LiveConfig(); !ok {
			fmt.Fprintln(e.stderr, "director: warning: no director config is set: packets are passed until one is written with --director-config")
		}
		fmt.Fprintf(e.stdout, "applied %d tables in %s; fingerprints read back from the kernel:\n", len(tables), res.Duration.Round(10000))
		for i, t := range verdict.Result {
			name := t.Name
			if name == "" {
				name = fmt.Sprintf("tables[%d]", i)
			}
			fmt.Fprintf(e.stdout, "  %s  %s\n", name, table.ShortFingerprint(t.Fingerprint))
		}
		return nil
	}
	register(c)
}
