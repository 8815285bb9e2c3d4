package doctor

import (
	"errors"
	"testing"
)

// TestExitCode: 0 when nothing is found, 1 when a problem is (whatever
// else could not be checked), 2 when nothing is found but a check could
// not be made; skipped checks change nothing.
func TestExitCode(t *testing.T) {
	ok := func() ([]Finding, string, error) { return nil, "fine", nil }
	skipped := func() ([]Finding, string, error) { return skip("not here") }
	broken := func() ([]Finding, string, error) { return nil, "", errors.New("netlink refused") }
	found := func() ([]Finding, string, error) { return []Finding{{What: "x", Fix: "y"}}, "", nil }
	for _, c := range []struct {
		name   string
		checks []func() ([]Finding, string, error)
		want   int
	}{
		{"clean", nil, ExitClean},
		{"ok and skipped", []func() ([]Finding, string, error){ok, skipped}, ExitClean},
		{"could not check", []func() ([]Finding, string, error){ok, broken}, ExitUnknown},
		{"a problem", []func() ([]Finding, string, error){broken, found, ok}, ExitFindings},
	} {
		r := &Report{}
		for i, f := range c.checks {
			r.run(string(rune('a'+i)), f)
		}
		if got := r.ExitCode(); got != c.want {
			t.Errorf("%s: exit %d, want %d (%+v)", c.name, got, c.want, r.Checks)
		}
	}
	r := &Report{}
	r.run("b", broken)
	r.run("s", skipped)
	if r.Checks[0].Status != Error || r.Checks[0].Detail != "netlink refused" || r.Checks[1].Status != Skipped || r.Checks[1].Detail != "not here" {
		t.Errorf("statuses: %+v", r.Checks)
	}
}
