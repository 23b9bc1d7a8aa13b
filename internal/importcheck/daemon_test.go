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

// TestDaemonStaysSmall: internal/daemon.Daemon ties the dataplane, the
// node state, the control-plane follower and the live upgrade together
// and does none of their work (docs/architecture.md); at most 25 methods
// keep it that way. A new responsibility goes to the part it belongs to.
func TestDaemonStaysSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/gvswitch/gvs/internal/daemon").Output()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(out)), "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Daemon" {
					methods = append(methods, fn.Name.Name)
				}
			}
		}
	}
	if len(methods) == 0 {
		t.Fatal("found no method of *Daemon: is the walk looking at the right package?")
	}
	if len(methods) > 25 {
		t.Errorf("Daemon has %d methods, at most 25: %v", len(methods), methods)
	}
}
