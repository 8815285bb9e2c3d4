package main

import (
	"fmt"

	"github.com/director/director/loader"
)

var detachCmd = &command{
	uses: usesBPFFS,
	name: "detach", args: "IFACE",
	summary: "Detach the program from an interface.",
	help: "Detach the program from an interface, or remove an attachment whose interface is gone.\n" +
		"An interface with no attachment is an error that lists those there are. Refused while a 'director\n" +
		"run' serves the pins.",
	run: runDetach,
}

func runDetach(e *env, c *command, args []string) error {
	pos, err := e.parse(e.flags(c), args, 1, 1)
	if err != nil {
		return err
	}
	if err := loader.CheckNoRun(e.bpffs, "detach"); err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Detach(pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "detached from %s\n", pos[0])
	return nil
}
