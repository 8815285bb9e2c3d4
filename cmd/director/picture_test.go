package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/director/director/internal/lab/golden"
)

// TestPictures makes the README's pictures with the commands, as an
// operator would, and checks them against the committed ones
// (docs/pictures; -update rewrites them): a table, a change, traffic.
func TestPictures(t *testing.T) {
	dir := t.TempDir()
	pcap := filepath.Join(dir, "medium.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"medium.json", "-o", pcap, "--flows", "20000", "--seed", "7")
	for _, c := range []struct {
		name string
		code int
		args []string
	}{
		{"table.png", 0, []string{"show", cfgDir + "medium.json"}},
		{"change.png", exitChanges, []string{"diff", cfgDir + "small.json", cfgDir + "small-removed.json"}},
		{"traffic.png", 0, []string{"replay", pcap, "--config", cfgDir + "medium.json", "--model"}},
	} {
		out := filepath.Join(dir, c.name)
		if _, errOut, code := runCmd(append(c.args, "--picture", out)...); code != c.code {
			t.Fatalf("%v: exit %d: %s", c.args, code, errOut)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		golden.CheckBinary(t, filepath.Join("docs", "pictures", c.name), got)
	}
	if _, errOut, code := runCmd("show", cfgDir+"small.json", "--picture", filepath.Join(dir, "x.gif")); code != 1 || errOut == "" {
		t.Fatalf("a .gif picture: exit %d %s", code, errOut)
	}
}
