package sdn

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

var (
	ipRamp     = netip.MustParseAddr("192.168.100.50") // the ramp's VTEP
	rampSubnet = netip.MustParsePrefix("10.128.6.0/23")
	ipBehind   = netip.MustParseAddr("10.128.6.10") // an address in the ramp's subnet
)

// rampSim returns the sample program of mode with a ramp added: a host
// that is not a node, with fixed VNID v when fixed.
func rampSim(t *testing.T, mode Mode, v uint32, fixed bool) *simulator {
	t.Helper()
	cfg := sampleNode(mode)
	ramp := RemoteNode{Name: "f5", IP: ipRamp, Subnet: rampSubnet, FixedVNID: v, HasFixedVNID: fixed}
	if err := cfg.CheckRemote(ramp); err != nil {
		t.Fatal(err)
	}
	rules := sampleRules(t, mode)
	r, err := NodeRules(cfg, ramp)
	if err != nil {
		t.Fatal(err)
	}
	checkRoundTrip(t, r)
	return newSimulator(t, Text(append(rules, r...)))
}

// TestRampBehaviour runs the rules of a host with a fixed VNID through the
// simulator: what reaches it with which VNI, and what it may send.
func TestRampBehaviour(t *testing.T) {
	fromRamp := func(dst netip.Addr, tunSrc netip.Addr, vni uint32) simPacket {
		return simPacket{inPort: PortVXLAN, proto: 6, src: ipBehind, dst: dst, tunSrc: tunSrc, tunID: vni}
	}
	arpFromRamp := func(dst netip.Addr, vni uint32) simPacket {
		return simPacket{inPort: PortVXLAN, arp: true, src: ipBehind, dst: dst, tunSrc: ipRamp, tunID: vni}
	}
	toRamp := "vxlan(vni=10,dst=192.168.100.50)"
	mt10 := rampSim(t, ModeMultitenant, 10, true)
	mt0 := rampSim(t, ModeMultitenant, 0, true)
	mtNode := rampSim(t, ModeMultitenant, 0, false)
	flat := rampSim(t, ModeSubnet, 10, true)
	np := rampSim(t, ModeNetworkPolicy, 10, true)
	for _, tc := range []struct {
		name string
		sim  *simulator
		pkt  simPacket
		want string // outputs, space separated; "" = drop
	}{
		// Fixed VNID 10 (web's project).
		{"pod of V reaches the ramp with VNI V", mt10, fromPod(4, ipWeb, ipBehind), toRamp},
		{"global pod reaches the ramp with VNI V", mt10, fromPod(3, ipRouter, ipBehind), toRamp},
		{"the node reaches the ramp with VNI V", mt10, fromPod(PortTun0, ipGW, ipBehind), toRamp},
		{"pod of another project is refused", mt10, fromPod(5, ipDB, ipBehind), ""},
		{"ARP of V to the ramp", mt10, arpFromPod(4, ipWeb, ipBehind), toRamp},
		{"ARP of another project to the ramp", mt10, arpFromPod(5, ipDB, ipBehind), ""},
		{"ramp reaches a pod of V", mt10, fromRamp(ipWeb, ipRamp, 10), "port4"},
		{"ramp reaches a global pod", mt10, fromRamp(ipRouter, ipRamp, 10), "port3"},
		{"ramp does not reach another project", mt10, fromRamp(ipDB, ipRamp, 10), ""},
		{"ramp may not speak as another project", mt10, fromRamp(ipDB, ipRamp, 11), ""},
		{"ramp may not speak as global", mt10, fromRamp(ipDB, ipRamp, 0), ""},
		{"ramp ARP with VNI V", mt10, arpFromRamp(ipDB, 10), "port5"},
		{"ramp ARP with another VNI", mt10, arpFromRamp(ipDB, 11), ""},
		{"another underlay host is refused", mt10, fromRamp(ipWeb, netip.MustParseAddr("192.168.100.51"), 10), ""},
		{"nodes still carry the source VNID", mt10, fromPod(4, ipWeb, ipRemote), "vxlan(vni=10,dst=192.168.100.12)"},
		// Fixed VNID 0: global both ways.
		{"V=0: every project reaches the ramp", mt0, fromPod(5, ipDB, ipBehind), "vxlan(vni=0,dst=192.168.100.50)"},
		{"V=0: the ramp reaches every project", mt0, fromRamp(ipDB, ipRamp, 0), "port5"},
		{"V=0: the ramp may not speak as a project", mt0, fromRamp(ipDB, ipRamp, 11), ""},
		// No fixed VNID: a node.
		{"no fixed VNID: source VNID on the wire", mtNode, fromPod(5, ipDB, ipBehind), "vxlan(vni=11,dst=192.168.100.50)"},
		{"no fixed VNID: isolated as a node's pods", mtNode, fromRamp(ipDB, ipRamp, 10), ""},
		{"no fixed VNID: same project as a node's pods", mtNode, fromRamp(ipDB, ipRamp, 11), "port5"},
		// Modes where VNIDs do not isolate.
		{"subnet mode sends with VNI V", flat, fromPod(5, ipDB, ipBehind), toRamp},
		{"subnet mode accepts VNI V", flat, fromRamp(ipDB, ipRamp, 10), "port5"},
		{"subnet mode refuses another VNI", flat, fromRamp(ipDB, ipRamp, 0), ""},
		{"networkpolicy mode sends every namespace with VNI V", np, fromPod(5, ipDB, ipBehind), toRamp},
		{"networkpolicy mode refuses another VNI", np, fromRamp(ipDB, ipRamp, 11), ""},
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

// TestRampRulesText pins the rules of a ramp with a fixed VNID in
// multitenant mode, as ovs-ofctl would show them.
func TestRampRulesText(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	got := must(t)(RampRules(cfg, RemoteNode{Name: "f5", IP: ipRamp, Subnet: rampSubnet, FixedVNID: 10, HasFixedVNID: true}))
	c := "cookie=0x2c0a86432, "
	want := []string{
		"table=10, priority=100, " + c + "reg0=10, tun_src=192.168.100.50, actions=goto_table:30",
		"table=50, priority=100, " + c + "arp, reg0=0, nw_dst=10.128.6.0/23, actions=load:0xa->NXM_NX_TUN_ID[0..31],set_field:192.168.100.50->tun_dst,output:1",
		"table=90, priority=100, " + c + "ip, reg0=0, nw_dst=10.128.6.0/23, actions=load:0xa->NXM_NX_TUN_ID[0..31],set_field:192.168.100.50->tun_dst,output:1",
		"table=50, priority=100, " + c + "arp, reg0=10, nw_dst=10.128.6.0/23, actions=load:0xa->NXM_NX_TUN_ID[0..31],set_field:192.168.100.50->tun_dst,output:1",
		"table=90, priority=100, " + c + "ip, reg0=10, nw_dst=10.128.6.0/23, actions=load:0xa->NXM_NX_TUN_ID[0..31],set_field:192.168.100.50->tun_dst,output:1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ramp rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRampRulesRefuse(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	for _, h := range []RemoteNode{
		{Name: "big", IP: ipRamp, Subnet: rampSubnet, FixedVNID: MaxVNID + 1, HasFixedVNID: true},
		{Name: "unfixed", IP: ipRamp, Subnet: rampSubnet},
	} {
		if _, err := RampRules(cfg, h); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: RampRules error %v, want ErrInvalidConfig", h.Name, err)
		}
	}
	if err := cfg.CheckRemote(RemoteNode{Name: "big", IP: ipRamp, Subnet: rampSubnet, FixedVNID: MaxVNID + 1, HasFixedVNID: true}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("CheckRemote of a VNID past MaxVNID: %v", err)
	}
}

// TestRampNoMulticast: the whole program's table 111 copies multicast to
// the nodes, not to a host with a fixed VNID (a project's multicast would
// reach it with the project's VNI); a host without one is a node and gets
// a copy.
func TestRampNoMulticast(t *testing.T) {
	cfg := sampleNode(ModeMultitenant)
	for _, fixed := range []bool{true, false} {
		nodes := append(sampleNodes(), RemoteNode{Name: "f5", IP: ipRamp, Subnet: rampSubnet, FixedVNID: 10, HasFixedVNID: fixed})
		rules, err := Program(cfg, samplePods(), nodes)
		if err != nil {
			t.Fatal(err)
		}
		var fanout string
		for _, r := range Text(rules) {
			if strings.HasPrefix(r, "table=111, priority=100,") {
				fanout = r
			}
		}
		if !strings.Contains(fanout, ipNode2.String()+"->tun_dst") || strings.Contains(fanout, ipRamp.String()+"->tun_dst") == fixed {
			t.Errorf("fixed VNID %v: table 111 %q", fixed, fanout)
		}
	}
}
