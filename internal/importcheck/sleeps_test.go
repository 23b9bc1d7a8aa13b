package importcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSleepsSaySo: a time.Sleep in a test either paces traffic or waits out
// a timeout that the test is about, and a comment on its line or the line
// above says which. Synchronisation uses events, hooks or testutil.Poll.
func TestSleepsSaySo(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := strings.TrimSpace(string(root))
	files, err := exec.Command("git", "-C", dir, "ls-files", "*_test.go").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	n := 0
	for _, name := range strings.Fields(string(files)) {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		commented := map[int]bool{}
		for _, g := range f.Comments {
			for _, c := range g.List {
				commented[fset.Position(c.Pos()).Line] = true
			}
		}
		ast.Inspect(f, func(x ast.Node) bool {
			call, ok := x.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Sleep" {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "time" {
				return true
			}
			n++
			line := fset.Position(call.Pos()).Line
			if !commented[line] && !commented[line-1] {
				t.Errorf("%s:%d: time.Sleep without a comment saying what it paces or waits out", name, line)
			}
			return true
		})
	}
	if n == 0 {
		t.Fatal("found no time.Sleep at all: is the walk looking at the right files?")
	}
}
