package registry_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/internal/etcdtest"
	"github.com/gvswitch/gvs/sdn/pki"
	"github.com/gvswitch/gvs/sdn/registry"
)

func denyAll(ns, name string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
}

// What the registry refuses to store: names Kubernetes would refuse, a
// policy the compiler refuses, invalid labels and named ports.
func TestPolicyValidation(t *testing.T) {
	bad := map[string]*networkingv1.NetworkPolicy{
		"no namespace":         denyAll("", "p"),
		"upper-case namespace": denyAll("Alpha", "p"),
		"no name":              denyAll("alpha", ""),
		"name with a slash":    denyAll("alpha", "a/b"),
	}
	selector := denyAll("alpha", "bad-selector")
	selector.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Sometimes"}}}
	bad["unknown selector operator"] = selector
	port := denyAll("alpha", "bad-port")
	p := intstr.FromInt32(70000)
	port.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &p}}}}
	bad["port out of range"] = port
	for what, np := range bad {
		if err := registry.ValidatePolicy(np); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	if err := registry.ValidatePolicy(denyAll("alpha", "deny.all")); err != nil {
		t.Errorf("a deny-all policy refused: %v", err)
	}
	for _, l := range []map[string]string{{"": "x"}, {"a b": "x"}, {"k": "bad value"}, {"k": strings.Repeat("v", 64)}} {
		if err := registry.ValidateLabels(l); err == nil {
			t.Errorf("labels %v accepted", l)
		}
	}
	if err := registry.ValidateLabels(map[string]string{"app.kubernetes.io/name": "web", "tier": ""}); err != nil {
		t.Errorf("valid labels refused: %v", err)
	}
	for _, np := range [][]registry.NamedPort{{{Name: "http", Port: 0}}, {{Name: "Http_", Port: 80}}, {{Name: "dns", Protocol: "ICMP", Port: 53}}} {
		if _, err := (registry.PodLabels{Ports: np}).NetpolPorts(); err == nil {
			t.Errorf("named ports %+v accepted", np)
		}
	}
	got, err := registry.PodLabels{Ports: []registry.NamedPort{{Name: "dns", Protocol: "udp", Port: 53}, {Name: "http", Port: 80}}}.NetpolPorts()
	if err != nil || len(got) != 2 || got[0].Protocol != corev1.ProtocolUDP || got[1].Protocol != corev1.ProtocolTCP {
		t.Errorf("named ports: %+v, %v", got, err)
	}
	if _, err := registry.EditLabels(map[string]string{"a": "1"}, map[string]string{"b": "no spaces allowed"}, nil); err == nil {
		t.Error("EditLabels took an invalid value")
	}
	l, err := registry.EditLabels(map[string]string{"a": "1", "b": "2"}, map[string]string{"c": "3"}, []string{"a"})
	if err != nil || len(l) != 2 || l["b"] != "2" || l["c"] != "3" {
		t.Errorf("EditLabels: %v, %v", l, err)
	}
}

func TestParsePodKey(t *testing.T) {
	n, ns, name, ok := registry.ParsePodKey(registry.PodKey("n1", "alpha", "web-1"))
	if !ok || n != "n1" || ns != "alpha" || name != "web-1" {
		t.Errorf("round trip: %q %q %q %v", n, ns, name, ok)
	}
	for _, k := range []string{registry.PodsPrefix, registry.PodsPrefix + "n1", registry.PodsPrefix + "n1/alpha",
		registry.PodsPrefix + "n1/alpha/", registry.PodsPrefix + "/alpha/a", registry.PodsPrefix + "n1/alpha/a/b", "/other/n1/a/b"} {
		if _, _, _, ok := registry.ParsePodKey(k); ok {
			t.Errorf("%q parsed", k)
		}
	}
}

func FuzzParsePodKey(f *testing.F) {
	f.Add(registry.PodKey("n1", "alpha", "a"))
	f.Add(registry.PodsPrefix + "//")
	f.Fuzz(func(t *testing.T, k string) {
		n, ns, name, ok := registry.ParsePodKey(k)
		if ok && registry.PodKey(n, ns, name) != k {
			t.Errorf("%q parsed as %q %q %q", k, n, ns, name)
		}
	})
}

// Policies, labels and pod addresses through etcd: stored as given, read
// back, a policy stored under another name refused on reading, published
// pods reconciled.
func TestPolicyRecords(t *testing.T) {
	e := etcdtest.Start(t, etcdtest.Options{Kind: etcdtest.Embedded})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := e.Dial(t, pki.MasterUser)
	np := denyAll("alpha", "deny")
	np.ResourceVersion, np.UID = "42", "x" // server-side metadata is not kept
	if err := a.SetPolicy(ctx, np); err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(ctx, denyAll("beta", "deny")); err != nil {
		t.Fatal(err)
	}
	got, err := a.Policies(ctx, "alpha")
	if err != nil || len(got) != 1 || got[0].Name != "deny" || got[0].ResourceVersion != "" || got[0].Kind != "NetworkPolicy" {
		t.Fatalf("policies of alpha: %+v, %v", got, err)
	}
	if all, err := a.Policies(ctx, ""); err != nil || len(all) != 2 {
		t.Fatalf("all policies: %d, %v", len(all), err)
	}
	if _, err := a.Client().Put(ctx, registry.PolicyKey("alpha", "forged"), `{"metadata":{"namespace":"beta","name":"forged"}}`); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Policies(ctx, "alpha"); err == nil {
		t.Error("a policy recorded under another namespace's key was read")
	}
	if ok, err := a.DeletePolicy(ctx, "alpha", "forged"); !ok || err != nil {
		t.Errorf("delete: %v, %v", ok, err)
	}
	if ok, err := a.DeletePolicy(ctx, "alpha", "forged"); ok || err != nil {
		t.Errorf("delete again: %v, %v", ok, err)
	}

	if err := a.SetNamespaceLabels(ctx, "alpha", map[string]string{registry.MetadataNameLabel: "beta"}); err == nil {
		t.Error("a namespace was given another namespace's name label")
	}
	if err := a.SetNamespaceLabels(ctx, "alpha", map[string]string{"team": "red"}); err != nil {
		t.Fatal(err)
	}
	if l, err := a.NamespaceLabels(ctx, "alpha"); err != nil || l["team"] != "red" {
		t.Errorf("alpha's labels: %v, %v", l, err)
	}
	if err := a.SetPodLabels(ctx, "alpha", "web", registry.PodLabels{Labels: map[string]string{"app": "web"},
		Ports: []registry.NamedPort{{Name: "http", Port: 8080}}}); err != nil {
		t.Fatal(err)
	}
	nsl, pl, err := a.AllLabels(ctx)
	if err != nil || nsl["alpha"]["team"] != "red" || pl["alpha/web"].Labels["app"] != "web" || pl["alpha/web"].Ports[0].Port != 8080 {
		t.Errorf("all labels: %v %v %v", nsl, pl, err)
	}
	if err := a.SetNamespaceLabels(ctx, "alpha", nil); err != nil {
		t.Fatal(err)
	}
	if l, err := a.NamespaceLabels(ctx, "alpha"); err != nil || l != nil {
		t.Errorf("alpha's labels after removing them all: %v, %v", l, err)
	}

	e.AuthorizeNode(t, "n1")
	n1 := e.Dial(t, pki.NodeUser("n1"))
	lease, err := n1.Client().Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParseAddr
	if err := n1.PublishPods(ctx, "n1", lease.ID, map[string]netip.Addr{"alpha/a": ip("10.128.0.2"), "alpha/b": ip("10.128.0.3")}); err != nil {
		t.Fatal(err)
	}
	if err := n1.PublishPods(ctx, "n1", lease.ID, map[string]netip.Addr{"alpha/a": ip("10.128.0.2"), "beta/c": ip("10.128.0.4")}); err != nil {
		t.Fatal(err)
	}
	resp, err := n1.Client().Get(ctx, registry.PodsPrefix+"n1/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
		if kv.Lease != int64(lease.ID) {
			t.Errorf("%s is not on the node's lease", kv.Key)
		}
	}
	if want := registry.PodKey("n1", "alpha", "a") + " " + registry.PodKey("n1", "beta", "c"); strings.Join(keys, " ") != want {
		t.Errorf("published %v, want %s", keys, want)
	}
}
