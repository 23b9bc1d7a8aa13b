package cluster

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Matrix is who reaches whom: Got[i][j] says pod i pinged pod j
// successfully, Want[i][j] what the isolation rule says.
type Matrix struct {
	Pods []Pod
	Got  [][]bool
	Want [][]bool
}

// Allowed is the isolation rule: in multitenant mode pods reach each other
// iff their VNIDs are equal or either is 0 (global); otherwise all reach all.
func (c *Cluster) Allowed(a, b Pod) bool {
	if c.Spec.Mode != "multitenant" {
		return true
	}
	return a.VNID == b.VNID || a.VNID == 0 || b.VNID == 0
}

// Reachability pings every pod from every other pod (a few at a time) and
// compares with the isolation rule.
func (c *Cluster) Reachability(ctx context.Context) Matrix {
	pods := c.AllPods()
	m := Matrix{Pods: pods, Got: make([][]bool, len(pods)), Want: make([][]bool, len(pods))}
	for i := range pods {
		m.Got[i] = make([]bool, len(pods))
		m.Want[i] = make([]bool, len(pods))
	}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, a := range pods {
		for j, b := range pods {
			if i == j {
				m.Got[i][j], m.Want[i][j] = true, true
				continue
			}
			m.Want[i][j] = c.Allowed(a, b)
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				// Two tries: the first packet of a pair may wait on ARP.
				_, err := c.Lab.Exec(ctx, a.NS, "ping", "-c", "2", "-i", "0.2", "-W", "1", "-q", b.IP.String())
				m.Got[i][j] = err == nil // ping exits 0 when a reply came back
			}()
		}
	}
	wg.Wait()
	return m
}

// Mismatches returns the pairs where Got differs from Want.
func (m Matrix) Mismatches() []string {
	var out []string
	for i := range m.Pods {
		for j := range m.Pods {
			if m.Got[i][j] != m.Want[i][j] {
				out = append(out, fmt.Sprintf("%s (%s, VNID %d) → %s (%s, VNID %d): reached=%v, rule says %v",
					m.Pods[i].Name, m.Pods[i].Project, m.Pods[i].VNID, m.Pods[j].Name, m.Pods[j].Project, m.Pods[j].VNID,
					m.Got[i][j], m.Want[i][j]))
			}
		}
	}
	return out
}

// Print writes the matrix as a table: rows are sources, columns
// destinations; "ok" reached, "--" blocked, and a "!" marks a cell that
// differs from the isolation rule.
func (m Matrix) Print(w io.Writer) {
	fmt.Fprintf(w, "%-22s", "from \\ to")
	for j := range m.Pods {
		fmt.Fprintf(w, " %6s", fmt.Sprintf("#%d", j+1))
	}
	fmt.Fprintln(w)
	for i, p := range m.Pods {
		fmt.Fprintf(w, "#%-2d %-18s", i+1, fmt.Sprintf("%s/%s", shortName(p.Name), p.Project))
		for j := range m.Pods {
			cell := "--"
			if m.Got[i][j] {
				cell = "ok"
			}
			if i == j {
				cell = "."
			}
			if m.Got[i][j] != m.Want[i][j] {
				cell += "!"
			}
			fmt.Fprintf(w, " %6s", cell)
		}
		fmt.Fprintf(w, "   %s vnid=%d\n", p.IP, p.VNID)
	}
}

func shortName(s string) string {
	if i := strings.Index(s, "-n"); i >= 0 {
		return s[i+1:]
	}
	return s
}
