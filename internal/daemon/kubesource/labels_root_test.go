package kubesource_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// labelRecorder also records labels (source.LabelSink).
type labelRecorder struct{ recorder }

func (r *labelRecorder) SetNamespaceLabels(ns string, l map[string]string) error {
	if l == nil {
		return r.add("namespace %s gone", ns)
	}
	return r.add("namespace %s %v", ns, l)
}

func (r *labelRecorder) SetPod(p source.Pod) error {
	if len(p.Ports) > 0 {
		return r.add("pod %s/%s %v %v ports %v", p.Namespace, p.Name, p.IP, p.Labels, p.Ports)
	}
	return r.add("pod %s/%s %v %v", p.Namespace, p.Name, p.IP, p.Labels)
}

func (r *labelRecorder) DeletePod(ns, name string) error { return r.add("pod %s/%s gone", ns, name) }

// policyRecorder also records NetworkPolicies (source.PolicySink).
type policyRecorder struct{ labelRecorder }

func (r *policyRecorder) SetPolicy(np *networkingv1.NetworkPolicy) error {
	return r.add("policy %s/%s %v", np.Namespace, np.Name, np.Spec.PodSelector.MatchLabels)
}

func (r *policyRecorder) DeletePolicy(ns, name string) error {
	return r.add("delete policy %s/%s", ns, name)
}

// followerLab is an API server with a ClusterNetwork of plugin, the HostSubnet
// of node n1 and a Namespace alpha (labels nsLabels) with its default
// ServiceAccount, and a follower started for n1 with gvs-node's token.
type followerLab struct {
	ctx context.Context
	kc  kubernetes.Interface
	nc  *networkv1.Client
	f   *kubesource.Follower
	b   source.Bootstrap
}

func startFollowerLab(t *testing.T, short, plugin, hostIP string, nsLabels map[string]string) followerLab {
	t.Helper()
	srv := kubetest.New(t, short)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	nc, kc := startClusterNetwork(t, ctx, srv, plugin, nil)
	if _, err := nc.HostSubnets().Create(ctx, &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Host: "n1", HostIP: hostIP, Subnet: "10.128.0.0/23"}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Labels: nsLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount admission wants the pods' account (no
	// controller manager makes it here).
	if _, err := kc.CoreV1().ServiceAccounts("alpha").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := srv.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		t.Fatal(err)
	}
	f := kubesource.New(kubesource.Config{REST: cfg, Node: "n1"})
	b, err := f.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return followerLab{ctx: ctx, kc: kc, nc: nc, f: f, b: b}
}

// TestFollowerLabels: with gvs-node's token the follower reports Namespace
// labels and the labels and addresses of its own node's Pods (not another
// node's; a host-network pod without a pod address), as they change and
// when they go.
func TestFollowerLabels(t *testing.T) {
	l := startFollowerLab(t, "kl", "redhat/openshift-ovs-multitenant", "192.168.61.1", map[string]string{"team": "a"})
	ctx, kc, f := l.ctx, l.kc, l.f
	r := &labelRecorder{}
	f.Follow(ctx, r)
	waitFor(t, &r.recorder, "namespace alpha map[kubernetes.io/metadata.name:alpha team:a]")

	pod := func(name, node string, hostNet bool, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "alpha", Labels: labels},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNet, Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	}
	setIP := func(p *corev1.Pod, ip string) *corev1.Pod {
		t.Helper()
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		got, err := kc.CoreV1().Pods("alpha").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// Not this node's: never reported (checked at the end).
	other, err := kc.CoreV1().Pods("alpha").Create(ctx, pod("elsewhere", "n2", false, map[string]string{"app": "db"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setIP(other, "10.128.2.5")
	web, err := kc.CoreV1().Pods("alpha").Create(ctx, pod("web", "n1", false, map[string]string{"app": "web"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "pod alpha/web invalid IP map[app:web]") // scheduled, no address yet
	web = setIP(web, "10.128.0.5")
	waitFor(t, &r.recorder, "pod alpha/web 10.128.0.5 map[app:web]")
	host, err := kc.CoreV1().Pods("alpha").Create(ctx, pod("agent", "n1", true, nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setIP(host, "192.168.61.1")
	waitFor(t, &r.recorder, "pod alpha/agent invalid IP map[]")

	web.Labels = map[string]string{"app": "web", "tier": "front"}
	if _, err := kc.CoreV1().Pods("alpha").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "pod alpha/web 10.128.0.5 map[app:web tier:front]")
	ns, err := kc.CoreV1().Namespaces().Get(ctx, "alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["team"] = "b"
	if _, err := kc.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "namespace alpha map[kubernetes.io/metadata.name:alpha team:b]")
	zero := int64(0)
	if err := kc.CoreV1().Pods("alpha").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "pod alpha/web gone")
	for _, e := range r.snapshot() {
		if e == "pod alpha/elsewhere gone" || len(e) > 19 && e[:19] == "pod alpha/elsewhere" {
			t.Errorf("another node's pod reported: %q", e)
		}
	}
}

// TestFollowerPolicies: in networkpolicy mode the follower reports every
// node's pods (the peers policies name), with their named ports — their
// addresses only once the node's HostSubnet shows them inside its subnet —
// and the NetworkPolicies as they come and go, with gvs-node's read-only
// token.
func TestFollowerPolicies(t *testing.T) {
	l := startFollowerLab(t, "kp", "redhat/openshift-ovs-networkpolicy", "192.168.62.1", nil)
	ctx, kc, f, b := l.ctx, l.kc, l.f, l.b
	if b.Cluster.Mode != sdn.ModeNetworkPolicy {
		t.Fatalf("mode %v", b.Cluster.Mode)
	}
	r := &policyRecorder{}
	f.Follow(ctx, r)
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "alpha", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "c", Image: "none",
			Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}, {ContainerPort: 9}}}}}}
	created, err := kc.CoreV1().Pods("alpha").Create(ctx, other, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.PodIP = "10.129.0.7"
	if _, err := kc.CoreV1().Pods("alpha").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// n2 has no HostSubnet yet: the address is withheld until it has.
	waitFor(t, &r.recorder, "pod alpha/db invalid IP map[app:db] ports [{pg TCP 5432}]")
	if _, err := l.nc.HostSubnets().Create(ctx, &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: "n2"},
		Host: "n2", HostIP: "192.168.62.2", Subnet: "10.129.0.0/23"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "pod alpha/db 10.129.0.7 map[app:db] ports [{pg TCP 5432}]")
	// A pod of n2 with an address of n1's subnet (what a compromised n2
	// could write into its pods' status): labels yes, address no.
	forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "alpha", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{NodeName: "n2", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	if forged, err = kc.CoreV1().Pods("alpha").Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	forged.Status.PodIP = "10.128.0.9"
	if _, err := kc.CoreV1().Pods("alpha").UpdateStatus(ctx, forged, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "pod alpha/forged invalid IP map[app:db]")
	time.Sleep(500 * time.Millisecond) // no later event may give it the address
	if r.has("pod alpha/forged 10.128.0.9 map[app:db]") {
		t.Error("n2's pod with an address of n1's subnet was believed")
	}
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "db-only"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}
	if _, err := kc.NetworkingV1().NetworkPolicies("alpha").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "policy alpha/db-only map[app:db]")
	if err := kc.NetworkingV1().NetworkPolicies("alpha").Delete(ctx, "db-only", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &r.recorder, "delete policy alpha/db-only")
}
