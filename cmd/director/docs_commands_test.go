package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// A docCommand is a command README.md or a page of docs/ shows in a code
// block for a person to run (issue 47, printed commands).
type docCommand struct {
	where string // file:line
	text  string // as printed, continuation lines joined, the prompt ("$ ") dropped
	shown string // in a block that shows its output: the lines after it
}

// key is the command without its comment or spacing, what docCommandRuns
// is keyed by.
func (c docCommand) key() string {
	s := regexp.MustCompile(`\s+#.*$`).ReplaceAllString(c.text, "")
	return strings.Join(strings.Fields(s), " ")
}

// docCommands reads the code blocks of README.md and docs/*.md: every
// line of a sh block is a command; in a plain block, a line starting
// "$ " is one, and the lines after it up to the next command or the
// block's end are its output. JSON and YAML blocks hold none.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	var cmds []docCommand
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(f, "../../")
		lang, in := "", false
		var cur *docCommand
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			line := lines[i]
			if strings.HasPrefix(line, "```") {
				in, lang, cur = !in, strings.TrimPrefix(line, "```"), nil
				continue
			}
			if !in || (lang != "" && lang != "sh") {
				continue
			}
			text, prompted := strings.CutPrefix(line, "$ ")
			if lang == "" && !prompted {
				if cur != nil {
					cur.shown += line + "\n"
				}
				continue
			}
			if strings.TrimSpace(text) == "" {
				continue
			}
			at := i + 1
			for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
				i++
				text = strings.TrimSuffix(text, "\\") + " " + strings.TrimSpace(lines[i])
			}
			cmds = append(cmds, docCommand{where: name + ":" + strconv.Itoa(at), text: text})
			cur = &cmds[len(cmds)-1]
		}
	}
	return cmds
}

// docCommandRuns says, for every command the docs show, which test runs
// it as printed. TestDocsCommandsAreRun keeps it and the docs one list.
var docCommandRuns = map[string]string{
	"make demo":      "internal/lab/demo.TestMakeDemo",
	"make demo-ipv6": "internal/lab/demo.TestMakeDemo",
	"make lab":       "internal/lab/demo.TestMakeLab",
	"make test":      ".ci/run (CI runs the README's test command)",

	"go run ./cmd/director show testdata/configs/small.json":                                      "TestDocsRepoCommands",
	"go run ./cmd/director diff testdata/configs/small.json testdata/configs/small-draining.json": "TestDocsRepoCommands",
	"director diff testdata/configs/small.json testdata/configs/small-draining.json":              "TestDocsRepoCommands",
	docLoad:        "TestDocsCommandsOnHosts",
	docPlan:        "TestDocsCommandsOnHosts",
	docApply:       "TestDocsCommandsOnHosts",
	docAttach:      "TestDocsCommandsOnHosts",
	docStatus:      "TestDocsCommandsOnHosts",
	docStats:       "TestDocsCommandsOnHosts",
	docCapture:     "TestDocsCommandsOnHosts",
	docExplain:     "TestDocsCommandsOnHosts",
	docRun:         "TestDocsCommandsOnHosts",
	docBackendRun:  "TestDocsCommandsOnHosts",
	docBackendDoc:  "TestDocsCommandsOnHosts",
	docBackendExpl: "TestDocsCommandsOnHosts",
}

// The commands TestDocsCommandsOnHosts runs, as the docs print them.
const (
	docLoad        = "director load"
	docPlan        = "director plan forwarding_table.json --director-config /etc/director/director.conf -o plan.json"
	docApply       = "director apply plan.json"
	docAttach      = "director attach eth0 --mode native"
	docStatus      = "director status"
	docStats       = "director stats --watch"
	docCapture     = "director capture --table vip -c 1"
	docExplain     = "director explain tcp 198.51.100.7:40000 10.10.10.10:80"
	docRun         = "director run --config /etc/director/forwarding_table.src.json --director-config /etc/director/director.conf --attach eth0 --metrics 127.0.0.1:9464"
	docBackendRun  = "director backend run --attach eth0 --trust 10.0.1.0/24,10.0.2.0/24 --metrics 127.0.0.1:9465"
	docBackendDoc  = "director backend doctor --config /etc/director/forwarding_table.json"
	docBackendExpl = "director backend explain tcp 198.51.100.9:4000 10.10.10.10:80 --hops 10.77.0.10"
)

// TestDocsCommandsAreRun (issue 47, printed commands): every command a
// code block of README.md or docs/ shows is run as printed by a test
// (docCommandRuns names it), and the list names none the docs dropped.
func TestDocsCommandsAreRun(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range docCommands(t) {
		seen[c.key()] = true
		if _, ok := docCommandRuns[c.key()]; !ok {
			t.Errorf("%s shows %q, which no test runs: run it as printed and list it in docCommandRuns", c.where, c.text)
		}
	}
	var stale []string
	for k := range docCommandRuns {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	for _, k := range stale {
		t.Errorf("docCommandRuns lists %q, which no doc shows any more", k)
	}
	if len(seen) < 19 {
		t.Errorf("found %d distinct commands in the docs' code blocks; the parser lost some", len(seen))
	}
	t.Logf("%d commands shown (%d distinct)", len(docCommands(t)), len(seen))
}

// TestDocsRepoCommands (issue 47, printed commands): the README's first
// commands, run as printed from the repository's root, and the docs'
// diff, whose output they show, prints what they show.
func TestDocsRepoCommands(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("go: %v ('go run' is what the README prints)", err)
	}
	root, _ := filepath.Abs("../..")
	n := 0
	for _, c := range docCommands(t) {
		if docCommandRuns[c.key()] != "TestDocsRepoCommands" {
			continue
		}
		n++
		out, code, _ := runAsPrinted(t, nil, root, c.text)
		want := 0
		if strings.Contains(c.text, " diff ") {
			want = exitChanges // as diff(1): the README's comment says so
		}
		if want != 0 && strings.HasPrefix(c.text, "go run ") {
			// go run exits 1 for any failing program, and says the
			// program's own code: the README's comment tells both.
			if !strings.Contains(out, "exit status 2") || !strings.Contains(c.text, "go run reports it as 1") {
				t.Errorf("%s: %s: the program's exit 2 is not told:\n%s", c.where, c.text, out)
			}
			want = 1
		}
		if code != want {
			t.Errorf("%s: %s: exit %d, want %d\n%s", c.where, c.text, code, want, out)
			continue
		}
		if !strings.Contains(out, "table api") && !strings.Contains(out, `table "api"`) {
			t.Errorf("%s: %s printed no table api:\n%s", c.where, c.text, out)
		}
		if c.shown != "" && out != c.shown {
			t.Errorf("%s shows what %s prints, but it prints:\n%s\nthe doc shows:\n%s", c.where, c.text, out, c.shown)
		}
	}
	if n < 3 {
		t.Errorf("ran %d of the README's repository commands", n)
	}
}
