package kubesource

import (
	"log/slog"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// podSink records the pods and remote nodes a Follower hands it.
type podSink struct {
	source.Discard // what it does not record
	pods           map[string]source.Pod
	remotes        map[netip.Addr]sdn.RemoteNode
}

func newPodSink() *podSink {
	return &podSink{pods: map[string]source.Pod{}, remotes: map[netip.Addr]sdn.RemoteNode{}}
}

func (s *podSink) AddRemote(r sdn.RemoteNode) error                   { s.remotes[r.IP] = r; return nil }
func (s *podSink) RemoveRemote(ip netip.Addr) error                   { delete(s.remotes, ip); return nil }
func (s *podSink) SetProjectVNID(string, uint32) error                { return nil }
func (s *podSink) ChangeSubnet(netip.Prefix) error                    { return nil }
func (s *podSink) SetNamespaceLabels(string, map[string]string) error { return nil }
func (s *podSink) SetPod(p source.Pod) error                          { s.pods[p.Namespace+"/"+p.Name] = p; return nil }
func (s *podSink) DeletePod(ns, name string) error                    { delete(s.pods, ns+"/"+name); return nil }

func hostSubnet(node, ip, subnet string) *networkv1.HostSubnet {
	return &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: node}, Host: node, HostIP: ip, Subnet: subnet}
}

func podOn(node, ns, name, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"role": "db"}},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{PodIP: ip}}
}

// TestPodAddressInNodeSubnet: policies believe a pod's address only inside
// the subnet of the node the pod runs on (a node's credentials may set its
// own pods' status, so a compromised node could otherwise lend another
// node's pod the labels of its own); a pod of a node whose HostSubnet comes
// later gets its address then, and loses it when the subnet moves away.
func TestPodAddressInNodeSubnet(t *testing.T) {
	s := newPodSink()
	f := &Follower{cfg: Config{Node: "self"}, log: slog.New(slog.DiscardHandler),
		m: source.NewMirror(s, source.MirrorConfig{Node: "self", Subnet: netip.MustParsePrefix("10.1.2.0/24")})}
	f.hostSubnet(hostSubnet("node1", "192.168.50.1", "10.1.0.0/24"), false)
	f.hostSubnet(hostSubnet("node2", "192.168.50.2", "10.1.1.0/24"), false)

	ip := func(key string) netip.Addr {
		t.Helper()
		p, ok := s.pods[key]
		if !ok {
			t.Fatalf("pod %s not handed to the sink", key)
		}
		return p.IP
	}
	// Refused: node2's pod claims an address of node1's subnet.
	f.pod(podOn("node2", "alpha", "forged", "10.1.0.5"), false)
	if a := ip("alpha/forged"); a.IsValid() {
		t.Errorf("node2's pod with node1's address 10.1.0.5: policies were given %v", a)
	}
	if l := s.pods["alpha/forged"].Labels["role"]; l != "db" {
		t.Errorf("the refused pod's labels: %q, want them kept", l)
	}
	// Believed: addresses inside the pod's own node's subnet, remote and local.
	f.pod(podOn("node2", "alpha", "db", "10.1.1.5"), false)
	f.pod(podOn("self", "alpha", "local", "10.1.2.7"), false)
	if a := ip("alpha/db"); a != netip.MustParseAddr("10.1.1.5") {
		t.Errorf("node2's pod 10.1.1.5: got %v", a)
	}
	if a := ip("alpha/local"); a != netip.MustParseAddr("10.1.2.7") {
		t.Errorf("this node's pod 10.1.2.7: got %v", a)
	}
	// A pod of a node not known yet: withheld until its HostSubnet comes.
	f.pod(podOn("node3", "alpha", "early", "10.1.3.9"), false)
	if a := ip("alpha/early"); a.IsValid() {
		t.Errorf("pod of an unknown node: policies were given %v", a)
	}
	f.hostSubnet(hostSubnet("node3", "192.168.50.3", "10.1.3.0/24"), false)
	if a := ip("alpha/early"); a != netip.MustParseAddr("10.1.3.9") {
		t.Errorf("pod of node3 after its HostSubnet: got %v, want 10.1.3.9", a)
	}
	// node3's subnet moves: the old address is no longer believed.
	f.hostSubnet(hostSubnet("node3", "192.168.50.3", "10.1.4.0/24"), false)
	if a := ip("alpha/early"); a.IsValid() {
		t.Errorf("pod of node3 after its subnet moved: policies were given %v", a)
	}
	// node2 leaves: its pod's address goes with it.
	f.hostSubnet(hostSubnet("node2", "192.168.50.2", "10.1.1.0/24"), true)
	if a := ip("alpha/db"); a.IsValid() {
		t.Errorf("pod of a removed node: policies were given %v", a)
	}
	// A deleted pod is forgotten, also by the re-checks.
	f.pod(podOn("node1", "alpha", "gone", "10.1.0.8"), false)
	f.pod(podOn("node1", "alpha", "gone", "10.1.0.8"), true)
	f.hostSubnet(hostSubnet("node1", "192.168.50.1", "10.1.5.0/24"), false)
	if _, ok := s.pods["alpha/gone"]; ok {
		t.Error("a deleted pod was handed to the sink again")
	}
}
