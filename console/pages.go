package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gvswitch/gvs/sdn/why"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"bytes": humanBytes,
	"rate":  func(bps float64) string { return humanBytes(uint64(bps)) + "/s" },
	"labels": func(m map[string]string) string {
		var parts []string
		for _, k := range sortedKeys(m) {
			parts = append(parts, k+"="+m[k])
		}
		return strings.Join(parts, ", ")
	},
	"when": func(t time.Time) string { return t.UTC().Format("15:04:05 UTC") },
	"inc":  func(i int) int { return i + 1 },
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// data returns page name's template data for viewer v.
func (s *Server) data(ctx context.Context, name string, r *http.Request, v Viewer) (any, error) {
	switch name {
	case "matrix":
		return s.matrixData(ctx, r, v)
	case "why":
		return s.whyData(ctx, r, v)
	}
	view, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	return view.For(v.Scope), nil
}

// tracePage is what the matrix and "why" pages show besides their result.
type tracePage struct {
	// Missing says why the page cannot answer (no Tracer, or the viewer
	// may not see the whole cluster); the rest is empty then.
	Missing string
	Target  string
	Pods    []why.Pod
	Error   string
}

// tracePods returns the pods the Tracer knows (every node's, as the nodes
// report them), or why the page cannot answer.
func (s *Server) tracePods(ctx context.Context, v Viewer) ([]why.Pod, string, error) {
	if s.cfg.Tracer == nil || s.cfg.Pods == nil {
		msg := s.cfg.TracerMissing
		if msg == "" {
			msg = "No trace access to the nodes is configured."
		}
		return nil, msg, nil
	}
	if !v.Scope.All {
		// A trace shows the rules of the nodes it crosses, other projects'
		// included: only a viewer of the whole cluster may ask.
		return nil, "The traces show every project's rules on the nodes they cross: only a viewer of the whole cluster may run them.", nil
	}
	view, err := s.load(ctx)
	if err != nil {
		return nil, "", err
	}
	var nodes []string
	for _, n := range view.Nodes {
		if n.FixedVNID == nil {
			nodes = append(nodes, n.Name)
		}
	}
	pods, err := why.ListPods(ctx, s.cfg.Pods, nodes)
	return pods, "", err
}

// MatrixPage is the matrix page's data.
type MatrixPage struct {
	tracePage
	// Projects is the filter asked for ("alpha,beta"; "" for all).
	Projects string
	M        why.Reachability
}

// Cell returns the answer for row i, column j.
func (m MatrixPage) Cell(i, j int) why.Answer { return m.M.Answers[i][j] }

func (s *Server) matrixData(ctx context.Context, r *http.Request, v Viewer) (MatrixPage, error) {
	var p MatrixPage
	tg, err := why.ParseTarget(r.URL.Query().Get("target"))
	if err != nil {
		tg = why.Target{Proto: "tcp", Port: 8080}
		p.Error = err.Error()
	}
	if r.URL.Query().Get("target") == "" {
		tg = why.Target{Proto: "tcp", Port: 8080}
	}
	p.Target = tg.String()
	pods, missing, err := s.tracePods(ctx, v)
	if err != nil {
		return p, err
	}
	if p.Missing = missing; missing != "" {
		return p, nil
	}
	if pr := strings.TrimSpace(r.URL.Query().Get("projects")); pr != "" {
		// Every pair is two traces: a filter keeps a large cluster's
		// matrix to the projects asked about.
		p.Projects = pr
		want := strings.Split(pr, ",")
		pods = slices.DeleteFunc(slices.Clone(pods), func(p why.Pod) bool {
			return !slices.Contains(want, p.Namespace)
		})
	}
	p.Pods = pods
	key := tg.String() + "|" + p.Projects
	s.mu.Lock()
	c, ok := s.matrix[key]
	s.mu.Unlock()
	if ok && time.Since(c.at) < 5*s.cfg.Refresh && samePods(c.m.Pods, pods) {
		p.M = c.m
		return p, nil
	}
	m, err := why.Matrix(ctx, s.cfg.Tracer, pods, tg)
	if err != nil {
		return p, err
	}
	s.mu.Lock()
	s.matrix[key] = cachedMatrix{m: m, at: time.Now()}
	s.mu.Unlock()
	p.M = m
	return p, nil
}

func samePods(a, b []why.Pod) bool { return slices.Equal(a, b) }

// WhyPage is the "why" page's data.
type WhyPage struct {
	tracePage
	From, To string
	Answer   *why.Answer
}

func (s *Server) whyData(ctx context.Context, r *http.Request, v Viewer) (WhyPage, error) {
	q := r.URL.Query()
	p := WhyPage{From: q.Get("from"), To: q.Get("to")}
	p.Target = q.Get("target")
	if p.Target == "" {
		p.Target = "tcp/8080"
	}
	pods, missing, err := s.tracePods(ctx, v)
	if err != nil {
		return p, err
	}
	if p.Missing = missing; missing != "" {
		return p, nil
	}
	p.Pods = pods
	if p.From == "" || p.To == "" {
		return p, nil
	}
	tg, err := why.ParseTarget(p.Target)
	if err != nil {
		p.Error = err.Error()
		return p, nil
	}
	from, err := why.Find(pods, p.From)
	if err != nil {
		p.Error = err.Error()
		return p, nil
	}
	to, err := why.Find(pods, p.To)
	if err != nil {
		p.Error = err.Error()
		return p, nil
	}
	a, err := why.Ask(ctx, s.cfg.Tracer, why.Question{From: from, To: to, Target: tg})
	if err != nil {
		p.Error = err.Error()
		return p, nil
	}
	p.Answer = &a
	return p, nil
}
