package source

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// fakeNode is a node's dataplane as the Mirror drives it: what is
// installed, and every call in order. It refuses what the rule program
// would (a remote subnet overlapping the node's) and whatever refuse
// names.
type fakeNode struct {
	Discard  // what it does not record
	subnet   netip.Prefix
	remotes  map[netip.Addr]sdn.RemoteNode
	pods     map[string]Pod
	services map[string]sdn.Service
	egress   map[string][]EgressRule
	eips     map[string][]sdn.EgressIPHost
	calls    []string
	// refuse makes AddRemote fail for these node names, SetService for
	// these service names; failChange makes that many ChangeSubnet calls
	// fail.
	refuse     map[string]bool
	failChange int
}

func newFakeNode(subnet string) *fakeNode {
	return &fakeNode{subnet: prefix(subnet), remotes: map[netip.Addr]sdn.RemoteNode{}, pods: map[string]Pod{},
		services: map[string]sdn.Service{}, egress: map[string][]EgressRule{}, eips: map[string][]sdn.EgressIPHost{}, refuse: map[string]bool{}}
}

func (f *fakeNode) call(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeNode) AddRemote(rn sdn.RemoteNode) error {
	f.call("add %s %v %v", rn.Name, rn.IP, rn.Subnet)
	if f.refuse[rn.Name] || rn.Subnet.Overlaps(f.subnet) {
		return errors.New("refused")
	}
	f.remotes[rn.IP] = rn
	return nil
}

func (f *fakeNode) RemoveRemote(ip netip.Addr) error {
	f.call("remove %v", ip)
	delete(f.remotes, ip)
	return nil
}

func (f *fakeNode) SetProjectVNID(project string, vnid uint32) error {
	f.call("vnid %s %d", project, vnid)
	return nil
}

func (f *fakeNode) ChangeSubnet(p netip.Prefix) error {
	f.call("subnet %v", p)
	if f.failChange > 0 {
		f.failChange--
		return errors.New("rules did not apply")
	}
	f.subnet = p
	return nil
}

func (f *fakeNode) SetNamespaceLabels(ns string, l map[string]string) error {
	f.call("namespace %s %v", ns, l)
	return nil
}

func (f *fakeNode) SetPod(p Pod) error {
	f.call("pod %s/%s %v", p.Namespace, p.Name, p.IP)
	f.pods[p.Namespace+"/"+p.Name] = p
	return nil
}

func (f *fakeNode) DeletePod(ns, name string) error {
	f.call("pod %s/%s gone", ns, name)
	delete(f.pods, ns+"/"+name)
	return nil
}

func (f *fakeNode) SetService(s sdn.Service) error {
	f.call("service %s/%s", s.Namespace, s.Name)
	if f.refuse[s.Name] {
		return errors.New("refused")
	}
	f.services[s.Namespace+"/"+s.Name] = s
	return nil
}

func (f *fakeNode) DeleteService(ns, name string) error {
	f.call("delete service %s/%s", ns, name)
	delete(f.services, ns+"/"+name)
	return nil
}

func (f *fakeNode) SetEgressFirewall(ns, name string, rules []EgressRule) error {
	f.egress[ns+"/"+name] = rules
	return nil
}

func (f *fakeNode) DeleteEgressFirewall(ns, name string) error {
	delete(f.egress, ns+"/"+name)
	return nil
}

func (f *fakeNode) SetMulticast(project string, on bool) error {
	f.call("multicast %s %v", project, on)
	return nil
}

func (f *fakeNode) SetEgressIPs(project string, hosts []sdn.EgressIPHost) error {
	if hosts == nil {
		delete(f.eips, project)
	} else {
		f.eips[project] = hosts
	}
	return nil
}

// installed lists the remote nodes in the dataplane as "name subnet".
func (f *fakeNode) installed() string {
	var out []string
	for _, rn := range f.remotes {
		out = append(out, rn.Name+" "+rn.Subnet.String())
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func prefix(s string) netip.Prefix {
	if s == "" {
		return netip.Prefix{}
	}
	return netip.MustParsePrefix(s)
}

func remote(name, ip, subnet string) sdn.RemoteNode {
	return sdn.RemoteNode{Name: name, IP: netip.MustParseAddr(ip), Subnet: prefix(subnet)}
}

const self = "self"

func newTestMirror(f *fakeNode) *Mirror {
	return NewMirror(f, MirrorConfig{Node: self, Subnet: f.subnet})
}

func refusedNames(m *Mirror) string {
	var out []string
	for _, rn := range m.Refused() {
		out = append(out, rn.Name)
	}
	return strings.Join(out, ", ")
}

// TestMirrorRemotes: the remote nodes' diff, and the refusal of a remote
// whose subnet overlaps this node's or another's, remembered until the
// overlap goes away.
func TestMirrorRemotes(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		steps func(*Mirror, *fakeNode)
		// want: the remotes installed ("name subnet", sorted), the refused
		// ones' names, and, if set, the dataplane calls of the last step.
		want, refused string
		checkCalls    bool
		lastCalls     []string
	}{
		{name: "add", want: "n1 10.1.0.0/24",
			steps: func(m *Mirror, _ *fakeNode) { m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24")) }},
		{name: "unchanged record: no call", want: "n1 10.1.0.0/24", checkCalls: true,
			steps: func(m *Mirror, f *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				f.calls = nil
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
			}},
		{name: "subnet moves", want: "n1 10.1.1.0/24", checkCalls: true, lastCalls: []string{"add n1 192.168.0.1 10.1.1.0/24"},
			steps: func(m *Mirror, f *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				f.calls = nil
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
			}},
		{name: "address moves", want: "n1 10.1.0.0/24", checkCalls: true,
			lastCalls: []string{"remove 192.168.0.1", "add n1 192.168.0.9 10.1.0.0/24"},
			steps: func(m *Mirror, f *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				f.calls = nil
				m.SetRemote(remote("n1", "192.168.0.9", "10.1.0.0/24"))
			}},
		{name: "remove", want: "n2 10.1.1.0/24",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.1.0/24"))
				m.RemoveRemote("n1")
				m.RemoveRemote("unknown")
			}},
		{name: "this node's own record is no remote", want: "",
			steps: func(m *Mirror, _ *fakeNode) { m.SetRemote(remote(self, "192.168.0.1", "10.1.0.0/24")) }},
		{name: "overlapping this node's subnet: refused", want: "", refused: "n1", checkCalls: true,
			steps: func(m *Mirror, f *fakeNode) {
				f.calls = nil
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.9.0/25"))
			}},
		{name: "overlapping this node's: added once this node moves", want: "n1 10.1.9.0/24",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.9.0/24"))
				m.MoveSubnet(ctx, prefix("10.1.200.0/24"))
			}},
		{name: "overlapping another remote: refused", want: "n1 10.1.0.0/24", refused: "n2",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.0.0/23"))
			}},
		{name: "overlap recovers when the other node goes", want: "n2 10.1.0.0/23",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.0.0/23"))
				m.RemoveRemote("n1")
			}},
		{name: "overlap recovers when the other node moves", want: "n1 10.1.4.0/24, n2 10.1.0.0/24",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.0.0/24"))
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.4.0/24"))
			}},
		{name: "a refused node that goes is forgotten", want: "", refused: "",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.0.0/24"))
				m.RemoveRemote("n2")
				m.RemoveRemote("n1")
			}},
		{name: "moving onto another's subnet removes the old rules", want: "n2 10.1.1.0/24", refused: "n1",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.1.0/24"))
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
			}},
		{name: "this node moves onto a remote's subnet: it is refused", want: "n2 10.1.1.0/24", refused: "n1",
			steps: func(m *Mirror, _ *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.1.0/24"))
				m.MoveSubnet(ctx, prefix("10.1.0.0/24"))
			}},
		{name: "refused by the node: old rules removed, tried again when a subnet is freed", want: "n1 10.1.3.0/24, n2 10.1.2.0/24",
			steps: func(m *Mirror, f *fakeNode) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.0.0/24"))
				f.refuse["n1"] = true
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.3.0/24"))
				if got := f.installed(); got != "" {
					t.Errorf("refused update: installed %q, want the old rules removed", got)
				}
				f.refuse["n1"] = false
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.1.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.2.0/24"))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode("10.1.9.0/24")
			m := newTestMirror(f)
			tt.steps(m, f)
			if got := f.installed(); got != tt.want {
				t.Errorf("installed %q, want %q", got, tt.want)
			}
			if got := refusedNames(m); got != tt.refused {
				t.Errorf("refused %q, want %q", got, tt.refused)
			}
			if tt.checkCalls && !slices.Equal(f.calls, tt.lastCalls) {
				t.Errorf("calls %q, want %q", f.calls, tt.lastCalls)
			}
		})
	}
}

// TestMirrorPodAddress: a pod's address is believed only inside the subnet
// of the node that claims it, and checked again when that node's subnet
// changes, it comes or it goes, or this node moves.
func TestMirrorPodAddress(t *testing.T) {
	ctx := context.Background()
	pod := func(name, ip string) Pod {
		p := Pod{Namespace: "alpha", Name: name, Labels: map[string]string{"role": "db"}}
		if ip != "" {
			p.IP = netip.MustParseAddr(ip)
		}
		return p
	}
	tests := []struct {
		name  string
		steps func(*Mirror)
		// want is the pod alpha/p's address as handed to the sink
		// ("invalid IP": labels only; "gone": not there).
		want string
	}{
		{name: "own pod inside this node's subnet", want: "10.1.9.5",
			steps: func(m *Mirror) { m.SetPod(pod("p", "10.1.9.5"), self) }},
		{name: "remote pod inside its node's subnet", want: "10.1.1.5",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetPod(pod("p", "10.1.1.5"), "n1")
			}},
		{name: "another node's address: labels only", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.2.0/24"))
				m.SetPod(pod("p", "10.1.1.5"), "n2")
			}},
		{name: "this node's address claimed by a remote", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetPod(pod("p", "10.1.9.5"), "n1")
			}},
		{name: "node not known yet: withheld", want: "invalid IP",
			steps: func(m *Mirror) { m.SetPod(pod("p", "10.1.3.5"), "n3") }},
		{name: "node known later: believed then", want: "10.1.3.5",
			steps: func(m *Mirror) {
				m.SetPod(pod("p", "10.1.3.5"), "n3")
				m.SetRemote(remote("n3", "192.168.0.3", "10.1.3.0/24"))
			}},
		{name: "node's subnet moves away: no longer believed", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n3", "192.168.0.3", "10.1.3.0/24"))
				m.SetPod(pod("p", "10.1.3.5"), "n3")
				m.SetRemote(remote("n3", "192.168.0.3", "10.1.4.0/24"))
			}},
		{name: "node goes: no longer believed", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n3", "192.168.0.3", "10.1.3.0/24"))
				m.SetPod(pod("p", "10.1.3.5"), "n3")
				m.RemoveRemote("n3")
			}},
		{name: "refused node: withheld", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetRemote(remote("n2", "192.168.0.2", "10.1.1.0/24"))
				m.SetPod(pod("p", "10.1.1.5"), "n2")
			}},
		{name: "this node moves: its pods' old addresses are not believed", want: "invalid IP",
			steps: func(m *Mirror) {
				m.SetPod(pod("p", "10.1.9.5"), self)
				m.MoveSubnet(ctx, prefix("10.1.10.0/24"))
			}},
		{name: "host network or no address: labels only", want: "invalid IP",
			steps: func(m *Mirror) { m.SetPod(pod("p", ""), self) }},
		{name: "deleted", want: "gone",
			steps: func(m *Mirror) {
				m.SetPod(pod("p", "10.1.9.5"), self)
				m.DeletePod("alpha", "p")
				m.MoveSubnet(ctx, prefix("10.1.10.0/24"))
			}},
		// Records (the etcd registry): labels and addresses apart.
		{name: "address record without labels", want: "10.1.9.5",
			steps: func(m *Mirror) { m.SetPodAddress("alpha", "p", self, netip.MustParseAddr("10.1.9.5"), 3) }},
		{name: "labels record without address", want: "invalid IP",
			steps: func(m *Mirror) { m.SetPodLabels("alpha", "p", map[string]string{"role": "db"}, nil) }},
		{name: "neither: not handed", want: "gone",
			steps: func(m *Mirror) { m.SetPodAddress("alpha", "p", "n3", netip.MustParseAddr("10.1.3.5"), 3) }},
		{name: "the newest claim wins", want: "10.1.1.5",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetPodAddress("alpha", "p", self, netip.MustParseAddr("10.1.9.5"), 3)
				m.SetPodAddress("alpha", "p", "n1", netip.MustParseAddr("10.1.1.5"), 4)
			}},
		{name: "the newest claim believed wins", want: "10.1.9.5",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetPodAddress("alpha", "p", self, netip.MustParseAddr("10.1.9.5"), 3)
				m.SetPodAddress("alpha", "p", "n1", netip.MustParseAddr("10.1.9.6"), 4)
			}},
		{name: "a claim forgotten", want: "10.1.9.5",
			steps: func(m *Mirror) {
				m.SetRemote(remote("n1", "192.168.0.1", "10.1.1.0/24"))
				m.SetPodAddress("alpha", "p", self, netip.MustParseAddr("10.1.9.5"), 3)
				m.SetPodAddress("alpha", "p", "n1", netip.MustParseAddr("10.1.1.5"), 4)
				m.ForgetPodAddress("alpha", "p", "n1")
			}},
		{name: "labels and the last claim forgotten", want: "gone",
			steps: func(m *Mirror) {
				m.SetPodLabels("alpha", "p", map[string]string{"role": "db"}, nil)
				m.SetPodAddress("alpha", "p", self, netip.MustParseAddr("10.1.9.5"), 3)
				m.ForgetPodLabels("alpha", "p")
				m.ForgetPodAddress("alpha", "p", self)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNode("10.1.9.0/24")
			m := newTestMirror(f)
			tt.steps(m)
			p, ok := f.pods["alpha/p"]
			got := "gone"
			if ok {
				got = p.IP.String()
				if p.Labels == nil {
					t.Error("pod handed with nil labels")
				}
			}
			if got != tt.want {
				t.Errorf("alpha/p: %s, want %s (calls %q)", got, tt.want, f.calls)
			}
			if m.pods["alpha/p"] == nil && len(m.byNode) != 0 {
				t.Errorf("a forgotten pod is still indexed: %v", m.byNode)
			}
		})
	}
}

// TestMirrorSendsChangesOnly: the sink hears of a pod, a namespace or a
// project VNID only when what it would be told changed.
func TestMirrorSendsChangesOnly(t *testing.T) {
	f := newFakeNode("10.1.9.0/24")
	m := newTestMirror(f)
	for range 2 {
		m.SetPod(Pod{Namespace: "alpha", Name: "p", IP: netip.MustParseAddr("10.1.9.5")}, self)
		m.SetNamespaceLabels("alpha", map[string]string{"team": "a"})
		m.SetProjectVNID("alpha", 10)
	}
	m.SetProjectVNID("alpha", 11)
	m.SetNamespaceLabels("alpha", nil)
	m.SetNamespaceLabels("beta", nil) // never sent: nothing to forget
	m.DeletePod("alpha", "p")
	m.DeletePod("alpha", "p")
	want := []string{"pod alpha/p 10.1.9.5", "namespace alpha map[team:a]", "vnid alpha 10", "vnid alpha 11",
		"namespace alpha map[]", "pod alpha/p gone"}
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", f.calls, want)
	}
	if !m.HasProject("alpha") {
		t.Error("project alpha not known")
	}
	m.ForgetProject("alpha")
	if m.HasProject("alpha") {
		t.Error("project alpha known after ForgetProject")
	}
}

// TestMirrorServicesAndFirewalls: a refused service loses its old rules;
// an egress firewall that cannot be read denies all egress.
func TestMirrorServicesAndFirewalls(t *testing.T) {
	f := newFakeNode("10.1.9.0/24")
	m := newTestMirror(f)
	svc := sdn.Service{Namespace: "alpha", Name: "web", ClusterIP: netip.MustParseAddr("172.30.0.10")}
	m.SetService(svc)
	if _, ok := f.services["alpha/web"]; !ok {
		t.Fatal("service not installed")
	}
	f.refuse["web"] = true
	m.SetService(svc)
	if _, ok := f.services["alpha/web"]; ok {
		t.Error("a refused service kept its old rules")
	}
	m.SetService(sdn.Service{Namespace: "alpha", Name: "db", ClusterIP: netip.MustParseAddr("172.30.0.11")})
	m.RefuseService("alpha", "db", errors.New("unreadable"))
	if _, ok := f.services["alpha/db"]; ok {
		t.Error("an unreadable service kept its old rules")
	}

	good := &networkv1.EgressNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "alpha", Name: "fw"},
		Spec: networkv1.EgressNetworkPolicySpec{Egress: []networkv1.EgressNetworkPolicyRule{
			{Type: networkv1.EgressNetworkPolicyRuleAllow, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "10.0.0.0/8"}}}}}
	m.SetEgressFirewall(good)
	if r := f.egress["alpha/fw"]; len(r) != 1 || !r[0].Allow {
		t.Errorf("egress rules %v", r)
	}
	bad := good.DeepCopy()
	bad.Spec.Egress[0].To.DNSName = "example.com" // and a CIDR: unreadable
	m.SetEgressFirewall(bad)
	if r := f.egress["alpha/fw"]; !slices.Equal(r, DenyAllEgress()) {
		t.Errorf("unreadable firewall: rules %v, want deny all", r)
	}
	m.DeleteEgressFirewall("alpha", "fw")
	if len(f.egress) != 0 {
		t.Errorf("egress firewalls after delete: %v", f.egress)
	}
}

// TestMirrorMoveSubnetRetries: the move is retried until the node takes
// it; a context that ends stops the retries, and the Mirror takes the new
// subnet either way.
func TestMirrorMoveSubnetRetries(t *testing.T) {
	f := newFakeNode("10.1.9.0/24")
	m := newTestMirror(f)
	f.failChange = 2
	m.MoveSubnet(context.Background(), prefix("10.1.10.0/24"))
	if len(f.calls) != 3 || f.subnet != prefix("10.1.10.0/24") || m.Subnet() != prefix("10.1.10.0/24") {
		t.Fatalf("calls %q, node subnet %v, mirror %v", f.calls, f.subnet, m.Subnet())
	}
	f.failChange = 1 << 30
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	m.MoveSubnet(ctx, netip.Prefix{})
	if m.Subnet().IsValid() {
		t.Errorf("mirror subnet %v after a withdrawal, want none", m.Subnet())
	}
}
