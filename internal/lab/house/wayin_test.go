package house

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// byPass are the calls that parse or build a config's tables outside the
// pipeline (internal/change): a service that made them would have a way
// to the kernel of its own.
var byPass = map[string]map[string]bool{
	"github.com/director/director/table/config": {"Parse": true, "ParseLimit": true, "ParseFile": true, "ParseSource": true,
		"ParseSourceHealth": true, "ParseSourceReusing": true, "ParseConfigSource": true, "BuildSource": true,
		"BuildSourceReusing": true, "Load": true, "LoadLimit": true},
	"github.com/director/director/table": {"Build": true, "BuildAll": true, "BuildAllReusing": true, "NewBuilder": true},
}

// bypasses lists the calls of one Go source that go around the pipeline.
func bypasses(fset *token.FileSet, path string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	names := map[string]map[string]bool{} // the file's name for a package -> its calls
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if calls := byPass[p]; calls != nil {
			name := p[strings.LastIndex(p, "/")+1:]
			if im.Name != nil {
				name = im.Name.Name
			}
			names[name] = calls
		}
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && names[id.Name][sel.Sel.Name] {
			out = append(out, fmt.Sprintf("%s:%d: %s.%s", path, fset.Position(sel.Pos()).Line, id.Name, sel.Sel.Name))
		}
		return true
	})
	return out, nil
}

// TestServiceHasOneWayIn: director run reads and builds its config only
// through internal/change (Read, Input.Build), the way plan and apply do.
func TestServiceHasOneWayIn(t *testing.T) {
	dir := "../../service"
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		bad, err := bypasses(fset, "internal/service/"+e.Name(), src)
		if err != nil {
			t.Fatal(err)
		}
		files++
		for _, b := range bad {
			t.Errorf("%s: around the pipeline (use change.Read and Input.Build)", b)
		}
	}
	if files < 10 {
		t.Fatalf("only %d files in %s", files, dir)
	}
}

// TestBypassesFindsEachKind: the checker itself, on a call of each package,
// renamed or not, and on what it must let through.
func TestBypassesFindsEachKind(t *testing.T) {
	src := `package p

import (
	cfg "github.com/director/director/table/config"
	"github.com/director/director/table"
)

func f() {
	cfg.ParseLimit(nil, table.Limit{})
	table.Build(nil)
	cfg.ParseDirector(nil)
	table.Fingerprint(nil)
}
`
	got, err := bypasses(token.NewFileSet(), "p.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p.go:9: cfg.ParseLimit", "p.go:10: table.Build"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%q, want %q", got, want)
	}
}
