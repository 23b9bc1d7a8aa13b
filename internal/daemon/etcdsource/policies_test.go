package etcdsource

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/registry"
)

// policySink is a countSink that also takes labels and policies.
type policySink struct {
	*countSink
	pmu      sync.Mutex
	ns       map[string]map[string]string
	pods     map[string]source.Pod
	policies map[string]*networkingv1.NetworkPolicy
	egress   map[string][]source.EgressRule
}

func newPolicySink(c *countSink) *policySink {
	return &policySink{countSink: c, ns: map[string]map[string]string{}, pods: map[string]source.Pod{},
		policies: map[string]*networkingv1.NetworkPolicy{}, egress: map[string][]source.EgressRule{}}
}

func (s *policySink) SetNamespaceLabels(ns string, l map[string]string) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if l == nil {
		delete(s.ns, ns)
	} else {
		s.ns[ns] = l
	}
	return nil
}

func (s *policySink) SetPod(p source.Pod) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.pods[p.Namespace+"/"+p.Name] = p
	return nil
}

func (s *policySink) DeletePod(ns, name string) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.pods, ns+"/"+name)
	return nil
}

func (s *policySink) SetPolicy(np *networkingv1.NetworkPolicy) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.policies[np.Namespace+"/"+np.Name] = np
	return nil
}

func (s *policySink) DeletePolicy(ns, name string) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.policies, ns+"/"+name)
	return nil
}

func (s *policySink) SetEgressFirewall(ns, name string, rules []source.EgressRule) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.egress[ns+"/"+name] = rules
	return nil
}

func (s *policySink) DeleteEgressFirewall(ns, name string) error {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	delete(s.egress, ns+"/"+name)
	return nil
}

func (s *policySink) state() string {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	b, _ := json.Marshal(struct {
		NS       map[string]map[string]string
		Pods     map[string]source.Pod
		Policies []string
	}{s.ns, s.pods, keys(s.policies)})
	return string(b)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (s *policySink) wait(t *testing.T, what string, cond func(*policySink) bool) {
	t.Helper()
	testutil.WaitFor(t, 20*time.Second, what, func() (bool, error) {
		s.pmu.Lock()
		ok := cond(s)
		s.pmu.Unlock()
		return ok, errors.New(s.state())
	})
}

// The networkpolicy state in the registry reaches a node: policies, a
// project's namespace with its labels and name label, pods joined from
// their labels record and their node's address record. A node's address
// record outside its subnet is not believed; a node cannot write another's.
func TestAgentPolicyState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e := newEtcd(t)
	reg := startMaster(t, ctx, e)
	if _, err := reg.UpdateProjects(ctx, nil, func(v *master.VNIDs) error { _, err := v.Create("alpha"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetPodLabels(ctx, "alpha", "db", registry.PodLabels{Labels: map[string]string{"app": "db"}}); err != nil {
		t.Fatal(err)
	}
	b, _ := testAgent(t, ctx, e, "b", netip.MustParseAddr("192.168.0.2"))
	b.run(ctx)
	defer b.close()
	a, sa := testAgent(t, ctx, e, "a", netip.MustParseAddr("192.168.0.1"))
	ps := newPolicySink(sa)
	a.d = ps
	a.run(ctx)
	defer a.close()
	f := &Follower{a: a}
	if !f.WaitForSync(ctx) {
		t.Fatal("no first listing")
	}
	ps.wait(t, "alpha's namespace", func(s *policySink) bool {
		return s.ns["alpha"][registry.MetadataNameLabel] == "alpha"
	})
	ps.wait(t, "pod db without an address", func(s *policySink) bool {
		p, ok := s.pods["alpha/db"]
		return ok && !p.IP.IsValid() && p.Labels["app"] == "db"
	})

	// b publishes db's address inside its subnet: a believes it.
	b.mu.Lock()
	bSubnet, bLease := b.subnet, b.lease
	b.mu.Unlock()
	waitSink(t, sa, "node b", func(s *countSink) bool { return s.remotes[netip.MustParseAddr("192.168.0.2")] })
	dbIP := bSubnet.Addr().Next().Next()
	if err := b.reg.PublishPods(ctx, "b", bLease, map[string]netip.Addr{"alpha/db": dbIP, "alpha/web": dbIP.Next()}); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "db's address", func(s *policySink) bool { return s.pods["alpha/db"].IP == dbIP })
	ps.wait(t, "web, without labels", func(s *policySink) bool {
		p, ok := s.pods["alpha/web"]
		return ok && p.IP == dbIP.Next() && len(p.Labels) == 0
	})

	// An address outside b's subnet (another node's) is not believed.
	outside := netip.MustParseAddr("10.131.255.7")
	if err := b.reg.PublishPods(ctx, "b", bLease, map[string]netip.Addr{"alpha/db": outside}); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "db's forged address ignored", func(s *policySink) bool {
		p := s.pods["alpha/db"]
		_, web := s.pods["alpha/web"]
		return !p.IP.IsValid() && p.Labels["app"] == "db" && !web
	})
	if err := b.reg.PublishPods(ctx, "a", bLease, map[string]netip.Addr{"alpha/db": dbIP}); err == nil || !registry.IsRefused(err) {
		t.Errorf("node b published as node a: %v", err)
	}

	// Labels and policies.
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "deny"}}
	if err := reg.SetPolicy(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetNamespaceLabels(ctx, "alpha", map[string]string{"team": "red"}); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetNamespaceLabels(ctx, "other", map[string]string{"team": "blue"}); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "policy and labels", func(s *policySink) bool {
		return s.policies["alpha/deny"] != nil && s.ns["alpha"]["team"] == "red" && s.ns["other"]["team"] == "blue" &&
			s.ns["other"][registry.MetadataNameLabel] == "other"
	})
	if _, err := reg.DeletePolicy(ctx, "alpha", "deny"); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetNamespaceLabels(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetPodLabels(ctx, "alpha", "db", registry.PodLabels{}); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "policy, labels and pod gone", func(s *policySink) bool {
		_, other := s.ns["other"]
		_, db := s.pods["alpha/db"]
		return s.policies["alpha/deny"] == nil && !other && !db && s.ns["alpha"]["team"] == "red"
	})

	// Egress firewalls: one the node cannot read denies the project's
	// egress; a good one arrives as its rules; a deleted one goes.
	if _, err := reg.Client().Put(ctx, registry.EgressFirewallKey("alpha", "default"),
		`{"metadata":{"namespace":"alpha","name":"default"},"spec":{"egress":[{"type":"Maybe","to":{"cidrSelector":"10.0.0.0/8"}}]}}`); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "a bad egress firewall denies all", func(s *policySink) bool {
		r := s.egress["alpha/default"]
		return len(r) == 1 && !r[0].Allow && r[0].CIDR.Bits() == 0
	})
	if err := reg.SetEgressFirewall(ctx, &networkv1.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "default"},
		Spec: networkv1.EgressNetworkPolicySpec{Egress: []networkv1.EgressNetworkPolicyRule{
			{Type: networkv1.EgressNetworkPolicyRuleAllow, To: networkv1.EgressNetworkPolicyPeer{DNSName: "www.example.com"}}}}}); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "the fixed egress firewall", func(s *policySink) bool {
		r := s.egress["alpha/default"]
		return len(r) == 1 && r[0].Allow && r[0].DNSName == "www.example.com"
	})
	if _, err := reg.DeleteEgressFirewall(ctx, "alpha", "default"); err != nil {
		t.Fatal(err)
	}
	ps.wait(t, "the egress firewall gone", func(s *policySink) bool { _, ok := s.egress["alpha/default"]; return !ok })

	// An agent that only lists (no watch) finds deletions by comparing
	// listings.
	c, sc := testAgent(t, ctx, e, "c", netip.MustParseAddr("192.168.0.3"))
	defer c.cli.Close()
	pc := newPolicySink(sc)
	c.d = pc
	if err := reg.SetPolicy(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "p2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if pc.policies["alpha/p2"] == nil || pc.ns["alpha"]["team"] != "red" {
		t.Fatalf("first listing: %s", pc.state())
	}
	if _, err := reg.DeletePolicy(ctx, "alpha", "p2"); err != nil {
		t.Fatal(err)
	}
	if err := reg.SetNamespaceLabels(ctx, "alpha", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.resync(ctx); err != nil {
		t.Fatal(err)
	}
	if pc.policies["alpha/p2"] != nil || pc.ns["alpha"]["team"] != "" || pc.ns["alpha"][registry.MetadataNameLabel] != "alpha" {
		t.Errorf("second listing: %s", pc.state())
	}
}
