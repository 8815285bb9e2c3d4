package main

import (
	"errors"
	"flag"
	"fmt"
)

func init() {
	register(&command{
		name: "help", args: "[COMMAND]", summary: "Describe the commands, or one command and its flags.",
		run: func(e *env, args []string) error {
			if len(args) == 0 {
				usage(e.stdout)
				return nil
			}
			c, ok := commands[args[0]]
			if !ok {
				return fmt.Errorf("help: unknown command %q", args[0])
			}
			// Running the command with -h prints its usage and flags.
			err := c.run(&env{stdout: e.stdout, stderr: e.stdout}, []string{"-h"})
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		},
	})
}
