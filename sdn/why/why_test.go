package why_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
	"github.com/gvswitch/gvs/sdn/why"
)

func ask(t *testing.T, tr why.Tracer, from, to why.Pod, target string) why.Answer {
	t.Helper()
	tg, err := why.ParseTarget(target)
	if err != nil {
		t.Fatal(err)
	}
	a, err := why.Ask(context.Background(), tr, why.Question{From: from, To: to, Target: tg})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s → %s %s: allowed=%v: %s", from, to, tg, a.Allowed, a.Reason)
	return a
}

// decided checks that a has a deciding step on node in table.
func decided(t *testing.T, a why.Answer, node string, table uint8) why.Step {
	t.Helper()
	st, ok := a.DecidingStep()
	if !ok {
		t.Fatalf("no deciding step: %+v", a)
	}
	if st.Node != node || st.Table != table {
		t.Errorf("deciding step %s, want node %s table %d", st, node, table)
	}
	return st
}

func TestMultitenant(t *testing.T) {
	c := newLabCluster(t, sdn.ModeMultitenant, nil)
	pods := c.pods(t)
	client, server, other := find(t, pods, "p1/client"), find(t, pods, "p1/server"), find(t, pods, "p2/server")

	t.Run("same-project-across-nodes", func(t *testing.T) {
		a := ask(t, c, client, server, "tcp/8080")
		if !a.Allowed {
			t.Fatalf("refused: %s", a.Reason)
		}
		st := decided(t, a, "b", sdn.TableIsolation)
		if !strings.Contains(st.Did, "output to port 3") {
			t.Errorf("deciding step %q does not output to port 3", st.Did)
		}
		if len(a.Traces) != 2 || a.Traces[0].Node != "a" || a.Traces[1].Node != "b" {
			t.Errorf("traces on %d nodes, want a then b", len(a.Traces))
		}
		var onA, onB bool
		for _, s := range a.Steps {
			onA = onA || (s.Node == "a" && s.Table == sdn.TableIPRemote)
			onB = onB || (s.Node == "b" && s.Table == sdn.TableVXLANIn)
		}
		if !onA || !onB {
			t.Errorf("steps lack table 90 on a (%v) or table 10 on b (%v)", onA, onB)
		}
		if !strings.Contains(a.Reason, "allowed") || !strings.Contains(a.Reason, "node b") {
			t.Errorf("reason %q", a.Reason)
		}
	})

	t.Run("other-project-across-nodes", func(t *testing.T) {
		a := ask(t, c, client, other, "tcp/8080")
		if a.Allowed {
			t.Fatal("allowed across VNIDs")
		}
		decided(t, a, "b", sdn.TableIsolation)
		if want := "VNID 10 may not reach VNID 11 (table 80, node b)"; a.Reason != want {
			t.Errorf("reason %q, want %q", a.Reason, want)
		}
	})

	t.Run("other-project-same-node", func(t *testing.T) {
		a := ask(t, c, client, find(t, pods, "p2/other"), "icmp")
		if a.Allowed {
			t.Fatal("allowed across VNIDs")
		}
		decided(t, a, "a", sdn.TableIsolation)
		if want := "VNID 10 may not reach VNID 11 (table 80, node a)"; a.Reason != want {
			t.Errorf("reason %q, want %q", a.Reason, want)
		}
		for _, s := range a.Steps {
			if s.Node != "a" {
				t.Fatalf("a same-node question traced on %s", s.Node)
			}
		}
	})

	t.Run("matrix", func(t *testing.T) {
		m, err := why.Matrix(context.Background(), c, pods, why.Target{Proto: "udp", Port: 53})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", m)
		for i, from := range pods {
			for j, to := range pods {
				if i == j {
					continue
				}
				a := m.Answers[i][j]
				if want := from.VNID == to.VNID; a.Allowed != want || a.Error != "" {
					t.Errorf("%s → %s: allowed=%v error=%q, want allowed=%v", from, to, a.Allowed, a.Error, want)
				}
			}
		}
	})
}

// TestNetworkPolicy: p1/locked is selected by a policy that lets in TCP
// port 80 from p1/client only, written as sdn/netpol writes it (table 80,
// cookie sdn.IngressCookie).
func TestNetworkPolicy(t *testing.T) {
	locked := netip.MustParseAddr("10.128.2.4")
	var b flowtable.Builder
	cookie := sdn.IngressCookie(locked)
	b.Add(sdn.TableIsolation, netpol.PriorityDeny, cookie, []flowtable.Cond{flowtable.IP(), flowtable.NwDst(locked)})
	b.Add(sdn.TableIsolation, netpol.PriorityAllow, cookie, []flowtable.Cond{flowtable.TCP(), flowtable.TpDst(80),
		flowtable.NwDst(locked), flowtable.NwSrc(netip.MustParseAddr("10.128.0.2"))}, flowtable.GotoTable(sdn.TableCommit))
	rules, err := b.Rules()
	if err != nil {
		t.Fatal(err)
	}
	c := newLabCluster(t, sdn.ModeNetworkPolicy, map[string][]*flowtable.Rule{"b": rules})
	pods := c.pods(t)
	client, lockedPod := find(t, pods, "p1/client"), find(t, pods, "10.128.2.4")

	a := ask(t, c, client, lockedPod, "tcp/8080")
	if a.Allowed {
		t.Fatal("allowed through the policy")
	}
	st := decided(t, a, "b", sdn.TableIsolation)
	if st.Cookie != cookie {
		t.Errorf("deciding rule's cookie %#x, want %#x", st.Cookie, cookie)
	}
	if !strings.HasPrefix(a.Reason, "dropped by the NetworkPolicy ingress rules of p1/locked (table 80, node b)") {
		t.Errorf("reason %q", a.Reason)
	}
	// The node names the policy behind the cookie, as gvs-switchd does.
	c.nodes["b"].policies = []control.PolicyRules{{Cookie: cookie, Pod: locked.String(), Direction: "ingress", Policies: []string{"p1/web"}}}
	a = ask(t, c, client, lockedPod, "tcp/8080")
	if want := "dropped by NetworkPolicy p1/web in table 80 on node b: it selects p1/locked and allows no tcp/8080 from p1/client"; a.Reason != want {
		t.Errorf("reason %q, want %q", a.Reason, want)
	}
	if len(a.Policies) != 1 || a.Policies[0] != "p1/web" {
		t.Errorf("policies %v, want [p1/web]", a.Policies)
	}
	if a = ask(t, c, client, lockedPod, "tcp/80"); !a.Allowed {
		t.Errorf("tcp/80 refused: %s", a.Reason)
	}
	// Another pod of the project is not selected: no NetworkPolicy rule.
	if a = ask(t, c, client, find(t, pods, "p1/server"), "tcp/8080"); !a.Allowed {
		t.Errorf("p1/server refused: %s", a.Reason)
	}
}

// TestNetworkPolicyEgress: p1/client is selected by an egress policy that
// allows nothing; the packet is dropped on its own node, in table 27.
func TestNetworkPolicyEgress(t *testing.T) {
	client := netip.MustParseAddr("10.128.0.2")
	var b flowtable.Builder
	cookie := sdn.EgressCookie(client)
	b.Add(sdn.TablePolicyEgress, netpol.PriorityDeny, cookie, []flowtable.Cond{flowtable.IP(), flowtable.NwSrc(client)})
	rules, err := b.Rules()
	if err != nil {
		t.Fatal(err)
	}
	c := newLabCluster(t, sdn.ModeNetworkPolicy, map[string][]*flowtable.Rule{"a": rules})
	c.nodes["a"].policies = []control.PolicyRules{{Cookie: cookie, Pod: client.String(), Direction: "egress", Policies: []string{"p1/no-out"}}}
	pods := c.pods(t)
	a := ask(t, c, find(t, pods, "p1/client"), find(t, pods, "p1/server"), "udp/53")
	if a.Allowed {
		t.Fatal("allowed through the egress policy")
	}
	decided(t, a, "a", sdn.TablePolicyEgress)
	if want := "dropped by NetworkPolicy p1/no-out in table 27 on node a: it selects p1/client and allows no udp/53 to p1/server"; a.Reason != want {
		t.Errorf("reason %q, want %q", a.Reason, want)
	}
	if len(a.Traces) != 1 {
		t.Errorf("traced on %d nodes, want only the source's", len(a.Traces))
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]string{"": "icmp", "ICMP": "icmp", "tcp/8080": "tcp/8080", "udp/53": "udp/53"} {
		tg, err := why.ParseTarget(in)
		if err != nil || tg.String() != want {
			t.Errorf("ParseTarget(%q) = %v, %v; want %s", in, tg, err, want)
		}
	}
	for _, in := range []string{"tcp", "tcp/0", "tcp/65536", "sctp/80", "tcp/x", "8080"} {
		if _, err := why.ParseTarget(in); !errors.Is(err, why.ErrBadTarget) {
			t.Errorf("ParseTarget(%q): %v, want ErrBadTarget", in, err)
		}
	}
}

func TestBadQuestions(t *testing.T) {
	c := newLabCluster(t, sdn.ModeMultitenant, nil)
	pods := c.pods(t)
	client := find(t, pods, "p1/client")
	if _, err := why.Ask(context.Background(), c, why.Question{From: client, To: why.Pod{Name: "x"}, Target: why.Target{Proto: "icmp"}}); !errors.Is(err, why.ErrBadQuestion) {
		t.Errorf("a pod without node: %v", err)
	}
	if _, err := why.Ask(context.Background(), c, why.Question{From: client, To: client, Target: why.Target{Proto: "tcp"}}); !errors.Is(err, why.ErrBadTarget) {
		t.Errorf("tcp without port: %v", err)
	}
	ghost := client
	ghost.Node = "gone"
	if _, err := why.Ask(context.Background(), c, why.Question{From: ghost, To: client, Target: why.Target{Proto: "icmp"}}); err == nil || !strings.Contains(err.Error(), "node gone") {
		t.Errorf("an unknown node: %v", err)
	}
	m, err := why.Matrix(context.Background(), c, []why.Pod{ghost, client}, why.Target{Proto: "icmp"})
	if err != nil || m.Answers[0][1].Error == "" || m.Answers[0][1].Allowed {
		t.Errorf("matrix with an unknown node: %v, %+v", err, m.Answers[0][1])
	}
	for _, ref := range []string{"p9/none", "10.9.9.9"} {
		if _, err := why.Find(pods, ref); !errors.Is(err, why.ErrBadQuestion) {
			t.Errorf("Find(%q): %v", ref, err)
		}
	}
}

func TestHandlerReadOnly(t *testing.T) {
	called := 0
	h := why.Handler(func(context.Context, control.Request) (any, error) { called++; return "ok", nil })
	for _, cmd := range []string{"add-flows", "del-flows", "flush-conntrack", "capture", "show", "dump-flows", ""} {
		if _, err := h(context.Background(), control.Request{Command: cmd}); !errors.Is(err, control.ErrUnknownCommand) {
			t.Errorf("%q: %v, want refused", cmd, err)
		}
	}
	if called != 0 {
		t.Fatalf("the daemon's handler was called %d times for refused commands", called)
	}
	for _, cmd := range why.ReadOnly {
		if _, err := h(context.Background(), control.Request{Command: cmd}); err != nil {
			t.Errorf("%q: %v", cmd, err)
		}
	}
}
