package netpol

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// The test node: networkpolicy mode, subnet 10.128.0.0/23 on 192.168.1.1;
// one remote node, 192.168.1.2 with 10.129.0.0/23.
var (
	nodeCfg = sdn.NodeConfig{NodeName: "n1", NodeIP: netip.MustParseAddr("192.168.1.1"),
		Subnet:          netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"), Mode: sdn.ModeNetworkPolicy}
	remote = sdn.RemoteNode{Name: "n2", IP: netip.MustParseAddr("192.168.1.2"), Subnet: netip.MustParsePrefix("10.129.0.0/23")}
)

// testPod is a pod of the scenario: local ones have a switch port.
type testPod struct {
	Pod
	port uint32 // 0: on the remote node
	vnid uint32
}

func scenario() (*Cluster, map[string]testPod) {
	c := NewCluster()
	c.SetNamespace(Namespace{Name: "alpha", VNID: 10, Labels: map[string]string{"team": "a"}})
	c.SetNamespace(Namespace{Name: "beta", VNID: 11, Labels: map[string]string{"team": "b"}})
	c.SetNamespace(Namespace{Name: "default", VNID: 0, Labels: map[string]string{"team": "infra"}})
	pods := map[string]testPod{}
	add := func(short, ns, ip string, port uint32, vnid uint32, labels map[string]string, named ...NamedPort) {
		p := testPod{Pod: Pod{Namespace: ns, Name: short, IP: netip.MustParseAddr(ip), Labels: labels, Ports: named}, port: port, vnid: vnid}
		pods[short] = p
		c.SetPod(p.Pod)
	}
	add("web", "alpha", "10.128.0.2", 3, 10, map[string]string{"app": "web"}, NamedPort{Name: "http", Port: 8080})
	add("db", "alpha", "10.128.0.3", 4, 10, map[string]string{"app": "db"})
	add("client", "beta", "10.128.0.4", 5, 11, map[string]string{"app": "client"})
	add("infra", "default", "10.128.0.5", 6, 0, map[string]string{"app": "infra"})
	add("rclient", "alpha", "10.129.0.2", 0, 10, map[string]string{"app": "client"})
	add("rbeta", "beta", "10.129.0.3", 0, 11, map[string]string{"app": "web"}, NamedPort{Name: "http", Port: 9090})
	return c, pods
}

// table builds the node's flow table: the program, then every local pod's
// policy rules.
func table(t *testing.T, c *Cluster, pods map[string]testPod) *flowtable.Table {
	t.Helper()
	var local []sdn.Pod
	for _, p := range pods {
		if p.port != 0 {
			local = append(local, sdn.Pod{Name: p.Name, IP: p.IP, Port: p.port, VNID: p.vnid})
		}
	}
	rules, err := sdn.Program(nodeCfg, local, []sdn.RemoteNode{remote})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.port == 0 {
			continue
		}
		in, out, err := c.PodRules(p.Pod)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(append(rules, in...), out...)
	}
	tb := flowtable.New(flowtable.Config{})
	if err := tb.Add(rules...); err != nil {
		t.Fatal(err)
	}
	return tb
}

// verdict sends a packet from pod from to address dst (TCP unless proto
// says, port dport) through the node's table as a new connection (or as a
// reply), and says where it went: "port N", "vxlan", "tun0" or "drop".
func verdict(t *testing.T, tb *flowtable.Table, from testPod, proto string, dst string, dport uint16, reply bool) string {
	t.Helper()
	st := "+trk+new"
	if reply {
		st = "+trk+est+rpl"
	}
	var in string
	if from.port != 0 {
		in = fmt.Sprintf("in_port=%d", from.port)
	} else {
		in = fmt.Sprintf("in_port=%d,tun_src=%s,tun_id=%d", sdn.PortVXLAN, remote.IP, from.vnid)
	}
	desc := fmt.Sprintf("%s,%s,nw_src=%s,nw_dst=%s,tp_dst=%d,ct_next=%s,ct_next=%s,ct_next=%s", in, proto, from.IP, dst, dport, st, st, st)
	f, o, err := flowtable.ParseTrace(desc)
	if err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	outs := outputs(tb.Snapshot().TraceWith(f, o))
	if len(outs) == 0 {
		return "drop"
	}
	switch outs[0].Port {
	case sdn.PortVXLAN:
		return "vxlan"
	case sdn.PortTun0:
		return "tun0"
	}
	return fmt.Sprintf("port %d", outs[0].Port)
}

// outputs returns a trace's outputs, recirculations included.
func outputs(tr flowtable.Trace) []flowtable.Output {
	outs := tr.Outputs()
	for _, r := range tr.Recirc {
		outs = append(outs, r.Out...)
	}
	return outs
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func tcpPort(n int32) networkingv1.NetworkPolicyPort {
	p := intstr.FromInt32(n)
	return networkingv1.NetworkPolicyPort{Port: &p}
}

func newPolicy(ns, name string, pods *metav1.LabelSelector, spec func(*networkingv1.NetworkPolicySpec)) *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if pods != nil {
		np.Spec.PodSelector = *pods
	}
	spec(&np.Spec)
	return np
}

type probe struct {
	from  string
	proto string
	to    string // pod name, or an address
	port  uint16
	want  string // "ok" or "drop"
}

func check(t *testing.T, c *Cluster, pods map[string]testPod, probes []probe) {
	t.Helper()
	tb := table(t, c, pods)
	for _, p := range probes {
		dst := p.to
		want := p.want
		if d, ok := pods[p.to]; ok {
			dst = d.IP.String()
			if want == "ok" {
				want = fmt.Sprintf("port %d", d.port)
				if d.port == 0 {
					want = "vxlan"
				}
			}
		} else if want == "ok" {
			want = "tun0"
		}
		proto := p.proto
		if proto == "" {
			proto = "tcp"
		}
		if got := verdict(t, tb, pods[p.from], proto, dst, p.port, false); got != want {
			t.Errorf("%s → %s %s/%d: %s, want %s", p.from, p.to, proto, p.port, got, want)
		}
	}
}

func TestDefaultAllow(t *testing.T) {
	c, pods := scenario()
	check(t, c, pods, []probe{
		{"client", "", "web", 80, "ok"}, {"web", "", "client", 80, "ok"}, {"rclient", "", "db", 5432, "ok"},
		{"web", "", "rbeta", 80, "ok"}, {"web", "", "8.8.8.8", 443, "ok"},
	})
}

func TestIngress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pol    *networkingv1.NetworkPolicy
		probes []probe
	}{
		{"deny all to web", newPolicy("alpha", "deny", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		}), []probe{
			{"client", "", "web", 80, "drop"}, {"db", "", "web", 80, "drop"}, {"rclient", "", "web", 80, "drop"},
			{"client", "", "db", 80, "ok"}, // not selected
			{"web", "", "db", 80, "ok"},    // egress is not restricted
		}},
		{"pod selector, same namespace", newPolicy("alpha", "from-client", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "client")}}}}
		}), []probe{
			{"rclient", "", "web", 80, "ok"}, {"rclient", "udp", "web", 53, "ok"},
			{"client", "", "web", 80, "drop"}, // app=client but in beta
			{"db", "", "web", 80, "drop"},
		}},
		{"namespace selector", newPolicy("alpha", "from-beta", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b")}}}}
		}), []probe{
			{"client", "", "web", 80, "ok"}, {"rbeta", "", "web", 80, "ok"},
			{"db", "", "web", 80, "drop"}, {"rclient", "", "web", 80, "drop"}, {"infra", "", "web", 80, "drop"},
		}},
		{"namespace selector naming the global namespace", newPolicy("alpha", "from-infra", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "infra")}}}}
		}), []probe{
			{"infra", "", "web", 80, "ok"}, {"client", "", "web", 80, "drop"},
		}},
		{"namespace and pod selector", newPolicy("alpha", "beta-web", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b"), PodSelector: sel("app", "web")}}}}
		}), []probe{
			{"rbeta", "", "web", 80, "ok"}, {"client", "", "web", 80, "drop"},
		}},
		{"ports by number, range and name", newPolicy("alpha", "ports", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			udp, sctp := corev1.ProtocolUDP, corev1.ProtocolSCTP
			end := int32(1100)
			r := tcpPort(1000)
			r.EndPort = &end
			named := networkingv1.NetworkPolicyPort{Port: &intstr.IntOrString{Type: intstr.String, StrVal: "http"}}
			u := tcpPort(53)
			u.Protocol = &udp
			sc := tcpPort(7777)
			sc.Protocol = &sctp
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(80), r, named, u, sc}}}
		}), []probe{
			{"client", "", "web", 80, "ok"}, {"client", "", "web", 81, "drop"},
			{"client", "", "web", 999, "drop"}, {"client", "", "web", 1000, "ok"}, {"client", "", "web", 1057, "ok"}, {"client", "", "web", 1100, "ok"}, {"client", "", "web", 1101, "drop"},
			{"client", "", "web", 8080, "ok"}, {"client", "udp", "web", 8080, "drop"},
			{"client", "udp", "web", 53, "ok"}, {"client", "", "web", 53, "drop"},
			{"client", "sctp", "web", 7777, "ok"}, {"client", "sctp", "web", 80, "drop"},
		}},
		{"named port the pod does not have", newPolicy("alpha", "grpc", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &intstr.IntOrString{Type: intstr.String, StrVal: "grpc"}}}}}
		}), []probe{
			{"client", "", "web", 8080, "drop"}, {"client", "", "web", 50051, "drop"},
		}},
		{"ipBlock with except", newPolicy("alpha", "block", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
				CIDR: "10.128.0.0/16", Except: []string{"10.128.0.4/32"}}}}}}
		}), []probe{
			{"db", "", "web", 80, "ok"}, {"infra", "", "web", 80, "ok"},
			{"client", "", "web", 80, "drop"},  // excepted
			{"rclient", "", "web", 80, "drop"}, // 10.129/16: outside
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, pods := scenario()
			if err := c.SetPolicy(tc.pol); err != nil {
				t.Fatal(err)
			}
			check(t, c, pods, tc.probes)
		})
	}
}

// TestUnion: two policies selecting the same pod allow what either allows.
func TestUnion(t *testing.T) {
	c, pods := scenario()
	for _, p := range []*networkingv1.NetworkPolicy{
		newPolicy("alpha", "a", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "db")}}}}
		}),
		newPolicy("alpha", "b", sel(), func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b")}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(443)}}}
		}),
	} {
		if err := c.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	check(t, c, pods, []probe{
		{"db", "", "web", 80, "ok"}, {"client", "", "web", 443, "ok"}, {"client", "", "web", 80, "drop"},
		{"client", "", "db", 443, "ok"}, {"client", "", "db", 80, "drop"}, {"web", "", "db", 80, "drop"},
	})
	// Deleting one leaves the other.
	c.DeletePolicy("alpha", "b")
	check(t, c, pods, []probe{{"db", "", "web", 80, "ok"}, {"client", "", "web", 443, "drop"}, {"client", "", "db", 80, "ok"}})
}

func TestEgress(t *testing.T) {
	c, pods := scenario()
	udp := corev1.ProtocolUDP
	dns := tcpPort(53)
	dns.Protocol = &udp
	if err := c.SetPolicy(newPolicy("alpha", "egress", sel("app", "web"), func(s *networkingv1.NetworkPolicySpec) {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
		s.Egress = []networkingv1.NetworkPolicyEgressRule{
			{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "db")}}},
			{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "b"), PodSelector: sel("app", "web")}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: &intstr.IntOrString{Type: intstr.String, StrVal: "http"}}}},
			{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "8.8.8.0/24"}}}, Ports: []networkingv1.NetworkPolicyPort{dns}},
		}
	})); err != nil {
		t.Fatal(err)
	}
	check(t, c, pods, []probe{
		{"web", "", "db", 5432, "ok"},
		{"web", "", "rbeta", 9090, "ok"}, {"web", "", "rbeta", 8080, "drop"}, // its http is 9090
		{"web", "udp", "8.8.8.8", 53, "ok"}, {"web", "", "8.8.8.8", 53, "drop"}, {"web", "udp", "8.8.4.4", 53, "drop"},
		{"web", "", "client", 80, "drop"}, {"web", "", "rclient", 80, "drop"},
		{"web", "", "172.30.0.10", 80, "ok"}, // a service: judged after the host's DNAT
		{"db", "", "client", 80, "ok"},       // not selected
		{"client", "", "web", 80, "ok"},      // ingress is not restricted
	})
}

// TestReplies: replies of connections pass both a denying ingress and a
// denying egress policy; the gateway (the node) reaches selected pods.
func TestReplies(t *testing.T) {
	c, pods := scenario()
	if err := c.SetPolicy(newPolicy("alpha", "deny-all", sel(), func(s *networkingv1.NetworkPolicySpec) {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	})); err != nil {
		t.Fatal(err)
	}
	tb := table(t, c, pods)
	web, client := pods["web"], pods["client"]
	if got := verdict(t, tb, web, "tcp", client.IP.String(), 80, false); got != "drop" {
		t.Errorf("web → client new: %s, want drop", got)
	}
	if got := verdict(t, tb, web, "tcp", client.IP.String(), 80, true); got != "port 5" {
		t.Errorf("web → client reply: %s, want port 5", got)
	}
	if got := verdict(t, tb, client, "tcp", web.IP.String(), 80, false); got != "drop" {
		t.Errorf("client → web new: %s, want drop", got)
	}
	if got := verdict(t, tb, client, "tcp", web.IP.String(), 80, true); got != "port 3" {
		t.Errorf("client → web reply: %s, want port 3", got)
	}
	f, o, err := flowtable.ParseTrace(fmt.Sprintf("in_port=%d,tcp,nw_src=%s,nw_dst=%s,tp_dst=8080,ct_next=+trk+new,ct_next=+trk+new", sdn.PortTun0, nodeCfg.Gateway(), web.IP))
	if err != nil {
		t.Fatal(err)
	}
	if outs := outputs(tb.Snapshot().TraceWith(f, o)); len(outs) != 1 || outs[0].Port != 3 {
		t.Errorf("the node's probe to web: %v, want port 3", outs)
	}
}

func TestRefused(t *testing.T) {
	sctp := corev1.Protocol("ICMP")
	end := int32(10)
	for name, np := range map[string]*networkingv1.NetworkPolicy{
		"bad selector": newPolicy("alpha", "x", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Sideways"}}}, func(*networkingv1.NetworkPolicySpec) {}),
		"bad type": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			s.PolicyTypes = []networkingv1.PolicyType{"Sideways"}
		}),
		"bad protocol": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			p := tcpPort(1)
			p.Protocol = &sctp
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p}}}
		}),
		"endPort below port": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			p := tcpPort(100)
			p.EndPort = &end
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p}}}
		}),
		"port 0": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(0)}}}
		}),
		"bad cidr": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}}}
		}),
		"except outside": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16", Except: []string{"10.1.0.0/24"}}}}}}
		}),
		"empty peer": newPolicy("alpha", "x", nil, func(s *networkingv1.NetworkPolicySpec) {
			s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{}}}}
		}),
		"no namespace": newPolicy("", "x", nil, func(*networkingv1.NetworkPolicySpec) {}),
	} {
		c := NewCluster()
		if err := c.SetPolicy(np); err == nil || !strings.Contains(err.Error(), ErrInvalidPolicy.Error()) {
			t.Errorf("%s: %v, want ErrInvalidPolicy", name, err)
		}
	}
}

func TestSubtract(t *testing.T) {
	got := subtract(netip.MustParsePrefix("10.0.0.0/24"), []netip.Prefix{netip.MustParsePrefix("10.0.0.64/26"), netip.MustParsePrefix("10.0.0.255/32")})
	want := "[10.0.0.0/26 10.0.0.128/26 10.0.0.192/27 10.0.0.224/28 10.0.0.240/29 10.0.0.248/30 10.0.0.252/31 10.0.0.254/32]"
	if fmt.Sprint(got) != want {
		t.Errorf("subtract: %v, want %s", got, want)
	}
	if got := subtract(netip.MustParsePrefix("10.0.0.0/24"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}); len(got) != 0 {
		t.Errorf("all excepted: %v", got)
	}
}

func TestPortRange(t *testing.T) {
	for _, tc := range []struct{ from, to uint16 }{{1, 65535}, {1000, 1100}, {80, 80}, {0, 65535}, {65534, 65535}, {3, 17}} {
		blocks := portRange(tc.from, tc.to)
		for p := 0; p <= 65535; p++ {
			n := 0
			for _, b := range blocks {
				if uint16(p)&b[1] == b[0] {
					n++
				}
			}
			in := p >= int(tc.from) && p <= int(tc.to)
			if (in && n != 1) || (!in && n != 0) {
				t.Fatalf("range %d-%d: port %d matched by %d blocks %v", tc.from, tc.to, p, n, blocks)
			}
		}
	}
}

// TestRulesReadBack: every compiled rule prints as ovs-ofctl text that
// parses back to the same rule (what gvsctl dump-flows shows is what runs),
// and compiling twice gives the same rules.
func TestRulesReadBack(t *testing.T) {
	c, pods := scenario()
	if err := c.SetPolicy(newPolicy("alpha", "mixed", sel(), func(s *networkingv1.NetworkPolicySpec) {
		end := int32(2000)
		r := tcpPort(1000)
		r.EndPort = &end
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel()}, {IPBlock: &networkingv1.IPBlock{CIDR: "192.168.0.0/16", Except: []string{"192.168.7.0/24"}}}},
			Ports: []networkingv1.NetworkPolicyPort{r, {Port: &intstr.IntOrString{Type: intstr.String, StrVal: "http"}}}}}
		s.Egress = []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "db")}}}}
	})); err != nil {
		t.Fatal(err)
	}
	in, out, err := c.PodRules(pods["web"].Pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) < 10 || len(out) != 2 { // egress: the default drop and web → db
		t.Fatalf("%d ingress and %d egress rules", len(in), len(out))
	}
	for _, r := range append(in, out...) {
		p, err := flowtable.ParseRule(r.String())
		if err != nil || !p.Equal(r) {
			t.Errorf("%s does not read back: %v", r, err)
		}
	}
	in2, out2, _ := c.PodRules(pods["web"].Pod)
	if fmt.Sprint(sdn.Text(in)) != fmt.Sprint(sdn.Text(in2)) || fmt.Sprint(sdn.Text(out)) != fmt.Sprint(sdn.Text(out2)) {
		t.Error("two compilations differ")
	}
}

// BenchmarkPodRules compiles the rules of one local pod in a cluster of
// 1000 pods in 50 namespaces with 100 policies (two per namespace: one by
// pod selector, one by namespace selector and ports).
func BenchmarkPodRules(b *testing.B) {
	c := NewCluster()
	for n := range 50 {
		c.SetNamespace(Namespace{Name: fmt.Sprintf("ns%d", n), VNID: uint32(10 + n), Labels: map[string]string{"team": fmt.Sprint(n % 5)}})
	}
	for i := range 1000 {
		c.SetPod(Pod{Namespace: fmt.Sprintf("ns%d", i%50), Name: fmt.Sprintf("p%d", i),
			IP: netip.AddrFrom4([4]byte{10, 128 + byte(i/250), byte(i % 250), 2}), Labels: map[string]string{"app": fmt.Sprint(i % 7)}})
	}
	for n := range 50 {
		ns := fmt.Sprintf("ns%d", n)
		for _, p := range []*networkingv1.NetworkPolicy{
			newPolicy(ns, "app", sel("app", "1"), func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", "2")}}}}
			}),
			newPolicy(ns, "teams", sel(), func(s *networkingv1.NetworkPolicySpec) {
				s.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "3")}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(80), tcpPort(443)}}}
			}),
		} {
			if err := c.SetPolicy(p); err != nil {
				b.Fatal(err)
			}
		}
	}
	pod := c.pods[key{"ns1", "p1"}] // app=1: both policies select it
	in, _, err := c.PodRules(pod)
	if err != nil || len(in) == 0 {
		b.Fatal(len(in), err)
	}
	b.ReportMetric(float64(len(in)), "rules")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.PodRules(pod); err != nil {
			b.Fatal(err)
		}
	}
}
