package main

import (
	"fmt"

	"github.com/director/director/loader"
)

var unloadCmd = &command{
	uses: usesBPFFS,
	name: "unload", args: "",
	summary: "Detach every interface and remove every pin.",
	help: "Detach every interface and remove every pin: the director stops. Idempotent: where nothing is\n" +
		"loaded it says so and exits 0. Refused while a 'director run' serves the pins, and for a pin\n" +
		"directory of the backend program ('director backend unload' is its own).",
	run: runUnload,
}

func runUnload(e *env, c *command, args []string) error {
	if _, err := e.parse(e.flags(c), args, 0, 0); err != nil {
		return err
	}
	return unloadPins(e, e.bpffs, loader.KindDirector)
}

// unloadPins is 'unload' and 'backend unload': the pins of one program
// (kind) removed, or a refusal (the other program's pins, a service
// serving them) with nothing done; it tells an unload from nothing there
// to unload (a mistyped directory leaves the real one serving).
func unloadPins(e *env, dir string, kind loader.PinKind) error {
	loaded, err := loader.UnloadAs(dir, kind)
	if err != nil {
		return err
	}
	if !loaded {
		fmt.Fprintf(e.stdout, "nothing is loaded at %s: nothing unloaded\n", dir)
		return nil
	}
	fmt.Fprintf(e.stdout, "unloaded %s\n", dir)
	return nil
}
