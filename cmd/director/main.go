// Command director is a GLB-compatible L4 load-balancer director: it builds
// GLB forwarding tables, shows and diffs them for review, and (later) runs
// them in an XDP datapath.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/loader"
)

// Exit statuses, part of the CLI contract (README, "Exit status").
const (
	exitOK      = 0
	exitError   = 1
	exitChanges = 2 // diff: the inputs differ
)

type command struct {
	name    string
	args    string // synopsis after the name
	summary string // the full description; its first sentence lists the command
	run     func(e *env, args []string) error
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// env is what a command may touch, injected so that tests can run commands
// in-process and read what they print.
type env struct {
	stdout, stderr io.Writer
	bpffs          string // --bpffs
	dirConfig      string // --director-config
}

// exitCode lets a command end with a status other than 0 or 1 without it
// being reported as an error.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

func main() {
	stop := startProfile()
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(args []string, stdout, stderr io.Writer) int {
	e := &env{stdout: stdout, stderr: stderr, bpffs: loader.DefaultBPFFS}
	// Global flags may come before the command.
	gfs := flag.NewFlagSet("director", flag.ContinueOnError)
	gfs.SetOutput(io.Discard)
	e.globalFlags(gfs)
	if err := gfs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "director: %v\n", err)
		return exitError
	}
	args = gfs.Args()
	if len(args) == 0 {
		usage(stderr)
		return exitError
	}
	name := args[0]
	switch name {
	case "-h", "--help", "-help":
		name = "help"
	case "--version", "-version":
		name = "version"
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "director: unknown command %q (see 'director help')\n", name)
		return exitError
	}
	err := c.run(e, args[1:])
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(stderr, "director: %s\n", line)
	}
	return exitError
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: director COMMAND [ARGS]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-11s %s\n", n, firstSentence(c.summary))
	}
	fmt.Fprintln(w, "\nglobal flags (before or after the command):")
	fmt.Fprintf(w, "  --bpffs DIR             where the director's objects are pinned (default %s)\n", loader.DefaultBPFFS)
	fmt.Fprintln(w, "  --director-config FILE  director settings, GLB's director.conf format")
	fmt.Fprintln(w, "\n'director help COMMAND' describes one command.")
}

// firstSentence is a summary's opening clause, on one line: up to its
// first colon or full stop.
func firstSentence(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	for _, sep := range []string{": ", ". ", ", in a private", " (mounting"} {
		if i := strings.Index(s, sep); i >= 0 {
			s = s[:i]
		}
	}
	return strings.TrimSuffix(s, ".")
}

// flags makes a command's flag set; its errors are returned, not printed
// and exited on, so that tests see them.
func (e *env) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: director %s %s\n\n%s\n", c.name, c.args, c.summary)
		if hasFlags(fs) {
			fmt.Fprintln(e.stderr, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// globalFlags registers --bpffs and --director-config, which every command
// accepts before or after its name.
func (e *env) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.bpffs, "bpffs", e.bpffs, "bpffs `DIR` the director's objects are pinned in")
	fs.StringVar(&e.dirConfig, "director-config", e.dirConfig, "director config `FILE` (GLB's director.conf format)")
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses flags that may come before, between or after positional
// arguments (director build CONFIG -o FILE), and checks the count of
// positional arguments.
func parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", fs.Name(), err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if rest[0] == "--" {
			pos = append(pos, rest[1:]...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		fs.Usage()
		return nil, fmt.Errorf("%s: wrong number of arguments", fs.Name())
	}
	return pos, nil
}

// bpffsFlag is " --bpffs DIR" when DIR is not the default, for commands a
// message suggests: they must reach the same director.
func (e *env) bpffsFlag() string {
	if e.bpffs == loader.DefaultBPFFS {
		return ""
	}
	return " --bpffs " + e.bpffs
}

// durationValue is a duration flag whose errors say what a duration
// looks like: flag's own says "parse error", and a bare number is the
// usual mistake.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err == nil {
		*v.d = d
		return nil
	}
	if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
		return fmt.Errorf("%q has no unit: write it as 1s, 500ms or 2m", s)
	}
	return fmt.Errorf("%q is not a duration (such as 1s, 500ms or 2m)", s)
}

// durationFlag defines a duration flag with durationValue's errors.
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	d := def
	fs.Var(durationValue{&d}, name, usage)
	return &d
}
