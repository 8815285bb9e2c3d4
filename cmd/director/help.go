package main

import (
	"errors"
	"flag"
	"fmt"
)

// helpCmd is in the command table to be listed; run dispatches it, since
// it reads the table.
var helpCmd = &command{
	uses: usesBPFFS | usesDirectorConfig, // they change and report nothing of the pins: the flags are harmless there
	name: "help", args: "[COMMAND]",
	summary: "Describe the commands, or one command and its flags.",
	help:    "Without a command, list the commands and the global flags; with one, describe it. --help and -h do the same.",
}

func runHelp(e *env, args []string) error {
	pos, err := e.parse(e.flags(helpCmd), args, 0, 1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		usage(e.stdout)
		return nil
	}
	c := lookup(pos[0])
	if c == nil {
		return fmt.Errorf("help: unknown command %q (see 'director help')", pos[0])
	}
	return describeCommand(e, c)
}

// describeCommand prints c's usage, description and flags: what c -h prints,
// since a command defines its flags as it runs.
func describeCommand(e *env, c *command) error {
	if c.run == nil { // help itself
		e.usage[e.flags(c)]()
		return nil
	}
	err := c.run(e, c, []string{"-h"})
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
