package main

import (
	"fmt"
	"path/filepath"

	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
	"github.com/director/director/table"
)

var loadCmd = &command{
	uses: usesBPFFS | usesDirectorConfig,
	name: "load", args: "[--bpffs DIR]",
	summary: "Load and pin the XDP program and its maps.",
	help: "Load the XDP program and its maps and pin them under the bpffs directory (mounting bpffs if\n" +
		"needed). Idempotent: pinned maps are kept; a different program version replaces the running one\n" +
		"atomically on every attached interface. It never changes the director config: plan and apply do.",
	run: runLoad,
}

func runLoad(e *env, c *command, args []string) error {
	fs := e.flags(c)
	if _, err := e.parse(fs, args, 0, 0); err != nil {
		return err
	}
	dc, err := e.directorConfig()
	if err != nil {
		return err
	}
	if err := loader.CheckNoRun(e.bpffs, "load"); err != nil {
		return err
	}
	d, err := loader.Load(e.bpffs)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	defer d.Close()
	for _, r := range d.Repaired {
		fmt.Fprintf(e.stderr, "director: %s\n", r)
	}
	info, err := d.Prog.Info()
	if err != nil {
		return err
	}
	id, _ := info.ID()
	fmt.Fprintf(e.stdout, "loaded: program %d pinned at %s\n", id, filepath.Join(e.bpffs, "prog"))
	if dc == nil {
		return nil
	}
	// A director config changes only through a reviewed plan: load
	// says whether the file matches what is live, and changes nothing.
	live, err := d.LiveConfig()
	if err != nil {
		return err
	}
	if live != nil && len(table.CompareDirectorConfig(live, dc)) == 0 {
		fmt.Fprintf(e.stdout, "director config: the live one is %s's\n", e.dirConfig)
		return nil
	}
	return fmt.Errorf("load: load does not change the director config; review the change and apply it "+
		"(CONFIG: the forwarding table to serve with it):\n"+
		"  director plan CONFIG --director-config %s -o plan.json%s\n  director apply plan.json%s", shellword.Join(e.dirConfig), e.bpffsFlag(), e.bpffsFlag())
}
