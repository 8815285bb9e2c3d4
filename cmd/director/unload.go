package main

import (
	"fmt"

	"github.com/director/director/loader"
)

var unloadCmd = &command{
	uses: usesBPFFS,
	name: "unload", args: "",
	summary: "Detach every interface and remove every pin.",
	help: "Detach every interface and remove every pin: the director stops. Idempotent. Refused while a\n" +
		"'director run' serves the pins.",
	run: runUnload,
}

func runUnload(e *env, c *command, args []string) error {
	if _, err := e.parse(e.flags(c), args, 0, 0); err != nil {
		return err
	}
	if err := loader.CheckNoRun(e.bpffs, "unload"); err != nil {
		return err
	}
	if err := loader.Unload(e.bpffs); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "unloaded %s\n", e.bpffs)
	return nil
}
