package vswitch

// NetworkPolicy and connection state, end to end in one node: the whole
// OpenShift program (sdn.Program plus the NetworkPolicy rules of its pods)
// in a real switch with a real connection tracker, so that what a rule
// commits is what later packets see (the netpol package's own tests give
// ct_state by hand). Ports: 1 vxlan0 (tunnel), 2 tun0, 3.. pods. Frames are
// pushed through a port's worker by hand; what other ports were given is
// read back.

import (
	"encoding/binary"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/netpol"
)

var (
	revNodeIP   = netip.MustParseAddr("192.168.1.1")
	revRemoteIP = netip.MustParseAddr("192.168.1.2")
	revRemote   = sdn.RemoteNode{Name: "n2", IP: revRemoteIP, Subnet: netip.MustParsePrefix("10.129.0.0/23")}
)

func revCfg(mode sdn.Mode) sdn.NodeConfig {
	return sdn.NodeConfig{NodeName: "n1", NodeIP: revNodeIP,
		Subnet:          netip.MustParsePrefix("10.128.0.0/23"),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"), Mode: mode}
}

type revNode struct {
	sw    *Switch
	ports map[uint32]*memPort
	w     map[uint32]*worker
}

func newRevNode(t *testing.T, mode sdn.Mode, pods []sdn.Pod, extra []*flowtable.Rule) *revNode {
	t.Helper()
	cfg := revCfg(mode)
	rs, err := sdn.Program(cfg, pods, []sdn.RemoteNode{revRemote})
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, extra...)
	tbl := flowtable.New(flowtable.Config{})
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
	ct, err := conntrack.New(conntrack.Config{MaxEntries: 1024})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Table: tbl, Conntrack: ct})
	if err != nil {
		t.Fatal(err)
	}
	n := &revNode{sw: sw, ports: map[uint32]*memPort{}, w: map[uint32]*worker{}}
	m := portMap{}
	add := func(no uint32, p *memPort) {
		p.caps.Offload = true
		n.ports[no] = p
		m[no] = &portEntry{no: no, q: []Port{p}, caps: p.caps}
	}
	add(sdn.PortVXLAN, newMemTunnel())
	add(sdn.PortTun0, newMemPort("tun0"))
	for _, p := range pods {
		add(p.Port, newMemPort(p.Name))
	}
	sw.ports.Store(&m)
	for no, p := range n.ports {
		n.w[no] = sw.newWorker(m[no], p)
	}
	return n
}

// send pushes frames into port no (from the tunnel: with VNI vni from the
// remote node).
func (n *revNode) send(no uint32, vni uint32, frames ...[]byte) {
	w := n.w[no]
	for i, f := range frames {
		w.meta[i] = port.Meta{}
		if no == sdn.PortVXLAN {
			w.meta[i].Tunnel = port.Endpoint{Addr: revRemoteIP.As4(), VNI: vni}
		}
		w.meta[i].Size = copy(w.bufs[i][Headroom:], f)
	}
	w.process(len(frames))
}

// where returns the ports (other than none) that got something since the
// last call, and empties them.
func (n *revNode) where() map[uint32]int {
	got := map[uint32]int{}
	for no := range n.ports {
		if k := len(n.ports[no].take()); k > 0 {
			got[no] = k
		}
	}
	return got
}

func a4(s string) [4]byte { return netip.MustParseAddr(s).As4() }

// podUDP is a UDP datagram src:sport → dst:dport.
func podUDP(src, dst string, sport, dport uint16) []byte {
	return udpCT(a4(src), a4(dst), sport, dport, "payload")
}

// isolatedPolicy: every pod of namespace ns selected for ingress and
// egress, nothing allowed (the "deny all" of the Kubernetes docs).
func isolatedPolicy(ns string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deny-all"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}}}
}

// Pods of the networkpolicy node: V in "locked" (deny-all in and out
// unless a test gives other policies), X in "other" (no policy).
var (
	revV = sdn.Pod{Name: "v", Namespace: "locked", IP: netip.MustParseAddr("10.128.0.3"), Port: 3, VNID: 20}
	revX = sdn.Pod{Name: "x", Namespace: "other", IP: netip.MustParseAddr("10.128.0.4"), Port: 4, VNID: 30}
)

func netpolNode(t *testing.T, pols ...*networkingv1.NetworkPolicy) *revNode {
	t.Helper()
	c := netpol.NewCluster()
	c.SetNamespace(netpol.Namespace{Name: "locked", VNID: 20})
	c.SetNamespace(netpol.Namespace{Name: "other", VNID: 30})
	c.SetNamespace(netpol.Namespace{Name: "remote", VNID: 40})
	c.SetPod(netpol.Pod{Namespace: "locked", Name: "v", IP: revV.IP})
	c.SetPod(netpol.Pod{Namespace: "other", Name: "x", IP: revX.IP})
	c.SetPod(netpol.Pod{Namespace: "remote", Name: "r", IP: netip.MustParseAddr("10.129.0.9")})
	if len(pols) == 0 {
		pols = append(pols, isolatedPolicy("locked"))
	}
	for _, p := range pols {
		if err := c.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	var extra []*flowtable.Rule
	for _, p := range []sdn.Pod{revV, revX} {
		pp, _ := c.Pod(p.Namespace, p.Name)
		in, eg, err := c.PodRules(pp)
		if err != nil {
			t.Fatal(err)
		}
		extra = append(append(extra, in...), eg...)
	}
	return newRevNode(t, sdn.ModeNetworkPolicy, []sdn.Pod{revV, revX}, extra)
}

// onlyFrom is a policy of namespace "locked" that selects its pods for
// ingress and egress and allows ingress from cidr alone (in) or egress to
// it alone (!in).
func onlyFrom(cidr string, in bool) *networkingv1.NetworkPolicy {
	p := isolatedPolicy("locked")
	peer := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: cidr}}}
	if in {
		p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{From: peer}}
	} else {
		p.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peer}}
	}
	return p
}

// TestNetpolCommitsOnlyAccepted: a connection is committed only once every
// policy on its way let it in. A pod under deny-all (ingress and egress)
// must not be able to answer a peer whose request its ingress dropped —
// else any colluding peer (a local pod, a pod of another node, a host
// outside) could open the way out for it by sending first.
func TestNetpolCommitsOnlyAccepted(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from    uint32 // where the peer's request comes in
		vni     uint32
		peer    string
		wantOut map[uint32]int // where V's datagram would go if it passed
	}{
		{"local pod", revX.Port, 0, "10.128.0.4", map[uint32]int{revX.Port: 1}},
		{"pod of another node", sdn.PortVXLAN, 40, "10.129.0.9", map[uint32]int{sdn.PortVXLAN: 1}},
		{"outside host", sdn.PortTun0, 0, "8.8.8.8", map[uint32]int{sdn.PortTun0: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := netpolNode(t)
			n.send(revV.Port, 0, podUDP("10.128.0.3", tc.peer, 6000, 5000))
			if got := n.where(); len(got) != 0 {
				t.Fatalf("V (egress denied) → %s delivered to %v", tc.peer, got)
			}
			n.send(tc.from, tc.vni, podUDP(tc.peer, "10.128.0.3", 5000, 6000))
			if got := n.where(); len(got) != 0 {
				t.Fatalf("%s → V (ingress denied) delivered to %v", tc.peer, got)
			}
			n.send(revV.Port, 0, podUDP("10.128.0.3", tc.peer, 6000, 5000))
			if got := n.where(); len(got) != 0 {
				t.Errorf("V, denied all egress, reached %s as a reply to its dropped request: delivered to %v", tc.peer, got)
			}
			// The same peer with V's policies gone is let through both
			// ways: the drop above was the policy's, not the harness's.
			open := netpolNode(t, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "remote", Name: "elsewhere"}})
			open.send(revV.Port, 0, podUDP("10.128.0.3", tc.peer, 6000, 5000))
			if got := open.where(); len(got) != 1 || got[keyOf(tc.wantOut)] != 1 {
				t.Errorf("without policies V → %s delivered to %v, want %v", tc.peer, got, tc.wantOut)
			}
		})
	}
}

// keyOf returns the one key of m.
func keyOf(m map[uint32]int) uint32 {
	for k := range m {
		return k
	}
	return 0
}

// TestNetpolRepliesOfAllowed: the replies of a connection the policies
// allowed pass the other direction's deny-all — both when V's ingress let
// X in (V's egress denies everything) and when V's egress let it out (V's
// ingress denies everything), locally and across nodes.
func TestNetpolRepliesOfAllowed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peer      string
		peerPort  uint32
		vni       uint32
		ingressOK bool
	}{
		{"local peer, ingress allowed", "10.128.0.4", revX.Port, 0, true},
		{"local peer, egress allowed", "10.128.0.4", revX.Port, 0, false},
		{"remote peer, ingress allowed", "10.129.0.9", sdn.PortVXLAN, 40, true},
		{"remote peer, egress allowed", "10.129.0.9", sdn.PortVXLAN, 40, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := netpolNode(t, onlyFrom(tc.peer+"/32", tc.ingressOK))
			req, reply := podUDP(tc.peer, "10.128.0.3", 5000, 6000), podUDP("10.128.0.3", tc.peer, 6000, 5000)
			reqIn, reqVNI, replyIn, replyVNI, reqOut, replyOut := tc.peerPort, tc.vni, revV.Port, uint32(0), revV.Port, tc.peerPort
			if !tc.ingressOK {
				req, reply = reply, req
				reqIn, reqVNI, replyIn, replyVNI, reqOut, replyOut = revV.Port, 0, tc.peerPort, tc.vni, tc.peerPort, revV.Port
			}
			for i := range 3 {
				n.send(reqIn, reqVNI, req)
				if got := n.where(); len(got) != 1 || got[reqOut] != 1 {
					t.Fatalf("request %d delivered to %v, want port %d", i, got, reqOut)
				}
				n.send(replyIn, replyVNI, reply)
				if got := n.where(); len(got) != 1 || got[replyOut] != 1 {
					t.Fatalf("reply %d delivered to %v, want port %d", i, got, replyOut)
				}
			}
		})
	}
}

// TestNetpolViaHost: a request the host DNATed (a service) comes back in
// from tun0 with the client's address. Committed only once the backend's
// ingress accepted it — then with the mark that sends the backend's
// replies back to tun0 for the host to undo the DNAT; a backend whose
// ingress refused it cannot answer (its egress denies everything).
func TestNetpolViaHost(t *testing.T) {
	// X, the client, asks a service whose backend is V.
	dnatted := podUDP("10.128.0.4", "10.128.0.3", 5000, 6000)
	answer := podUDP("10.128.0.3", "10.128.0.4", 6000, 5000)

	n := netpolNode(t) // V: deny-all
	n.send(sdn.PortTun0, 0, dnatted)
	if got := n.where(); len(got) != 0 {
		t.Fatalf("DNATed request to V (ingress denied) delivered to %v", got)
	}
	n.send(revV.Port, 0, answer)
	if got := n.where(); len(got) != 0 {
		t.Errorf("V, denied all egress, answered a DNATed request its ingress dropped: delivered to %v", got)
	}

	n = netpolNode(t, onlyFrom("10.128.0.4/32", true))
	for i := range 3 {
		n.send(sdn.PortTun0, 0, dnatted)
		if got := n.where(); len(got) != 1 || got[revV.Port] != 1 {
			t.Fatalf("DNATed request %d delivered to %v, want V", i, got)
		}
		n.send(revV.Port, 0, answer)
		if got := n.where(); len(got) != 1 || got[sdn.PortTun0] != 1 {
			t.Fatalf("V's answer %d delivered to %v, want tun0 (the host undoes the DNAT)", i, got)
		}
	}
}

// fragments splits an Ethernet/IPv4 frame (20-byte IP header) into two
// fragments at payload byte cut (a multiple of 8), with IP ID id.
func fragments(frame []byte, cut int, id uint16) (first, later []byte) {
	payload := frame[14+20:]
	mk := func(data []byte, off int, more bool) []byte {
		f := make([]byte, 14+20+len(data))
		copy(f, frame[:14+20])
		h := f[14:]
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(data)))
		binary.BigEndian.PutUint16(h[4:], id)
		fo := uint16(off / 8)
		if more {
			fo |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], fo)
		h[10], h[11] = 0, 0
		binary.BigEndian.PutUint16(h[10:], ^packet.Checksum(h[:20], 0))
		copy(h[20:], data)
		return f
	}
	return mk(payload[:cut], 0, true), mk(payload[cut:], cut, false)
}

// sendFragmented sends frame into port in as two fragments (fragments, cut
// after 16 payload bytes, IP ID id) and returns where each was delivered.
func (n *revNode) sendFragmented(in uint32, frame []byte, id uint16) (first, later map[uint32]int) {
	f1, f2 := fragments(frame, 16, id)
	n.send(in, 0, f1)
	first = n.where()
	n.send(in, 0, f2)
	return first, n.where()
}

// TestNetpolFragments: a policy that admits a port admits every fragment
// of a datagram to it — a later fragment has no UDP header, and the rules
// match it with the ports its first fragment had (conntrack's
// Meta.FragmentPorts) — and no fragment of one to another port.
func TestNetpolFragments(t *testing.T) {
	udp := corev1.ProtocolUDP
	p53 := intstr.FromInt32(53)
	dns := isolatedPolicy("locked")
	dns.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.128.0.4/32"}}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &p53}}}}
	n := netpolNode(t, dns)
	const payload = "0123456789abcdef0123456789abcdef"
	for i, tc := range []struct {
		port uint16
		want int
	}{{53, 1}, {54, 0}, {53, 1}} {
		got1, got2 := n.sendFragmented(revX.Port, udpCT(a4("10.128.0.4"), a4("10.128.0.3"), 5000+uint16(i), tc.port, payload), 700+uint16(i))
		if got1[revV.Port] != tc.want || got2[revV.Port] != tc.want || len(got1)+len(got2) != 2*tc.want {
			t.Errorf("datagram %d to port %d: first fragment delivered to %v, later fragment to %v; want V %d times each",
				i, tc.port, got1, got2, tc.want)
		}
	}
}

// TestMultitenantServiceFragments: in multitenant mode table 60 admits a
// project's services by port; a later fragment of a datagram to one (no
// UDP header of its own) is matched with its first fragment's ports, so
// the whole datagram reaches the host — and no fragment of one to a port
// the service does not have.
func TestMultitenantServiceFragments(t *testing.T) {
	svc, err := sdn.ServiceRules(revCfg(sdn.ModeMultitenant), sdn.Service{Namespace: "other", Name: "dns",
		ClusterIP: netip.MustParseAddr("172.30.0.10"), VNID: revX.VNID, Ports: []sdn.ServicePort{{Protocol: sdn.ProtoUDP, Port: 53}}})
	if err != nil {
		t.Fatal(err)
	}
	n := newRevNode(t, sdn.ModeMultitenant, []sdn.Pod{revV, revX}, svc)
	for i, tc := range []struct {
		port uint16
		want int
	}{{53, 1}, {54, 0}} {
		got1, got2 := n.sendFragmented(revX.Port, udpCT(a4("10.128.0.4"), a4("172.30.0.10"), 5000+uint16(i), tc.port, "0123456789abcdef0123456789abcdef"), 800+uint16(i))
		if got1[sdn.PortTun0] != tc.want || got2[sdn.PortTun0] != tc.want || len(got1)+len(got2) != 2*tc.want {
			t.Errorf("datagram to the service's port %d: first fragment delivered to %v, later fragment to %v; want tun0 %d times each",
				tc.port, got1, got2, tc.want)
		}
	}
}
