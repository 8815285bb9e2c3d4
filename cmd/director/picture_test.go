package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// TestPictureOfOneTable (issue 49): --table draws the table it names
// alone, changed or not, in each command that draws; a name that is no
// table's, --table without --picture, and more tables than a picture
// holds without --table are refused, naming the way out, and draw
// nothing.
func TestPictureOfOneTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pcap := filepath.Join(dir, "medium.pcap")
	mustRun(t, 0, "gen-capture", "--config", cfgDir+"medium.json", "-o", pcap, "--flows", "500", "--seed", "7")
	pic := filepath.Join(dir, "one.svg")
	for _, c := range []struct {
		code int
		args []string
	}{
		{0, []string{"show", cfgDir + "medium.json"}},
		{exitChanges, []string{"diff", cfgDir + "medium.json", cfgDir + "small.json"}},
		{0, []string{"replay", pcap, "--config", cfgDir + "medium.json", "--model"}},
	} {
		os.Remove(pic)
		_, errOut, code := runCmd(append(c.args, "--picture", pic, "--table", "dns")...)
		if code != c.code || !strings.Contains(errOut, "picture of 1 table written to "+pic) {
			t.Errorf("%s --table dns: exit %d: %s", c.args[0], code, errOut)
		}
		svg, _ := os.ReadFile(pic)
		if !strings.Contains(string(svg), `">dns`) || strings.Contains(string(svg), `">web`) || strings.Contains(string(svg), `">git`) {
			t.Errorf("%s --table dns: the picture is not of dns alone", c.args[0])
		}
		os.Remove(pic)
		_, errOut, code = runCmd(append(c.args, "--picture", pic, "--table", "nosuch")...)
		if code != 1 || !strings.Contains(errOut, `--table "nosuch": no table of that name (the tables are `) {
			t.Errorf("%s --table nosuch: exit %d: %s", c.args[0], code, errOut)
		}
		if _, err := os.Stat(pic); err == nil {
			t.Errorf("%s --table nosuch drew a picture", c.args[0])
		}
		_, errOut, code = runCmd(append(c.args, "--table", "dns")...)
		if code != 1 || !strings.Contains(errOut, "--table NAME chooses the table --picture draws; give --picture FILE too") {
			t.Errorf("%s --table without --picture: exit %d: %s", c.args[0], code, errOut)
		}
	}
	// More tables than a picture holds: one at a time.
	var b strings.Builder
	b.WriteString(`{"tables": [`)
	for i := 0; i <= maxPanels; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"name": "t%d", "hash_key": "%032x", "seed": "%032x", "binds": [{"ip": "10.0.%d.1", "proto": "tcp", "port": 80}],
		  "backends": [{"ip": "192.168.0.1", "state": "active", "healthy": true}]}`, i, i+1, i+1, i)
	}
	b.WriteString("]}")
	many := filepath.Join(dir, "many.json")
	os.WriteFile(many, []byte(b.String()), 0o600)
	_, errOut, code := runCmd("show", many, "--picture", pic)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("--picture: %d tables to draw, and a picture holds %d: draw one at a time with --table NAME", maxPanels+1, maxPanels)) {
		t.Errorf("show of %d tables: exit %d: %s", maxPanels+1, code, errOut)
	}
	_, errOut, code = runCmd("show", many, "--picture", pic, "--table", "t32")
	if code != 0 || !strings.Contains(errOut, "picture of 1 table written") {
		t.Errorf("show of %d tables, --table t32: exit %d: %s", maxPanels+1, code, errOut)
	}
}
