package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOperationsCommandTable: the manual's command table is one table (a
// blank line would end it, and the rows after would render as text) and
// has a row for every command.
func TestOperationsCommandTable(t *testing.T) {
	data, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "| command | what it does |\n| --- | --- |\n")
	if !ok {
		t.Fatal("docs/operations.md has no command table")
	}
	var rows []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	tableText := strings.Join(rows, "\n")
	for _, c := range commands {
		if !strings.Contains(tableText, "`"+c.name+" ") && !strings.Contains(tableText, "`"+c.name+"`") {
			t.Errorf("the command table (%d rows, up to the first line that is not a row) has no row for %s", len(rows), c.name)
		}
	}
}

// TestDocsLinks: README stays the first hour's page, and no link in it or
// in docs/ points at a file the repository does not have.
func TestDocsLinks(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 150 {
		t.Errorf("README.md has %d lines; the manual belongs in docs/ (at most 150)", n)
	}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(files))
	}
	files = append(files, "../../README.md")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links %s, which does not exist", strings.TrimPrefix(f, "../../"), target)
			}
		}
		// A file named in prose as docs/X.md or X.md must exist too.
		for _, m := range regexp.MustCompile("`?((?:docs/)?[a-z-]+\\.md)`?").FindAllStringSubmatch(string(data), -1) {
			name := m[1]
			if !strings.HasPrefix(name, "docs/") && name != "README.md" {
				name = "docs/" + name
			}
			if _, err := os.Stat(filepath.Join("../..", name)); err != nil {
				t.Errorf("%s names %s, which does not exist", strings.TrimPrefix(f, "../../"), m[1])
			}
		}
	}
}
