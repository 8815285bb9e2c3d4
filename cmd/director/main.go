// Command director is a GLB-compatible L4 load-balancer director: it
// builds GLB forwarding tables, shows and diffs them for review, plans and
// applies them to its XDP datapath, and replays captures through it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/director/director/internal/change"
	"github.com/director/director/internal/shellword"
	"github.com/director/director/loader"
)

// Exit statuses, part of the CLI contract (docs/operations.md, "Commands").
const (
	exitOK      = 0
	exitError   = 1
	exitChanges = 2 // diff, plan: there are changes
)

// command is one of director's commands. Its run defines its flags as it
// runs, so that 'COMMAND -h' and 'help COMMAND' describe exactly those.
type command struct {
	name    string
	args    string // synopsis after the name: every flag but the global ones
	summary string // one line, for the command list
	help    string // the description 'help COMMAND' prints
	run     func(e *env, c *command, args []string) error
	// uses says which global flags the command reads; one it does not
	// read is refused there, rather than silently ignored.
	uses globalFlag
}

// globalFlag is a set of global flags.
type globalFlag int

const (
	usesBPFFS globalFlag = 1 << iota
	usesDirectorConfig
)

var globalNames = map[string]globalFlag{"bpffs": usesBPFFS, "director-config": usesDirectorConfig}

// checkGlobals refuses a global flag given to a command that does not
// read it.
func (e *env) checkGlobals(c *command) error {
	for name := range e.set {
		if g, ok := globalNames[name]; ok && c.uses&g == 0 {
			return fmt.Errorf("%s: --%s is not used by '%s' (see 'director help %s')", c.name, name, c.name, c.name)
		}
	}
	return nil
}

// commands, in the order 'director help' lists them: the table tools, the
// datapath's lifecycle, its inspection, the lab, the backend.
var commands = []*command{
	buildCmd, showCmd, diffCmd,
	loadCmd, planCmd, applyCmd, attachCmd, detachCmd, unloadCmd, runServiceCmd, healthcheckCmd,
	statusCmd, statsCmd, captureCmd, explainCmd, doctorCmd,
	replayCmd, benchCmd, genCaptureCmd,
	backendCmd,
	versionCmd, helpCmd,
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// env is what a command may touch, injected so that tests can run commands
// in-process and read what they print.
type env struct {
	stdout, stderr io.Writer
	bpffs          string // --bpffs
	dirConfig      string // --director-config
	// usage prints a flag set's command's usage: for -h, and only then
	// (package flag would print it on every error too).
	usage map[*flag.FlagSet]func()
	live  *loader.State   // what is live, once read
	set   map[string]bool // the flags given, by name
	cmdOf map[*flag.FlagSet]*command
	// built is what the change pipeline did for the command (the tables
	// taken, left unbuilt and built), which the tests read.
	built change.Stats
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
	code, _ := runEnv(args, stdout, stderr)
	return code
}

// runEnv is run, also giving what the change pipeline did.
func runEnv(args []string, stdout, stderr io.Writer) (int, change.Stats) {
	e := &env{stdout: stdout, stderr: stderr, bpffs: loader.DefaultBPFFS}
	return e.runCommand(args), e.built
}

func (e *env) runCommand(args []string) int {
	stderr := e.stderr
	err := dispatch(e, args)
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

func dispatch(e *env, args []string) error {
	// Global flags may come before the command.
	gfs := flag.NewFlagSet("director", flag.ContinueOnError)
	gfs.SetOutput(io.Discard)
	e.globalFlags(gfs)
	help := gfs.Bool("help", false, "")
	gfs.BoolVar(help, "h", false, "")
	showVersion := gfs.Bool("version", false, "")
	if err := gfs.Parse(args); err != nil {
		return fmt.Errorf("%w (see 'director help')", err)
	}
	gfs.Visit(e.given)
	args = gfs.Args()
	switch {
	case *showVersion:
		return runVersion(e, versionCmd, nil)
	case *help:
		return runHelp(e, args)
	case len(args) == 0:
		usage(e.stderr)
		return exitCode(exitError)
	case args[0] == helpCmd.name:
		return runHelp(e, args[1:])
	}
	c := lookup(args[0])
	if c == nil {
		return fmt.Errorf("unknown command %q (see 'director help')", args[0])
	}
	if err := e.checkGlobals(c); err != nil {
		return err
	}
	return c.run(e, c, args[1:])
}

// given records a flag that was set.
func (e *env) given(f *flag.Flag) {
	if e.set == nil {
		e.set = map[string]bool{}
	}
	e.set[f.Name] = true
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: director [GLOBAL FLAGS] COMMAND [ARGS]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nglobal flags, before or after the command:")
	fs := flag.NewFlagSet("director", flag.ContinueOnError)
	(&env{bpffs: loader.DefaultBPFFS}).globalFlags(fs)
	printFlags(w, fs)
	fmt.Fprintln(w, "\n'director help COMMAND' describes one command; 'director --version' prints the version.")
}

// flags makes a command's flag set, the global flags included. Its errors
// are returned, not printed: run prints them once. Asked for (-h), parse
// prints the usage to stdout.
func (e *env) flags(c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	e.globalFlags(fs)
	if e.usage == nil {
		e.usage = map[*flag.FlagSet]func(){}
		e.cmdOf = map[*flag.FlagSet]*command{}
	}
	e.cmdOf[fs] = c
	e.usage[fs] = func() {
		w := e.stdout
		fmt.Fprintf(w, "usage: director %s %s\n\n%s\n", c.name, c.args, c.help)
		own := flag.NewFlagSet(c.name, flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name != "bpffs" && f.Name != "director-config" {
				own.Var(f.Value, f.Name, f.Usage)
				own.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		if hasFlags(own) {
			fmt.Fprintln(w, "\nflags:")
			printFlags(w, own)
		}
		fmt.Fprintln(w, "\nglobal flags: --bpffs DIR, --director-config FILE (see 'director help')")
	}
	return fs
}

// globalFlags registers --bpffs and --director-config, which every command
// accepts before or after its name.
func (e *env) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&e.bpffs, "bpffs", e.bpffs, "bpffs `DIR` the director's objects are pinned in")
	fs.StringVar(&e.dirConfig, "director-config", e.dirConfig, "director config `FILE` (GLB's director.conf format)")
}

// printFlags lists flags as they are written: --name, or -o for one
// letter, with the placeholder from the usage's `quotes`.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		dash := "--"
		if len(f.Name) == 1 {
			dash = "-"
		}
		head := dash + f.Name
		if name != "" {
			head += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "  %-26s %s\n", head, usage)
	})
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses flags that may come before, between or after positional
// arguments (director build CONFIG -o FILE), and checks the count of
// positional arguments.
func (e *env) parse(fs *flag.FlagSet, args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if u := e.usage[fs]; u != nil {
					u()
				}
				return nil, err
			}
			return nil, fmt.Errorf("%s: %s (see 'director help %s')", fs.Name(), dashes(err.Error()), fs.Name())
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
	fs.Visit(e.given)
	if c := e.cmdOf[fs]; c != nil {
		if err := e.checkGlobals(c); err != nil {
			return nil, err
		}
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		return nil, fmt.Errorf("%s: wrong number of arguments (see 'director help %s')", fs.Name(), fs.Name())
	}
	return pos, nil
}

// flagInMessage is a flag as package flag's errors write it: -name.
var flagInMessage = regexp.MustCompile(`(flag(?: provided but not defined:| needs an argument:)? )-(\w[\w-]+)`)

// dashes rewrites the flags in one of package flag's errors as they are
// typed: --name (one-letter flags keep one dash).
func dashes(msg string) string { return flagInMessage.ReplaceAllString(msg, "$1--$2") }

// dirConfigFlag is " --director-config FILE" when one was given, for a
// printed plan command (a plan carries it; apply of a plan takes none).
func dirConfigFlag(e *env) string {
	if e.dirConfig == "" {
		return ""
	}
	return " --director-config " + shellword.Join(e.dirConfig)
}

// bpffsFlag is " --bpffs DIR" when DIR is not the default, for commands a
// message suggests: they must reach the same director.
func (e *env) bpffsFlag() string {
	if e.bpffs == loader.DefaultBPFFS {
		return ""
	}
	return " --bpffs " + shellword.Join(e.bpffs)
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
