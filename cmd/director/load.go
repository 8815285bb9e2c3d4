package main

import (
	"fmt"
	"path/filepath"

	"github.com/director/director/loader"
)

func init() {
	c := &command{
		name: "load", args: "[--bpffs DIR] [--director-config FILE]",
		summary: "Load the XDP program and its maps and pin them under the bpffs directory (mounting bpffs if\n" +
			"needed). Idempotent: pinned maps are kept; a different program version replaces the running one\n" +
			"atomically on every attached interface. Writes the director config when one is given.",
	}
	c.run = func(e *env, args []string) error {
		fs := e.flags(c)
		e.globalFlags(fs)
		if _, err := parse(fs, args, 0, 0); err != nil {
			return err
		}
		d, err := loader.Load(e.bpffs)
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		defer d.Close()
		info, err := d.Prog.Info()
		if err != nil {
			return err
		}
		id, _ := info.ID()
		fmt.Fprintf(e.stdout, "loaded: program %d pinned at %s\n", id, filepath.Join(e.bpffs, "prog"))
		return e.configure(d)
	}
	register(c)
}
