package sdn

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// accountingProgram is the sample node's program in mode with
// NodeConfig.Accounting as given (multitenant with the sample services).
func accountingProgram(t *testing.T, mode Mode, accounting bool) []string {
	t.Helper()
	cfg := sampleNode(mode)
	cfg.Accounting = accounting
	rules := must(t)(Program(cfg, samplePods(), sampleNodes()))
	for _, svc := range sampleServices() {
		rules = append(rules, must(t)(ServiceRules(cfg, svc))...)
	}
	return rules
}

// TestAccountingVerdicts: with NodeConfig.Accounting (flow export) the
// subnet and multitenant programs commit every pod connection they pass,
// and every packet goes where it went without: the simulator, which does
// not share flowtable's code, runs the same packets through both programs
// (new connections and replies, with ct_mark bit 0 set or not, local,
// remote, services, the host, isolation refusals, multicast, ARP). The
// one connection left uncounted is a pod's to the gateway address, which
// goes to tun0 before table 30 could commit it (as in networkpolicy
// mode). The networkpolicy program is the same with or without.
//
// A packet is counted when a ct action meets its committed connection:
// a commit, or any ct on a reply or related packet (the simulator's
// replies belong to committed connections). Left out as impossible: a
// reply or related packet of a connection with ct_mark bit 0 set going
// anywhere but the local subnet. Only table 0 sets that bit, on what the
// host sends back from a local pod's address (its DNAT of the pod's
// request to a service), so such a connection's client is a local pod,
// its replies go to the local subnet, which table 0 tracks with or
// without accounting, and the client's own ICMP errors go to the service
// address it saw, never to the backend. Were it possible, the simulator
// shows the difference: untracked without accounting, such a packet
// would go out by address; tracked, to tun0.
func TestAccountingVerdicts(t *testing.T) {
	vx := func(src, dst, tunSrc netip.Addr, vni uint32) simPacket {
		return simPacket{inPort: PortVXLAN, proto: 6, src: src, dst: dst, tunSrc: tunSrc, tunID: vni}
	}
	internet := netip.MustParseAddr("8.8.8.8")
	dns := udp(fromPod(4, ipWeb, ipNode1), 53)
	pkts := []simPacket{
		fromPod(4, ipWeb, ipDB), fromPod(4, ipWeb, ipRouter), fromPod(3, ipRouter, ipDB),
		fromPod(PortTun0, ipGW, ipDB), fromPod(PortTun0, ipNode1, ipWeb),
		fromPod(4, ipWeb, ipRemote), udp(fromPod(5, ipDB, ipRemote), 9),
		vx(ipRemote, ipWeb, ipNode2, 10), vx(ipRemote, ipWeb, ipNode2, 11), vx(ipRemote, ipDB, ipNode2, 0),
		vx(ipRemote, ipGW, ipNode2, 10), vx(ipRemote, internet, ipNode2, 10),
		fromPod(4, ipWeb, internet), reply(fromPod(PortTun0, internet, ipWeb), 0),
		fromPod(4, ipWeb, ipSvcWeb), sctp(fromPod(4, ipWeb, ipSvcWeb)), fromPod(4, ipWeb, ipSvcDB),
		port(fromPod(4, ipWeb, ipSvcWeb), 81), fromPod(3, ipRouter, ipSvcDB), udp(fromPod(5, ipDB, ipSvcDNS), 53),
		reply(fromPod(3, ipRouter, ipWeb), viaHostMark), reply(vx(ipRemote, ipWeb, ipNode2, 10), viaHostMark),
		reply(fromPod(3, ipRouter, ipWeb), 0), related(fromPod(3, ipRouter, ipWeb), viaHostMark),
		related(vx(ipRemote, ipDB, ipNode2, 0), viaHostMark),
		dns, fromPod(5, ipDB, ipGW),
		fromPod(PortTun0, ipWeb, ipRouter), fromPod(PortTun0, ipWeb, ipDB), fromPod(PortTun0, ipWeb, ipRemote),
		fromPod(4, ipWeb, netip.MustParseAddr("224.1.1.1")),
		arpFromPod(4, ipWeb, ipGW), arpFromPod(4, ipWeb, ipDB), arpFromPod(4, ipWeb, ipRemote),
	}
	for _, mode := range []Mode{ModeSubnet, ModeMultitenant} {
		plain := newSimulator(t, accountingProgram(t, mode, false))
		counted := newSimulator(t, accountingProgram(t, mode, true))
		for _, p := range pkts {
			want, got := plain.run(p), counted.run(p)
			str := func(os []simOutput) string {
				var s []string
				for _, o := range os {
					s = append(s, o.String())
				}
				return strings.Join(s, " ")
			}
			if str(got) != str(want) {
				t.Errorf("%s: %+v goes to %q with accounting, %q without", mode, p, str(got), str(want))
			}
			for _, o := range got {
				if !p.arp && p.dst != ipGW && !o.committed && !(o.tracked && (p.rpl || p.rel)) {
					t.Errorf("%s: %+v went to %v uncommitted: its connection is not counted", mode, p, o)
				}
			}
		}
	}
	if a, b := accountingProgram(t, ModeNetworkPolicy, false), accountingProgram(t, ModeNetworkPolicy, true); !slices.Equal(a, b) {
		t.Error("Accounting changes the networkpolicy program")
	}
	if a, b := accountingProgram(t, ModeSubnet, false), accountingProgram(t, ModeSubnet, true); slices.Equal(a, b) {
		t.Error("Accounting does not change the subnet program")
	}
}
