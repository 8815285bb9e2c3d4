package main

import (
	"errors"
	"flag"
	"fmt"
)

func init() {
	c := &command{name: "help", args: "[COMMAND]", summary: "Describe the commands, or one command and its flags."}
	c.run = func(e *env, args []string) error {
		pos, err := parse(e.flags(c), args, 0, 1)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			usage(e.stdout)
			return nil
		}
		cmd, ok := commands[pos[0]]
		if !ok {
			return fmt.Errorf("help: unknown command %q", pos[0])
		}
		// Running the command with -h prints its usage and flags.
		err = cmd.run(&env{stdout: e.stdout, stderr: e.stdout}, []string{"-h"})
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	register(c)
}
