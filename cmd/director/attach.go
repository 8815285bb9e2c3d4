package main

import (
	"fmt"

	"github.com/director/director/loader"
)

var attachCmd = &command{
	uses: usesBPFFS,
	name: "attach", args: "IFACE [--mode native|generic]",
	summary: "Attach the loaded program to an interface.",
	help: "Attach the loaded program to an interface through a pinned bpf_link, which outlives this\n" +
		"process. Attaching again in the same mode changes nothing; a stale attachment whose interface is\n" +
		"gone is replaced. An interface another XDP program holds is refused, naming that program.",
	run: runAttach,
}

func runAttach(e *env, c *command, args []string) error {
	fs := e.flags(c)
	mode := fs.String("mode", loader.ModeNative, "XDP `MODE`: native (driver) or generic (skb)")
	pos, err := e.parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	d, err := e.open()
	if err != nil {
		return err
	}
	defer d.Close()
	at, err := d.Attach(pos[0], *mode)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "attached to %s in %s mode (link %d, program %d)\n", at.Interface, at.Mode, at.LinkID, at.ProgramID)
	return nil
}
