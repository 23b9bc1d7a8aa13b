package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// repoRoot is the directory that holds go.mod, above the test's own.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// TestDocs checks every Markdown file of the repository (Docs): relative
// links, anchors and backticked repository paths.
func TestDocs(t *testing.T) {
	root := repoRoot(t)
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	probs, err := Check(root, docs)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

func TestSlug(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Install", "install"},
		{"Building rules in Go", "building-rules-in-go"},
		{"Latency (SPEC §7: CNI ADD p99 ≤ 20 ms over 100 pods)", "latency-spec-7-cni-add-p99--20-ms-over-100-pods"},
		{"`vswitch.Port` and [links](x.md)", "vswitchport-and-links"},
		{"NAT egress, services and host access", "nat-egress-services-and-host-access"},
	} {
		if got := Slug(tc.in); got != tc.want {
			t.Errorf("Slug(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCheckFixture runs the check on a small tree of its own: what it must
// report, and what it must leave alone.
func TestCheckFixture(t *testing.T) {
	root := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module x\n")
	write(".gitignore", "/bin/\n")
	write("pkg/a.go", "package pkg\n")
	write("pkg/sub/b.go", "package sub\n\nfunc Do() {}\n\ntype T int\n\nfunc (T) M() {}\n\nconst (\n\tC = 1\n)\n")
	write("docs/other.md", "# Other\n\n## Install it\n\n## Install it\n")
	write("README.md", "# X\n\n"+
		"[ok](docs/other.md#install-it) docs/other.md `SPEC` [ok2](docs/other.md#install-it-1) [ok3](#x) [web](https://example.com/a.md)\n"+
		"`pkg/a.go` `pkg/` `./pkg/` `pkg/*.go` `go.mod` `pkg/sub.Do` `pkg/sub.T` `pkg/sub.M` `pkg/sub.C` `pkg` `a.go`\n"+
		"`/etc/cni/net.d` `bin/gvs` `k8s.io/api` `10.0.0.0/8` `other/x.go` `_linux.go`\n"+
		"```\n`pkg/gone.go` [x](gone.md)\n```\n"+
		"[bad](docs/gone.md) [badanchor](docs/other.md#nope) `pkg/gone.go` `pkg/a.go/` `pkg/*.c` `gone.go` `pkg/sub.Gone` docs/gone2.md SPEC\n")
	write("bin/gvs", "")
	probs, err := Check(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"docs/gone.md": true, "docs/other.md#nope": true, "`pkg/gone.go`": true,
		"`pkg/a.go/`": true, "`pkg/*.c`": true, "`gone.go`": true, "`pkg/sub.Gone`": true, "docs/gone2.md": true, "SPEC": true,
	}
	for _, p := range probs {
		if !want[p.Ref] {
			t.Errorf("unexpected problem: %v", p)
		}
		if p.Line != 9 {
			t.Errorf("problem on line %d, want 9: %v", p.Line, p)
		}
		delete(want, p.Ref)
	}
	for ref := range want {
		t.Errorf("%s not reported", ref)
	}
}

// TestPackageTable checks that README.md's table of packages ("What is
// here") has a row for every package directory of the module.
func TestPackageTable(t *testing.T) {
	root := repoRoot(t)
	pkgs, err := Packages(root)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := TablePaths(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("README.md has no table of packages")
	}
	for _, p := range pkgs {
		if !rows[p] {
			t.Errorf("README.md's table has no row naming `%s`", p)
		}
	}
}

// TestDocsList checks which files Docs hands the check: in the repository,
// README.md and every docs/*.md among git's Markdown files; in a tree that
// is no git repository, every *.md but hidden directories' and root-ignored
// build output's.
func TestDocsList(t *testing.T) {
	root := repoRoot(t)
	docs, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range docs {
		got[d] = true
	}
	want, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, filepath.Join(root, "README.md"))
	for _, w := range want {
		rel, _ := filepath.Rel(root, w)
		if !got[filepath.ToSlash(rel)] {
			t.Errorf("Docs(%s) does not list %s", root, rel)
		}
	}

	tree := t.TempDir()
	for name, body := range map[string]string{
		".gitignore":           "/bin/\n",
		"README.md":            "# X\n",
		"bench/results/r.md":   "# R\n",
		"bin/out.md":           "# build output\n",
		".hidden/h.md":         "# hidden\n",
		"bench/results/r.json": "{}\n",
	} {
		p := filepath.Join(tree, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	docs, err = Docs(tree)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(docs) != "[README.md bench/results/r.md]" {
		t.Errorf("Docs of a tree without git = %v, want [README.md bench/results/r.md]", docs)
	}
}
