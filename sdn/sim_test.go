package sdn

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// This file runs the generated program through a tiny interpreter of the
// ovs-ofctl subset it uses, so that the tests check what the rules do, not
// only how they read. It is deliberately independent of flowtable/.

type simPacket struct {
	inPort   uint32
	arp      bool
	proto    uint8 // 6 tcp, 17 udp, 1 icmp
	src, dst netip.Addr
	arpSha   [6]byte
	tpDst    uint16
	tunSrc   netip.Addr
	tunID    uint32
	// What the connection tracker knows of the packet's connection: it
	// is in the reply direction (rpl) of a committed connection with
	// ct_mark mark, or an ICMP error related to one (rel).
	rpl, rel bool
	mark     uint32
}

type simOutput struct {
	port   uint32
	tunID  uint32
	tunDst netip.Addr
	ethDst string // set_field to eth_dst, if any
	// committed: a ct(commit) ran on the packet before it went out;
	// tracked: a ct action did (String leaves both out: verdicts compare
	// without them).
	committed, tracked bool
}

func (o simOutput) String() string {
	if o.port == PortVXLAN {
		return fmt.Sprintf("vxlan(vni=%d,dst=%v)", o.tunID, o.tunDst)
	}
	if strings.HasPrefix(o.ethDst, "0a:59:") { // an egress MAC (egressip.go)
		return "port" + strconv.Itoa(int(o.port)) + "(" + o.ethDst + ")"
	}
	return "port" + strconv.Itoa(int(o.port))
}

type simulator struct {
	t      *testing.T
	tables map[int][]parsedRule
}

func newSimulator(t *testing.T, rules []string) *simulator {
	s := &simulator{t: t, tables: map[int][]parsedRule{}}
	for _, r := range rules {
		p := parseRule(t, r)
		s.tables[p.table] = append(s.tables[p.table], p)
	}
	return s
}

type simState struct {
	pkt    simPacket
	regs   [8]uint32
	tunID  uint32
	tunDst netip.Addr
	ethDst string
	// ct_state and ct_mark after the last ct action (trk: there was one).
	trk, rpl, rel bool
	mark          uint32
	committed     bool // a ct(commit) ran
}

func (st *simState) matches(m string) bool {
	p := st.pkt
	key, val, _ := strings.Cut(m, "=")
	switch key {
	case "ip":
		return !p.arp
	case "arp":
		return p.arp
	case "tcp":
		return !p.arp && p.proto == 6
	case "sctp":
		return !p.arp && p.proto == 132
	case "ct_state":
		flags := map[string]bool{"trk": st.trk, "rpl": st.trk && st.rpl, "rel": st.trk && st.rel,
			"new": st.trk && !st.rpl && !st.rel, "est": st.trk && st.rpl, "inv": false}
		for rest := val; rest != ""; {
			want := rest[0] == '+'
			rest = rest[1:]
			i := strings.IndexAny(rest, "+-")
			if i < 0 {
				i = len(rest)
			}
			f, ok := flags[rest[:i]]
			if !ok {
				panic("simulator: ct_state flag " + rest[:i])
			}
			if f != want {
				return false
			}
			rest = rest[i:]
		}
		return true
	case "ct_mark":
		v, m, _ := strings.Cut(val, "/")
		vn, _ := strconv.ParseUint(v, 0, 32)
		mn, _ := strconv.ParseUint(m, 0, 32)
		return st.mark&uint32(mn) == uint32(vn)
	case "udp":
		return !p.arp && p.proto == 17
	case "in_port":
		n, _ := strconv.Atoi(val)
		return p.inPort == uint32(n)
	case "nw_src", "nw_dst", "tun_src":
		addr := p.src
		if key == "nw_dst" {
			addr = p.dst
		} else if key == "tun_src" {
			addr = p.tunSrc
		}
		if !strings.Contains(val, "/") {
			val += "/32"
		}
		return netip.MustParsePrefix(val).Contains(addr)
	case "arp_sha":
		return p.arp && FormatMAC(p.arpSha) == val
	case "tun_id":
		n, _ := strconv.ParseUint(val, 0, 32)
		return p.inPort == PortVXLAN && p.tunID == uint32(n)
	case "tp_dst", "udp_dst":
		n, _ := strconv.Atoi(val)
		return !p.arp && p.tpDst == uint16(n)
	}
	if r, ok := strings.CutPrefix(key, "reg"); ok {
		i, _ := strconv.Atoi(r)
		n, _ := strconv.ParseUint(val, 0, 32)
		return st.regs[i] == uint32(n)
	}
	panic("simulator: unknown match " + m)
}

// run sends p through the program and returns its outputs (none = drop).
func (s *simulator) run(p simPacket) []simOutput {
	st := &simState{pkt: p, tunID: p.tunID}
	var out []simOutput
	table := 0
	for hops := 0; hops < 32; hops++ {
		var best *parsedRule
		for i := range s.tables[table] {
			r := &s.tables[table][i]
			if !allMatch(st, r.match) {
				continue
			}
			if best != nil && r.priority == best.priority && strings.Join(r.actions, ",") != strings.Join(best.actions, ",") {
				s.t.Errorf("ambiguous: %q and %q both match %+v", best.text, r.text, p)
			}
			if best == nil || r.priority > best.priority {
				best = r
			}
		}
		if best == nil {
			return out
		}
		next := -1
		for _, a := range best.actions {
			switch {
			case strings.HasPrefix(a, "ct("):
				// The tracker: the packet is tracked, and the test says
				// whether it is a reply; a commit may set ct_mark bits.
				st.trk, st.rpl, st.rel, st.mark = true, p.rpl, p.rel, p.mark
				if strings.HasPrefix(a, "ct(commit,") || a == "ct(commit)" {
					st.committed = true
					if _, ex, ok := strings.Cut(a, "exec(set_field:"); ok && !p.rpl {
						v, rest, _ := strings.Cut(ex, "/")
						m, _, _ := strings.Cut(rest, "->")
						vn, _ := strconv.ParseUint(v, 0, 32)
						mn, _ := strconv.ParseUint(m, 0, 32)
						st.mark = st.mark&^uint32(mn) | uint32(vn)
					}
				}
				if _, tbl, ok := strings.Cut(a, "table="); ok { // without, the pass goes on
					n, _ := strconv.Atoi(strings.TrimRight(strings.SplitN(tbl, ",", 2)[0], ")"))
					next = n
				}
			case strings.HasPrefix(a, "goto_table:"):
				next, _ = strconv.Atoi(strings.TrimPrefix(a, "goto_table:"))
			case strings.HasPrefix(a, "load:"):
				v, dst, _ := strings.Cut(strings.TrimPrefix(a, "load:"), "->")
				n, _ := strconv.ParseUint(v, 0, 32)
				if dst == "NXM_NX_TUN_ID[0..31]" {
					st.tunID = uint32(n)
				} else {
					i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(dst, "NXM_NX_REG"), "[]"))
					st.regs[i] = uint32(n)
				}
			case a == "move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[]":
				st.regs[0] = st.tunID
			case a == "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]":
				st.tunID = st.regs[0]
			case strings.HasPrefix(a, "set_field:") && strings.HasSuffix(a, "->eth_dst"):
				st.ethDst = strings.TrimSuffix(strings.TrimPrefix(a, "set_field:"), "->eth_dst")
			case strings.HasPrefix(a, "set_field:"):
				v, _, _ := strings.Cut(strings.TrimPrefix(a, "set_field:"), "->")
				st.tunDst = netip.MustParseAddr(v)
			case strings.HasPrefix(a, "output:"):
				port := st.regs[2]
				if a != "output:NXM_NX_REG2[]" {
					n, _ := strconv.Atoi(strings.TrimPrefix(a, "output:"))
					port = uint32(n)
				}
				if port != p.inPort {
					out = append(out, simOutput{port: port, tunID: st.tunID, tunDst: st.tunDst, ethDst: st.ethDst, committed: st.committed, tracked: st.trk})
				}
			}
		}
		if next < 0 {
			return out
		}
		table = next
	}
	s.t.Errorf("loop for %+v", p)
	return nil
}

func allMatch(st *simState, ms []string) bool {
	for _, m := range ms {
		if !st.matches(m) {
			return false
		}
	}
	return true
}

var (
	ipRouter = netip.MustParseAddr("10.128.0.2")   // port 3, VNID 0
	ipWeb    = netip.MustParseAddr("10.128.0.3")   // port 4, VNID 10
	ipDB     = netip.MustParseAddr("10.128.1.200") // port 5, VNID 11
	ipRemote = netip.MustParseAddr("10.128.2.5")   // on node-2
	ipNode2  = netip.MustParseAddr("192.168.100.12")
	ipGW     = netip.MustParseAddr("10.128.0.1")
	ipNode1  = netip.MustParseAddr("192.168.100.11")
)

func fromPod(port uint32, src, dst netip.Addr) simPacket {
	return simPacket{inPort: port, proto: 6, src: src, dst: dst, tpDst: 80}
}

func sctp(p simPacket) simPacket { p.proto = 132; return p }

func port(p simPacket, n uint16) simPacket { p.tpDst = n; return p }

func udp(p simPacket, n uint16) simPacket { p.proto, p.tpDst = 17, n; return p }

// reply marks p as the tracker would see a reply of a committed connection
// with ct_mark mark; related as an ICMP error about one.
func reply(p simPacket, mark uint32) simPacket { p.rpl, p.mark = true, mark; return p }

func related(p simPacket, mark uint32) simPacket { p.rel, p.mark = true, mark; return p }

func arpFromPod(port uint32, src, dst netip.Addr) simPacket {
	return simPacket{inPort: port, arp: true, src: src, dst: dst, arpSha: PodMAC(src)}
}

// Services of the sample node: web's project (VNID 10) and db's (11).
var (
	ipSvcWeb = netip.MustParseAddr("172.30.0.10")
	ipSvcDB  = netip.MustParseAddr("172.30.0.11")
	ipSvcDNS = netip.MustParseAddr("172.30.0.2") // a global project's
)

func sampleServices() []Service {
	return []Service{
		{Namespace: "web", Name: "web", ClusterIP: ipSvcWeb, VNID: 10, Ports: []ServicePort{{ProtoTCP, 80}, {ProtoSCTP, 80}}},
		{Namespace: "db", Name: "db", ClusterIP: ipSvcDB, VNID: 11, Ports: []ServicePort{{ProtoTCP, 80}}},
		{Namespace: "default", Name: "dns", ClusterIP: ipSvcDNS, Ports: []ServicePort{{ProtoUDP, 53}}},
	}
}

// withServices returns the sample program and the rules of sampleServices.
func withServices(t *testing.T, mode Mode) []string {
	cfg := sampleNode(mode)
	rules := sampleProgram(t, mode)
	for _, svc := range sampleServices() {
		rules = append(rules, must(t)(ServiceRules(cfg, svc))...)
	}
	return rules
}

func TestProgramBehaviour(t *testing.T) {
	mt := newSimulator(t, withServices(t, ModeMultitenant))
	flat := newSimulator(t, sampleProgram(t, ModeSubnet))
	vx := func(src, dst netip.Addr, tunSrc netip.Addr, vni uint32) simPacket {
		return simPacket{inPort: PortVXLAN, proto: 6, src: src, dst: dst, tunSrc: tunSrc, tunID: vni}
	}
	spoofed := arpFromPod(4, ipWeb, ipGW)
	spoofed.arpSha = PodMAC(ipRouter)
	toVXLANPort := fromPod(4, ipWeb, ipDB)
	toVXLANPort.proto, toVXLANPort.tpDst = 17, VXLANPort
	dns := fromPod(4, ipWeb, ipNode1)
	dns.proto, dns.tpDst = 17, 53
	mcast := fromPod(4, ipWeb, netip.MustParseAddr("224.1.1.1"))

	for _, tc := range []struct {
		name string
		sim  *simulator
		pkt  simPacket
		want string // outputs, space separated; "" = drop
	}{
		{"tenant to other tenant is isolated", mt, fromPod(4, ipWeb, ipDB), ""},
		{"subnet mode is flat", flat, fromPod(4, ipWeb, ipDB), "port5"},
		{"tenant to global", mt, fromPod(4, ipWeb, ipRouter), "port3"},
		{"global to tenant", mt, fromPod(3, ipRouter, ipDB), "port5"},
		{"host gateway reaches every pod", mt, fromPod(PortTun0, ipGW, ipDB), "port5"},
		{"host node IP reaches every pod", mt, fromPod(PortTun0, ipNode1, ipWeb), "port4"},
		{"pod to remote pod carries source VNID", mt, fromPod(4, ipWeb, ipRemote), "vxlan(vni=10,dst=192.168.100.12)"},
		{"vxlan same tenant", mt, vx(ipRemote, ipWeb, ipNode2, 10), "port4"},
		{"vxlan other tenant", mt, vx(ipRemote, ipWeb, ipNode2, 11), ""},
		{"vxlan global", mt, vx(ipRemote, ipDB, ipNode2, 0), "port5"},
		{"vxlan from unknown node", mt, vx(ipRemote, ipWeb, netip.MustParseAddr("192.168.100.99"), 10), ""},
		{"vxlan to outside the cluster", mt, vx(ipRemote, netip.MustParseAddr("8.8.8.8"), ipNode2, 10), ""},
		{"vxlan to the gateway", mt, vx(ipRemote, ipGW, ipNode2, 10), "port2"},
		{"spoofed source IP", mt, fromPod(4, ipRouter, ipDB), ""},
		{"pod on the wrong port", mt, fromPod(5, ipWeb, ipRouter), ""},
		{"pods may not send VXLAN", flat, toVXLANPort, ""},
		{"egress to the internet via tun0", mt, fromPod(4, ipWeb, netip.MustParseAddr("8.8.8.8")), "port2"},
		{"service of the own project via tun0", mt, fromPod(4, ipWeb, ipSvcWeb), "port2"},
		{"service of the own project, SCTP", mt, sctp(fromPod(4, ipWeb, ipSvcWeb)), "port2"},
		{"service of another project", mt, fromPod(4, ipWeb, ipSvcDB), ""},
		{"service port not exposed", mt, port(fromPod(4, ipWeb, ipSvcWeb), 81), ""},
		{"unknown service", mt, fromPod(4, ipWeb, netip.MustParseAddr("172.30.0.99")), ""},
		{"global pod reaches every service", mt, fromPod(3, ipRouter, ipSvcDB), "port2"},
		{"global service open to all", mt, udp(fromPod(5, ipDB, ipSvcDNS), 53), "port2"},
		{"subnet mode: every service", flat, fromPod(4, ipWeb, ipSvcDB), "port2"},
		{"backend's reply to a DNATed request goes back to the host", mt, reply(fromPod(3, ipRouter, ipWeb), viaHostMark), "port2"},
		{"remote backend's reply goes back to the host", mt, reply(vx(ipRemote, ipWeb, ipNode2, 10), viaHostMark), "port2"},
		{"reply of a connection not through the host", mt, reply(fromPod(3, ipRouter, ipWeb), 0), "port4"},
		{"ICMP error about a DNATed request", mt, related(fromPod(3, ipRouter, ipWeb), viaHostMark), "port2"},
		{"DNS to the node IP", mt, dns, "port2"},
		{"to the gateway", mt, fromPod(5, ipDB, ipGW), "port2"},
		{"service DNAT back to same tenant", mt, fromPod(PortTun0, ipWeb, ipRouter), "port3"},
		{"service DNAT back to other tenant", mt, fromPod(PortTun0, ipWeb, ipDB), ""},
		{"service DNAT back, unknown pod", mt, fromPod(PortTun0, netip.MustParseAddr("10.128.0.77"), ipDB), ""},
		{"service DNAT back to remote", mt, fromPod(PortTun0, ipWeb, ipRemote), "vxlan(vni=10,dst=192.168.100.12)"},
		{"multicast without opt-in", mt, mcast, ""},
		{"ARP for the gateway", mt, arpFromPod(4, ipWeb, ipGW), "port2"},
		{"ARP with a forged sender MAC", mt, spoofed, ""},
		{"ARP for a local pod ignores tenants", mt, arpFromPod(4, ipWeb, ipDB), "port5"},
		{"ARP for a remote pod", mt, arpFromPod(4, ipWeb, ipRemote), "vxlan(vni=10,dst=192.168.100.12)"},
		{"ARP outside the cluster", mt, arpFromPod(4, ipWeb, netip.MustParseAddr("8.8.8.8")), ""},
		{"host ARP for a pod", mt, simPacket{inPort: PortTun0, arp: true, src: ipGW, dst: ipWeb}, "port4"},
		{"vxlan ARP to a local pod", mt, simPacket{inPort: PortVXLAN, arp: true, src: ipRemote, dst: ipWeb, tunSrc: ipNode2, tunID: 10}, "port4"},
		{"vxlan ARP to a remote subnet", mt, simPacket{inPort: PortVXLAN, arp: true, src: ipRemote, dst: netip.MustParseAddr("10.128.4.9"), tunSrc: ipNode2}, ""},
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

// TestMulticastOptIn runs multicast through the sample program with VNID
// 10 (web, port 4; a second pod on port 6) and VNID 0 (router, port 3)
// opted in, and VNID 11 (db, port 5) not: an opted-in VNID's multicast
// goes to each remote node with its VNID as VNI and to its local pods
// only; from vxlan0 it reaches the local pods of the VNI's VNID only if
// that VNID opted in, and only from a known node; a global project's
// (VNID 0) stays in VNID 0; nothing crosses VNIDs.
func TestMulticastOptIn(t *testing.T) {
	t.Run("multitenant", func(t *testing.T) { multicastOptIn(t, ModeMultitenant) })
	t.Run("networkpolicy", func(t *testing.T) { multicastOptIn(t, ModeNetworkPolicy) })
}

func multicastOptIn(t *testing.T, mode Mode) {
	cfg := sampleNode(mode)
	rules := append(sampleProgram(t, mode), must(t)(MulticastRules(cfg, 10, []uint32{4, 6}))...)
	rules = append(rules, must(t)(MulticastRules(cfg, 0, []uint32{3}))...)
	sim := newSimulator(t, rules)
	group := netip.MustParseAddr("224.1.1.1")
	vx := func(vni uint32, tunSrc netip.Addr) simPacket {
		return simPacket{inPort: PortVXLAN, proto: 17, src: ipRemote, dst: group, tunSrc: tunSrc, tunID: vni}
	}
	fanout := func(vni int) string {
		return fmt.Sprintf("vxlan(vni=%d,dst=192.168.100.12) vxlan(vni=%d,dst=192.168.100.13)", vni, vni)
	}
	for _, tc := range []struct {
		name string
		pkt  simPacket
		want string
	}{
		{"opted-in pod: remote nodes and the other local pod", fromPod(4, ipWeb, group), fanout(10) + " port6"},
		{"opted-out VNID", fromPod(5, ipDB, group), ""},
		{"global project stays in VNID 0", fromPod(3, ipRouter, group), fanout(0)},
		{"spoofed source", fromPod(5, ipWeb, group), ""},
		{"vxlan, opted-in VNI", vx(10, ipNode2), "port4 port6"},
		{"vxlan, opted-out VNI", vx(11, ipNode2), ""},
		{"vxlan, VNI 0 reaches VNID 0 only", vx(0, ipNode2), "port3"},
		{"vxlan, unknown VNI", vx(12, ipNode2), ""},
		{"vxlan from an unknown node", vx(10, netip.MustParseAddr("192.168.100.99")), ""},
		{"the host's multicast", fromPod(PortTun0, ipGW, group), ""},
	} {
		var got []string
		for _, o := range sim.run(tc.pkt) {
			got = append(got, o.String())
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, g, tc.want)
		}
	}
}
