// Package docscheck checks that the documentation's references hold: every
// relative Markdown link in the repository's Markdown files (README.md,
// docs/*.md, bench/results/*.md: every *.md git tracks) names a file of the
// repository (and, with an anchor into a Markdown file, one of its headings),
// and every repository path the prose names in backticks exists. Its test
// runs the check on the repository (make check, make test).
//
// A backticked span counts as a repository path when it starts with one of
// the repository's top-level entries (`vswitch/worker.go`, `lab/`,
// `go.mod`, `./tap/`); host paths (/etc/cni/net.d), other projects' paths
// (pkg/network/node/…), API groups and build output (bin/, ignored by
// .gitignore) do not. `pkg.Name` after a package directory
// (`sdn/master.SubnetAllocator`) must name an identifier of that package, a
// bare Go file name (`persist.go`) must exist somewhere in the tree, and a
// glob (`vswitch/slab*.go`) must match something. Fenced code blocks are
// examples and are not checked.
package docscheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Problem is one reference that does not resolve.
type Problem struct {
	File string // the Markdown file, relative to the root
	Line int
	Ref  string // the reference as written
	Why  string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Ref, p.Why)
}

// Docs lists the Markdown files the check reads, relative to root: every
// *.md file git tracks (git ls-files), so that a document anywhere in the
// repository (README.md, docs/, bench/results/) is held to the same rules.
// Without git or outside a repository it walks the tree instead, leaving
// out hidden directories and the build output .gitignore names at the
// root.
func Docs(root string) ([]string, error) {
	var out []string
	cmd := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*.md")
	if b, err := cmd.Output(); err == nil {
		for _, f := range strings.Split(string(b), "\x00") {
			if f == "" {
				continue
			}
			// A tracked file deleted in the work tree is not a document
			// any more.
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err == nil {
				out = append(out, f)
			}
		}
		sort.Strings(out)
		return out, nil
	}
	ignored := rootIgnored(root)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || ignored[rel]) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".md") {
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// rootIgnored returns the entries .gitignore anchors at the root ("/bin/"):
// build output, never the repository's.
func rootIgnored(root string) map[string]bool {
	ignored := map[string]bool{".git": true}
	if b, err := os.ReadFile(filepath.Join(root, ".gitignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "/") {
				ignored[strings.Trim(l, "/ ")] = true
			}
		}
	}
	return ignored
}

// Check checks the given Markdown files (relative to root) and returns the
// references that do not resolve.
func Check(root string, docs []string) ([]Problem, error) {
	c, err := newChecker(root)
	if err != nil {
		return nil, err
	}
	var probs []Problem
	for _, d := range docs {
		p, err := c.file(d)
		if err != nil {
			return nil, err
		}
		probs = append(probs, p...)
	}
	return probs, nil
}

type checker struct {
	root     string
	top      map[string]bool            // top-level entries that are the repository's
	goFiles  map[string]bool            // base names of every .go file
	headings map[string]map[string]bool // Markdown file → heading slugs
}

func newChecker(root string) (*checker, error) {
	c := &checker{root: root, top: map[string]bool{}, goFiles: map[string]bool{}, headings: map[string]map[string]bool{}}
	ignored := rootIgnored(root)
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !ignored[e.Name()] {
			c.top[e.Name()] = true
		}
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && ignored[d.Name()] && filepath.Dir(p) == filepath.Clean(root) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".go") {
			c.goFiles[d.Name()] = true
		}
		return nil
	})
	return c, err
}

var (
	fence    = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan = regexp.MustCompile("`([^`]+)`")
	// An inline link or image: [text](target "title"). The text may hold
	// code spans; nested brackets are rare enough in these docs to ignore.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(\s|$)`)
	heading    = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	// A path-looking span: path segments of ordinary file-name characters,
	// optionally globbed, optionally ending in "/".
	pathSpan = regexp.MustCompile(`^(\./)?[A-Za-z0-9_.*-]+(/[A-Za-z0-9_.*-]+)*/?$`)
	// A package path with an identifier: sdn/master.SubnetAllocator.
	qualIdent = regexp.MustCompile(`^([a-z0-9_]+(?:/[a-z0-9_]+)*)\.([A-Z][A-Za-z0-9_]*)$`)
	bareGo    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*\.go$`)
	docPath   = regexp.MustCompile(`\bdocs/[A-Za-z0-9_.-]+\.md\b`)
	spec      = regexp.MustCompile(`\bSPEC\b`)
)

// lines returns the file's lines outside fenced code blocks, with their
// numbers; the rest are empty strings.
func lines(b []byte) []string {
	var out []string
	in := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if fence.MatchString(l) {
			in = !in
			out = append(out, "")
			continue
		}
		if in {
			out = append(out, "")
		} else {
			out = append(out, l)
		}
	}
	return out
}

func (c *checker) file(doc string) ([]Problem, error) {
	b, err := os.ReadFile(filepath.Join(c.root, doc))
	if err != nil {
		return nil, err
	}
	var probs []Problem
	bad := func(line int, ref, why string) {
		probs = append(probs, Problem{File: doc, Line: line, Ref: ref, Why: why})
	}
	for i, l := range lines(b) {
		n := i + 1
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(l, -1) {
			targets = append(targets, m[1])
		}
		if m := refDef.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			if why := c.link(doc, t); why != "" {
				bad(n, t, why)
			}
		}
		// Prose outside code spans and link targets: a doc named by its
		// path (docs/cni.md "Daemon restart"), and the specification,
		// which is not in the repository.
		prose := inlineLink.ReplaceAllString(codeSpan.ReplaceAllString(l, ""), "]")
		for _, m := range docPath.FindAllString(prose, -1) {
			if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(m))); err != nil {
				bad(n, m, "no such file in the repository")
			}
		}
		if spec.MatchString(prose) {
			bad(n, "SPEC", "the product specification is not in the repository: cite docs/targets.md or the doc that holds the fact")
		}
		// Code spans inside a link's text are checked like any other.
		for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
			if why := c.span(m[1]); why != "" {
				bad(n, "`"+m[1]+"`", why)
			}
		}
	}
	return probs, nil
}

// link checks one link target written in doc; it returns why it does not
// resolve, or "".
func (c *checker) link(doc, target string) string {
	if target == "" {
		return "empty link"
	}
	if i := strings.Index(target, ":"); i > 0 && !strings.ContainsAny(target[:i], "/#.") {
		return "" // a URL: https:, mailto:, …
	}
	file, anchor, _ := strings.Cut(target, "#")
	var p string
	switch {
	case file == "":
		p = doc
	case strings.HasPrefix(file, "/"):
		return "absolute link: write it relative to " + doc
	default:
		p = path.Join(path.Dir(doc), file)
	}
	if p == ".." || strings.HasPrefix(p, "../") {
		return "outside the repository"
	}
	if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(p))); err != nil {
		return "no such file in the repository"
	}
	if anchor == "" || !strings.HasSuffix(p, ".md") {
		return ""
	}
	slugs, err := c.slugs(p)
	if err != nil {
		return err.Error()
	}
	if !slugs[anchor] {
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, p)
	}
	return ""
}

// slugs returns the anchors of a Markdown file's headings (GitHub's rules)
// and of its explicit <a name|id="…"> anchors.
func (c *checker) slugs(p string) (map[string]bool, error) {
	if s, ok := c.headings[p]; ok {
		return s, nil
	}
	b, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(p)))
	if err != nil {
		return nil, err
	}
	s := map[string]bool{}
	seen := map[string]int{}
	for _, l := range lines(b) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			s[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := Slug(m[1])
		if k := seen[slug]; k > 0 {
			s[fmt.Sprintf("%s-%d", slug, k)] = true
		} else {
			s[slug] = true
		}
		seen[slug]++
	}
	c.headings[p] = s
	return s, nil
}

var mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

// Slug is the anchor GitHub gives a heading's text: inline markup reduced
// to its text, lower case, every character other than a letter, a digit, a
// space, '-' or '_' dropped, and spaces turned into '-'. A repeated heading
// gets "-1", "-2", … appended, which the caller counts.
func Slug(text string) string {
	text = mdLink.ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// span checks one backticked span; it returns why the repository path it
// names does not exist, or "" (also when it names no repository path).
func (c *checker) span(s string) string {
	s = strings.TrimSpace(s)
	if m := qualIdent.FindStringSubmatch(s); m != nil && strings.Contains(m[1], "/") && c.top[strings.SplitN(m[1], "/", 2)[0]] {
		return c.ident(m[1], m[2])
	}
	if bareGo.MatchString(s) {
		if !c.goFiles[s] {
			return "no Go file of that name in the repository"
		}
		return ""
	}
	if !pathSpan.MatchString(s) {
		return ""
	}
	s = strings.TrimPrefix(s, "./")
	first, _, _ := strings.Cut(s, "/")
	if !c.top[first] || (first == s && !c.isFileName(s)) {
		// Not under one of the repository's top-level entries, or a bare
		// word that merely shares a directory's name (`switch`, `tap`).
		return ""
	}
	p := filepath.Join(c.root, filepath.FromSlash(strings.TrimSuffix(s, "/")))
	if strings.Contains(s, "*") {
		if m, _ := filepath.Glob(p); len(m) == 0 {
			return "the pattern matches no file in the repository"
		}
		return ""
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "no such file or directory in the repository"
	}
	if strings.HasSuffix(s, "/") && !fi.IsDir() {
		return "not a directory"
	}
	return ""
}

// isFileName reports whether a top-level word is written as a file (go.mod,
// Makefile) rather than a word that happens to name a directory.
func (c *checker) isFileName(s string) bool {
	fi, err := os.Stat(filepath.Join(c.root, s))
	return err == nil && !fi.IsDir()
}

// ident checks that the package in directory dir declares name (a
// function, method, type, variable or constant, test or example
// included).
func (c *checker) ident(dir, name string) string {
	d := filepath.Join(c.root, filepath.FromSlash(dir))
	files, _ := filepath.Glob(filepath.Join(d, "*.go"))
	if len(files) == 0 {
		return "no Go package in " + dir
	}
	decl := regexp.MustCompile(`(?m)^(func(\s+\([^)]*\))?\s+` + name + `\b|type\s+` + name + `\b|\s*(var|const)?\s*` + name + `\s+(=|[A-Za-z*\[]))`)
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && decl.Match(b) {
			return ""
		}
	}
	return fmt.Sprintf("package %s declares no %s", dir, name)
}

// Packages lists the module's package directories under root (those with a
// Go file other than a test), relative to root: hidden directories,
// testdata, build output and nested modules (tools/kube) excluded.
func Packages(root string) ([]string, error) {
	set := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || rel == "bin") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			set[path.Dir(rel)] = true
		}
		return nil
	})
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out, err
}

// TablePaths returns the paths the first column of a Markdown file's
// tables names in backticks, without a trailing "/".
func TablePaths(file string) (map[string]bool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range lines(b) {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		// The first cell ends at the first "|" not escaped as "\|".
		cell := strings.ReplaceAll(l[1:], `\|`, "")
		cell, _, _ = strings.Cut(cell, "|")
		for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
			out[strings.TrimSuffix(m[1], "/")] = true
		}
	}
	return out, nil
}
