package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/director/director/loader"
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

// TestAttachmentFixesAreCommands (issue 47, item 5): the fix for an
// attachment whose interface is gone starts with the detach command of
// the program that holds it, as it would be typed, for the director and
// the backend alike.
func TestAttachmentFixesAreCommands(t *testing.T) {
	gone := []loader.Attachment{{Interface: "u5a", State: loader.StateGone, Mode: loader.ModeNative}}
	for cli, want := range map[string]string{"director": "director detach u5a; ", "director backend": "director backend detach u5a; "} {
		fs, _, err := checkAttachments(gone, nil, cli)
		if err != nil || len(fs) != 1 {
			t.Fatalf("%s: %v %v", cli, fs, err)
		}
		if !strings.HasPrefix(fs[0].Fix, want) || !strings.Contains(fs[0].Fix, cli+" attach IFACE") {
			t.Errorf("%s: the fix %q is not %q and an attach", cli, fs[0].Fix, want)
		}
	}
	fs, _, _ := checkAttachments([]loader.Attachment{{Interface: "e0", State: "attached", Mode: loader.ModeGeneric}}, nil, "director backend")
	if len(fs) != 1 || !strings.HasPrefix(fs[0].Fix, "director backend attach e0 --mode native") {
		t.Errorf("generic mode's fix: %v", fs)
	}
}
