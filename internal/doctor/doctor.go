// Package doctor checks a director host or a backend host for the
// misconfigurations that break a GLB-style deployment: each check names
// what it found and gives the command that fixes it. It reads the pins,
// the kernel's tables (addresses, routes, neighbours, sysctls) and, on a
// director, sends one probe to each VIP to see that the network routes it
// here. Nothing else is changed.
package doctor

import (
	"fmt"
	"os"
	"strings"
)

// Status is a check's outcome.
type Status string

// A check is ok, found problems, did not apply here (skipped: no IPv6
// source, no service running...) or could not be made (error).
const (
	OK      Status = "ok"
	Problem Status = "problem"
	Skipped Status = "skipped"
	Error   Status = "error"
)

// Check is one check's outcome.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Detail says what was checked and found, when ok, skipped or error.
	Detail   string    `json:"detail,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
}

// Finding is one problem, and the command that fixes it.
type Finding struct {
	What string `json:"what"`
	Fix  string `json:"fix"`
	// Run are the commands that put it right, to be run as printed, in
	// order, where the fix is commands the doctor can spell out whole;
	// each is in Fix word for word.
	Run []string `json:"run,omitempty"`
}

// fixBy is a finding whose fix is cmds, said with why before and after.
func fixBy(what, why string, cmds ...string) Finding {
	return Finding{What: what, Fix: strings.Join(cmds, "; ") + why, Run: cmds}
}

// Report is a host's checks, in the order they ran.
type Report struct {
	Host   string  `json:"host"` // director or backend
	Checks []Check `json:"checks"`
}

// Exit codes: 0 nothing found, 1 problems found, 2 a check could not be
// made (and none found a problem).
const (
	ExitClean    = 0
	ExitFindings = 1
	ExitUnknown  = 2
)

// ExitCode is r's exit status.
func (r *Report) ExitCode() int {
	code := ExitClean
	for _, c := range r.Checks {
		switch c.Status {
		case Problem:
			return ExitFindings
		case Error:
			code = ExitUnknown
		}
	}
	return code
}

// Findings counts the problems found.
func (r *Report) Findings() int {
	n := 0
	for _, c := range r.Checks {
		n += len(c.Findings)
	}
	return n
}

// Named is the check called name, or nil.
func (r *Report) Named(name string) *Check {
	for i := range r.Checks {
		if r.Checks[i].Name == name {
			return &r.Checks[i]
		}
	}
	return nil
}

// run records check name: fn returns its findings, or the detail of a
// clean check, or an error (could not check), or skip (does not apply).
func (r *Report) run(name string, fn func() ([]Finding, string, error)) {
	fs, detail, err := fn()
	c := Check{Name: name, Status: OK, Detail: detail, Findings: fs}
	switch {
	case err == errSkip:
		c.Status = Skipped
	case err != nil:
		c.Status, c.Detail = Error, err.Error()
	case len(fs) > 0:
		c.Status = Problem
	}
	r.Checks = append(r.Checks, c)
}

// errSkip marks a check that does not apply; the detail says why.
var errSkip = skipError{}

type skipError struct{}

func (skipError) Error() string { return "skipped" }

// skip is a check's result when it does not apply, for the reason given.
func skip(why string) ([]Finding, string, error) { return nil, why, errSkip }

// sysctl reads a sysctl given by its path's parts ("net", "ipv4", "conf",
// "eth0", "rp_filter"), and gives its name as sysctl(8) takes it.
func sysctl(parts ...string) (value, name string, err error) {
	name = strings.Join(parts, ".")
	for _, p := range parts {
		if strings.Contains(p, ".") { // an interface such as eth0.100: sysctl(8) takes slashes then
			name = strings.Join(parts, "/")
		}
	}
	v, err := os.ReadFile("/proc/sys/" + strings.Join(parts, "/"))
	if err != nil {
		return "", name, err
	}
	return strings.TrimSpace(string(v)), name, nil
}

// sysctlFix is the command that sets a sysctl.
func sysctlFix(name, value string) string { return fmt.Sprintf("sysctl -w %s=%s", name, value) }
