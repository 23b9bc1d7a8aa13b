package sdn

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
)

var (
	ipEgress = netip.MustParseAddr("192.168.100.50")
	ipOut    = netip.MustParseAddr("8.8.8.8")
)

// TestEgressIPBehaviour runs table 101's egress IP routes through the
// rule simulator (an interpreter independent of flowtable): web (VNID 10)
// has an egress IP, db (VNID 11) none.
func TestEgressIPBehaviour(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	prog := func(r EgressRoute) *simulator {
		return newSimulator(t, append(sampleProgram(t, ModeMultitenant), must(t)(EgressIPRules(cfg, 10, r))...))
	}
	local := prog(EgressRoute{IP: ipEgress, Local: true})
	remote := prog(EgressRoute{IP: ipEgress, Via: ipNode2})
	none := prog(EgressRoute{})
	vx := func(src, dst netip.Addr, vni uint32) simPacket {
		return simPacket{inPort: PortVXLAN, proto: 6, src: src, dst: dst, tunSrc: ipNode2, tunID: vni}
	}
	forged := fromPod(5, ipDB, ipOut) // db cannot choose web's egress MAC: eth_dst is rewritten

	for _, tc := range []struct {
		name string
		sim  *simulator
		pkt  simPacket
		want string
	}{
		{"hosted here: to the host with the VNID's egress MAC", local, fromPod(4, ipWeb, ipOut), "port2(0a:59:00:00:00:0a)"},
		{"hosted here: another project masquerades as before", local, forged, "port2"},
		{"hosted here: the project's traffic from another node", local, vx(ipRemote, ipOut, 10), "port2(0a:59:00:00:00:0a)"},
		{"hosted here: another project's traffic from another node", local, vx(ipRemote, ipOut, 11), ""},
		{"hosted here: cluster traffic is not egress", local, fromPod(4, ipWeb, ipRemote), "vxlan(vni=10,dst=192.168.100.12)"},
		{"hosted elsewhere: through the tunnel with the VNID", remote, fromPod(4, ipWeb, ipOut), "vxlan(vni=10,dst=192.168.100.12)"},
		{"hosted elsewhere: not accepted from the tunnel here", remote, vx(ipRemote, ipOut, 10), ""},
		{"hosted elsewhere: another project masquerades as before", remote, forged, "port2"},
		{"hosted nowhere: dropped, never masqueraded", none, fromPod(4, ipWeb, ipOut), ""},
		{"hosted nowhere: DNS to the node still works", none, udp(fromPod(4, ipWeb, ipNode1), 53), "port2"},
		{"hosted nowhere: the cluster is still reached", none, fromPod(4, ipWeb, ipRouter), "port3"},
	} {
		var got []string
		for _, o := range tc.sim.run(tc.pkt) {
			got = append(got, o.String())
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, g, tc.want)
		}
	}
}

// TestEgressIPRefused: no egress IP rules without per-project VNIDs, for
// the global VNID, or for an unusable address.
func TestEgressIPRefused(t *testing.T) {
	mt := sampleNode(ModeMultitenant)
	if _, err := EgressIPRules(sampleNode(ModeSubnet), 10, EgressRoute{IP: ipEgress, Local: true}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("subnet mode: %v", err)
	}
	if _, err := EgressIPRules(mt, 0, EgressRoute{IP: ipEgress, Local: true}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("VNID 0: %v", err)
	}
	for _, bad := range []string{"10.128.3.4", "172.30.0.9", "192.168.100.11", "224.0.0.5", "127.0.0.1", "0.0.0.0", "169.254.1.1"} {
		if err := mt.CheckEgressIP(netip.MustParseAddr(bad)); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("egress IP %s accepted: %v", bad, err)
		}
	}
	if err := mt.CheckEgressIP(ipEgress); err != nil {
		t.Errorf("egress IP %s refused: %v", ipEgress, err)
	}
}

// TestEgressMark: marks are distinct, nonzero and stay off kube-proxy's
// bits; egress MACs are distinct and share their prefix.
func TestEgressMark(t *testing.T) {
	seen := map[uint32]uint32{}
	for _, v := range []uint32{1, 10, 0x4000, 0x8000, 0xc000, 0x4001, 0xffffff, 0x7fff, 0x1c000} {
		m := EgressMark(v)
		if m == 0 || m&(kubeMasqueradeBit|kubeDropBit) != 0 {
			t.Errorf("EgressMark(%#x) = %#x", v, m)
		}
		if o, dup := seen[m]; dup {
			t.Errorf("EgressMark(%#x) = EgressMark(%#x) = %#x", v, o, m)
		}
		seen[m] = v
		mac := EgressMAC(v)
		if [3]byte(mac[:3]) != EgressMACPrefix || uint32(mac[3])<<16|uint32(mac[4])<<8|uint32(mac[5]) != v {
			t.Errorf("EgressMAC(%#x) = %x", v, mac)
		}
	}
}

// BenchmarkEgressIPTable101 is the per-packet cost of the egress path
// through tables 99–101 with 50 VNIDs' egress IP routes installed (half
// through the tunnel, half hosted here), on the benchmark node's 1000
// pods and 100 remote nodes: a pod's packet to an outside address, parsed
// fields in, verdict out.
func BenchmarkEgressIPTable101(b *testing.B) {
	cfg := benchNode()
	var pods []Pod
	for i := range 1000 {
		pods = append(pods, benchPod(i))
	}
	var nodes []RemoteNode
	for j := range 100 {
		nodes = append(nodes, benchRemote(j))
	}
	rules, err := Program(cfg, pods, nodes)
	if err != nil {
		b.Fatal(err)
	}
	for v := uint32(10); v < 60; v++ {
		r := EgressRoute{IP: ipEgress, Via: benchRemote(int(v)).IP}
		if v%2 == 0 {
			r = EgressRoute{IP: ipEgress, Local: true}
		}
		er, err := EgressIPRules(cfg, v, r)
		if err != nil {
			b.Fatal(err)
		}
		rules = append(rules, er...)
	}
	tbl := flowtable.New(flowtable.Config{})
	if err := tbl.Add(rules...); err != nil {
		b.Fatal(err)
	}
	s := tbl.Snapshot()
	pod := benchPod(7) // VNID 17: through the tunnel
	f0 := flowtable.Fields{InPort: pod.Port, EthType: 0x0800, NwProto: 17, NwSrc: pod.IP.As4(), NwDst: ipOut.As4(), TpSrc: 1000, TpDst: 2000}
	var f flowtable.Fields
	var v flowtable.Verdict
	b.ReportAllocs()
	for b.Loop() {
		f = f0
		s.Run(&f, &v)
	}
	if v.NOut != 1 || v.Outputs[0].Port != PortVXLAN || v.Outputs[0].TunID != 17 {
		b.Fatalf("unexpected verdict %+v", v.Outputs[:v.NOut])
	}
}
