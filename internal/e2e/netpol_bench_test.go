package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// BenchmarkPolicyEnforcement measures the time from a NetworkPolicy's
// creation (or deletion) through the API server to its rules in the flow
// tables of every node, on two nodes in networkpolicy mode: each iteration
// creates a deny-all policy for project alpha and waits until both nodes
// hold the default drop of their alpha pod, then deletes it and waits until
// both dropped it. gvsctl dump-flows is polled every 5 ms on each node (a
// call takes a few ms: that is the resolution). Run it with
//
//	go test ./internal/e2e -run '^$' -bench PolicyEnforcement -benchtime 20x
func BenchmarkPolicyEnforcement(b *testing.B) {
	kubetest.Require(b)
	c := up(b, "pe", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true,
	})
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		b.Fatal(err)
	}
	// Node i's alpha pod is its second; its default drop is in table 80 at
	// priority 100.
	drop := func(i int) string { return "priority=100,ip,nw_dst=" + c.Nodes[i].Pods[1].IP.String() }
	installed := func(ctx context.Context, i int) bool {
		out, _ := c.Ctl(ctx, i, "dump-flows", "table=80")
		return slices.ContainsFunc(strings.Split(string(out), "\n"), func(l string) bool {
			return strings.Contains(strings.ReplaceAll(l, " ", ""), drop(i))
		})
	}
	// wait polls both nodes until each has (or lacks) the rule, and
	// returns when the last one got there.
	wait := func(want bool) time.Duration {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done := make(chan time.Duration, len(c.Nodes))
		for i := range c.Nodes {
			go func() {
				for ctx.Err() == nil && installed(ctx, i) != want {
					time.Sleep(5 * time.Millisecond) // a fixed interval: its resolution is that of the time measured
				}
				done <- time.Since(start)
			}()
		}
		var last time.Duration
		for range c.Nodes {
			last = max(last, <-done)
		}
		if ctx.Err() != nil {
			b.Fatalf("the policy's rules never became %v on every node", want)
		}
		return last
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	var add, del []time.Duration
	for b.Loop() {
		if _, err := kc.NetworkingV1().NetworkPolicies("alpha").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		add = append(add, wait(true))
		if err := kc.NetworkingV1().NetworkPolicies("alpha").Delete(context.Background(), "deny-all", metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
		del = append(del, wait(false))
	}
	median := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(median(add), "ms-create-to-all-nodes")
	b.ReportMetric(median(del), "ms-delete-to-all-nodes")
	b.ReportMetric(float64(slices.Max(add))/float64(time.Millisecond), "ms-create-max")
}
