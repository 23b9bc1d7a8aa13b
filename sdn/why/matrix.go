package why

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Reachability is the answer for every ordered pair of a set of pods.
type Reachability struct {
	Target Target `json:"target"`
	Pods   []Pod  `json:"pods"`
	// Answers[i][j] answers Pods[i] → Pods[j]; the diagonal is left zero
	// (not asked).
	Answers [][]Answer `json:"answers"`
}

// Parallel is how many questions Matrix asks at once.
const Parallel = 4

// Matrix asks, for every ordered pair of distinct pods, whether the first
// reaches the second on target tg. A pair that cannot be traced gets an
// Answer with Error set (and Allowed false) instead of failing the matrix;
// Matrix itself fails only for a bad target or when ctx ends.
func Matrix(ctx context.Context, t Tracer, pods []Pod, tg Target) (Reachability, error) {
	m := Reachability{Target: tg, Pods: pods, Answers: make([][]Answer, len(pods))}
	if err := tg.validate(); err != nil {
		return m, err
	}
	for i := range m.Answers {
		m.Answers[i] = make([]Answer, len(pods))
	}
	type pair struct{ i, j int }
	work := make(chan pair)
	var wg sync.WaitGroup
	for range Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				q := Question{From: pods[p.i], To: pods[p.j], Target: tg}
				a, err := Ask(ctx, t, q)
				if err != nil {
					a.Allowed, a.Error = false, err.Error()
					a.Reason = "cannot tell: " + err.Error()
				}
				m.Answers[p.i][p.j] = a
			}
		}()
	}
	func() {
		defer close(work)
		for i := range pods {
			for j := range pods {
				if i == j {
					continue
				}
				select {
				case work <- pair{i, j}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	wg.Wait()
	return m, ctx.Err()
}

// String renders the matrix as a table: a row per source pod, "." for
// allowed, "X" for refused, "?" for a pair that could not be traced.
func (m Reachability) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (row reaches column: . yes, X no, ? unknown)\n", m.Target)
	for i, p := range m.Pods {
		fmt.Fprintf(&b, "%3d %-30s ", i, p)
		for j := range m.Pods {
			a := m.Answers[i][j]
			switch {
			case i == j:
				b.WriteString(" -")
			case a.Error != "":
				b.WriteString(" ?")
			case a.Allowed:
				b.WriteString(" .")
			default:
				b.WriteString(" X")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ListPods returns the pods of nodes as each node reports them, sorted by
// namespace and name.
func ListPods(ctx context.Context, l PodLister, nodes []string) ([]Pod, error) {
	var all []Pod
	for _, n := range nodes {
		ps, err := l.Pods(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("why: pods of node %s: %w", n, err)
		}
		all = append(all, ps...)
	}
	slices.SortFunc(all, func(a, b Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Node, b.Node))
	})
	return all, nil
}

// Find returns the pod ref names among pods: "namespace/name", or an IP
// address. It is an error when none or several match.
func Find(pods []Pod, ref string) (Pod, error) {
	var found []Pod
	for _, p := range pods {
		if p.String() == ref || (p.IP.IsValid() && p.IP.String() == ref) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return Pod{}, fmt.Errorf("%w: no pod %s on any node (NAMESPACE/NAME or an address)", ErrBadQuestion, ref)
	case 1:
		return found[0], nil
	}
	var where []string
	for _, p := range found {
		where = append(where, p.Node)
	}
	return Pod{}, fmt.Errorf("%w: %s is on several nodes (%s)", ErrBadQuestion, ref, strings.Join(where, ", "))
}
