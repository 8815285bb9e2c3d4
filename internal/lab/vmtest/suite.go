package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// A kernel test is a Test function that calls testenv.Kernel, itself or
// through its package's helpers: the guest runs every one of them, so a
// kernel test added later runs on every kernel without being listed here.
// These are left to the host, each for a reason that is not the kernel's;
// the harness prints them at every run.
var hostOnly = map[string]string{
	"cmd/director.TestLoadUnderIPNetnsExec": "needs iproute2's 'ip netns exec', which the guest does not carry",
	"internal/lab/demo.TestMakeLab":         "runs make and the Go toolchain, which the guest does not carry; the lab is the deployed testbed the doctor tests drive",
	"internal/lab/demo.TestMakeDemo":        "runs make and the Go toolchain, as TestMakeLab",
	"internal/lab/testbed.TestFleetSpreadsAndAgrees": "needs BIRD, the fleet's router, which the guest does not carry; " +
		"its directors' datapath is the one the other tests drive",
	"internal/lab/testbed.TestFleetFailures":     "needs BIRD, as TestFleetSpreadsAndAgrees",
	"internal/lab/testbed.TestFleetIPv6Underlay": "needs BIRD, as TestFleetSpreadsAndAgrees",
	"internal/lab/testbed.TestFleetJoinWaitsForHistory": "needs BIRD, as TestFleetSpreadsAndAgrees; " +
		"the history it waits for is TestHistoryChurn's, which the guests run",
	"internal/lab/testbed.TestStatusPageInABrowser": "needs chromium, which the guest does not carry; the page is the service's, " +
		"whose datapath the other tests drive",
}

// testFilter says which kernel tests to run: all, unless -run says.
var testFilter = func(string) bool { return true }

// pkgArgs are the flags a package's test binary gets in the guest, where
// the CPU is emulated and several times slower.
var pkgArgs = map[string][]string{
	// 4,096 of the 65,536 ports per address and protocol, besides every
	// bind's edges: the whole sweep alone would take seven minutes.
	"loader": {"-sweep.sample=2048"},
}

// A pkgTests is one package's test binary and the kernel tests it runs.
type pkgTests struct {
	Rel     string   // the package's directory, relative to the module: loader, cmd/director
	Binary  string   // the built test binary on the host
	Tests   []string // the kernel tests, by name
	Args    []string // pkgArgs
	Skipped []string // kernel tests left to the host, with the reason
}

// discover lists the module's kernel tests by package: it parses every
// package's test files for Test functions whose body calls testenv.Kernel.
func discover(root string) ([]pkgTests, error) {
	cmd := exec.Command("go", "list", "-json=Dir,ImportPath,TestGoFiles,XTestGoFiles", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkgTests
	used := map[string]bool{}
	for dec.More() {
		var p struct {
			Dir                       string
			TestGoFiles, XTestGoFiles []string
		}
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			return nil, err
		}
		rel = filepath.ToSlash(rel)
		var pt pkgTests
		pt.Rel = rel
		var files []string
		for _, f := range append(p.TestGoFiles, p.XTestGoFiles...) {
			files = append(files, filepath.Join(p.Dir, f))
		}
		names, err := kernelTests(files...)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if why, ok := hostOnly[rel+"."+n]; ok {
				pt.Skipped = append(pt.Skipped, n+": "+why)
				used[rel+"."+n] = true
				continue
			}
			if testFilter(n) {
				pt.Tests = append(pt.Tests, n)
			}
		}
		if len(pt.Tests) == 0 {
			continue
		}
		sort.Strings(pt.Tests)
		pt.Args = pkgArgs[rel]
		pkgs = append(pkgs, pt)
	}
	for name := range hostOnly {
		if !used[name] {
			return nil, fmt.Errorf("hostOnly lists %s, which is no kernel test (renamed?)", name)
		}
	}
	return pkgs, nil
}

// kernelGates are testenv's functions that make a test a kernel test:
// Kernel, and those that call it for a test that needs more (NICs).
var kernelGates = map[string]bool{"Kernel": true, "NICs": true, "SingleQueueNIC": true}

// kernelTests are the Test functions of one package's test files that
// call testenv.Kernel, directly or through functions of those files.
func kernelTests(files ...string) ([]string, error) {
	calls := map[string][]string{} // function name: the plain functions it calls
	kernel := map[string]bool{}    // calls testenv.Kernel itself
	var tests []string
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			if strings.HasPrefix(name, "Test") && name != "TestMain" {
				tests = append(tests, name)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch f := c.Fun.(type) {
				case *ast.Ident:
					calls[name] = append(calls[name], f.Name)
				case *ast.SelectorExpr:
					if x, ok := f.X.(*ast.Ident); ok && x.Name == "testenv" && kernelGates[f.Sel.Name] {
						kernel[name] = true
					}
				}
				return true
			})
		}
	}
	// Whatever calls a function that needs the kernel needs it too.
	for changed := true; changed; {
		changed = false
		for fn, callees := range calls {
			for _, c := range callees {
				if kernel[c] && !kernel[fn] {
					kernel[fn], changed = true, true
				}
			}
		}
	}
	var names []string
	for _, t := range tests {
		if kernel[t] {
			names = append(names, t)
		}
	}
	return names, nil
}

// runPattern is the -test.run pattern of exactly these tests.
func runPattern(tests []string) string { return "^(" + strings.Join(tests, "|") + ")$" }
