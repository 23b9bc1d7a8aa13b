package sdn

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
)

// RuleVersion is the version of the rule program, the second byte of the
// version note in table 253. It must change whenever the rules produced by
// the generators change: the golden test pins the hash of the program's
// text (Text) to it.
const RuleVersion = 7

// The tables of the rule program (docs/openshift-rules.md).
const (
	TableClassify         = 0   // dispatch on in_port
	TableVXLANIn          = 10  // VXLAN from known nodes only
	TablePodIn            = 20  // pod anti-spoofing, reg0 = pod VNID
	TableFromHost         = 25  // pod-sourced traffic back from the host: reload reg0
	TablePolicyEgress     = 27  // NetworkPolicy egress (pass in other modes)
	TableConntrack        = 30  // NetworkPolicy ct commit (pass in other modes)
	TableRoute            = 31  // route by destination
	TableARPLocal         = 40  // ARP to a local pod
	TableARPRemote        = 50  // ARP to a remote subnet
	TableService          = 60  // service network → tun0 (multitenant: per service)
	TableIPLocal          = 70  // IP to a local pod: reg1, reg2
	TableIsolation        = 80  // tenant isolation, output reg2
	TableCommit           = 81  // NetworkPolicy: commit what table 80 let in, output reg2
	TableIPRemote         = 90  // IP to a remote subnet
	TableEgressDNS        = 99  // DNS to the node IP bypasses egress policy
	TableEgressFW         = 100 // egress firewall (keyed by reg0)
	TableEgressIP         = 101 // egress IP; default NAT egress via tun0
	TableMulticastOut     = 110 // multicast from local pods, per-VNID opt-in
	TableMulticastFanout  = 111 // multicast to every remote node (head-end replication)
	TableMulticastDeliver = 120 // multicast delivery to local pods
	TableVersion          = 253 // version note
)

// match is the conditions of one rule, in the order the text prints them.
type match = []flowtable.Cond

// The actions the program uses more than once.
func tunToReg0() flowtable.Action {
	return flowtable.Move(flowtable.FieldTunID.Bits(0, 31), flowtable.FieldReg0.Whole())
}

func reg0ToTun() flowtable.Action {
	return flowtable.Move(flowtable.FieldReg0.Whole(), flowtable.FieldTunID.Bits(0, 31))
}

func outputReg2() flowtable.Action { return flowtable.OutputField(flowtable.FieldReg2.Whole()) }

// accounts reports whether the program commits pod connections for flow
// export alone (Accounting in subnet or multitenant mode; networkpolicy
// mode commits them anyway).
func (c NodeConfig) accounts() bool {
	return c.Accounting && c.Mode.Canonical() != ModeNetworkPolicy
}

// deliver is what table 80 does with a packet its isolation lets in, in
// subnet and multitenant modes: output it, or, when the program accounts,
// commit it first in table 81.
func (c NodeConfig) deliver() flowtable.Action {
	if c.accounts() {
		return gotoTable(TableCommit)
	}
	return outputReg2()
}
func outputTun0() flowtable.Action  { return flowtable.OutputPort(PortTun0) }
func outputVXLAN() flowtable.Action { return flowtable.OutputPort(PortVXLAN) }

func gotoTable(n uint8) flowtable.Action { return flowtable.GotoTable(n) }

func loadReg(reg int, v uint32) flowtable.Action {
	return flowtable.Load(uint64(v), flowtable.RegField(reg).Whole())
}

// VersionNote returns the payload of the table 253 note for mode m:
// "MM.VV", the plugin mode byte (0 subnet, 1 multitenant, 2 networkpolicy)
// and RuleVersion, both in hex. A daemon that finds a different note at start
// rebuilds the bridge.
func VersionNote(m Mode) string {
	return fmt.Sprintf("%02x.%02x", m.pluginID(), RuleVersion)
}

// SetupRules returns the node's static rules: the default rule of every
// table and the rules that depend only on the node configuration. cfg must
// be valid (see NodeConfig.Validate); the result is deterministic. An error
// (wrapping flowtable.ErrInvalidRule) means cfg was not valid.
func SetupRules(cfg NodeConfig) ([]*flowtable.Rule, error) {
	mode := cfg.Mode.Canonical()
	gw := cfg.Gateway()
	sub := cfg.Subnet.Masked()
	var b flowtable.Builder
	var drop []flowtable.Action // no actions: drop
	ip, arp := flowtable.IP(), flowtable.ARP()
	inVXLAN, inTun0 := flowtable.InPort(PortVXLAN), flowtable.InPort(PortTun0)
	nwSrc, nwDst := flowtable.NwSrcPrefix, flowtable.NwDstPrefix

	// Table 0: dispatch on in_port.
	// vxlan0: ARP to the local subnet, IP to the cluster network (and
	// cluster multicast); the VNI is the source VNID.
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableClassify, 200, 0, match{inVXLAN, arp, nwSrc(cn), nwDst(sub)}, tunToReg0(), gotoTable(TableVXLANIn))
	}
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableClassify, 200, 0, match{inVXLAN, ip, nwDst(cn)}, tunToReg0(), gotoTable(TableVXLANIn))
	}
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableClassify, 200, 0, match{inVXLAN, ip, nwSrc(cn), nwDst(multicastNet)}, tunToReg0(), gotoTable(TableVXLANIn))
	}
	b.Add(TableClassify, 150, 0, match{inVXLAN}, drop...)
	// Connection state for services: the host DNATs a pod's request to a
	// service and sends it back in through tun0 with the pod's own source
	// address (table 25 below); the backend's reply must go back through
	// tun0 too, for the host to undo the DNAT. Such requests are committed
	// with ct_mark bit 0 set (viaHostMark); table 31 sends their replies to
	// tun0. The client is a pod of this node (the host DNATs what its own
	// pods send to tun0), so every packet to the local subnet is tracked
	// (zone 0), whichever port it comes from: a reply is then known as one.
	b.Add(TableClassify, 1000, 0, match{ip, nwDst(sub), flowtable.CtState(0, conntrack.StateTrk)},
		flowtable.Ct(flowtable.CT{Recirc: true, Table: TableClassify}))
	if mode == ModeMultitenant {
		// Table 60 admits services by port: tracked, a later fragment of a
		// datagram to a service is matched with its first fragment's
		// ports (conntrack's Meta.FragmentPorts), not dropped for having
		// none. (The networkpolicy mode tracks all IP, below; the subnet
		// mode's table 60 does not look at ports.)
		b.Add(TableClassify, 1000, 0, match{ip, nwDst(cfg.ServiceNetwork.Masked()), flowtable.CtState(0, conntrack.StateTrk)},
			flowtable.Ct(flowtable.CT{Recirc: true, Table: TableClassify}))
	}
	if mode == ModeNetworkPolicy {
		// NetworkPolicy passes the replies of allowed connections, in
		// both directions and to any destination: track all IP.
		b.Add(TableClassify, 999, 0, match{ip, flowtable.CtState(0, conntrack.StateTrk)},
			flowtable.Ct(flowtable.CT{Recirc: true, Table: TableClassify}))
	}
	// tun0: the host is VNID 0 (explicitly), except pod-sourced traffic the
	// host sends back after service DNAT, which table 25 re-tags after
	// committing it (above).
	b.Add(TableClassify, 500, 0, match{inTun0, ip, nwDst(multicastNet)}, drop...)
	b.Add(TableClassify, 400, 0, match{inTun0, ip, flowtable.NwSrc(gw)}, loadReg(0, 0), gotoTable(TableConntrack))
	for _, cn := range cfg.ClusterNetworks {
		if mode == ModeNetworkPolicy {
			// Committed only once accepted (tables 30 and 81), with the
			// mark then: reg3 bit 0 carries it there.
			b.Add(TableClassify, 300, 0, match{inTun0, ip, nwSrc(sub), nwDst(cn)},
				flowtable.Load(1, flowtable.FieldReg3.Bits(0, 0)),
				flowtable.Ct(flowtable.CT{Recirc: true, Table: TableFromHost}))
			continue
		}
		b.Add(TableClassify, 300, 0, match{inTun0, ip, nwSrc(sub), nwDst(cn)},
			flowtable.Ct(flowtable.CT{Commit: true, Recirc: true, Table: TableFromHost,
				Exec: []flowtable.CTExec{flowtable.SetCtMark(viaHostMark, viaHostMark)}}))
	}
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableClassify, 200, 0, match{inTun0, arp, flowtable.NwSrc(gw), nwDst(cn)}, loadReg(0, 0), gotoTable(TableConntrack))
	}
	b.Add(TableClassify, 200, 0, match{inTun0, ip}, loadReg(0, 0), gotoTable(TableConntrack))
	b.Add(TableClassify, 150, 0, match{inTun0}, drop...)
	// pods
	b.Add(TableClassify, 100, 0, match{arp}, gotoTable(TablePodIn))
	b.Add(TableClassify, 100, 0, match{ip}, gotoTable(TablePodIn))
	b.Add(TableClassify, 0, 0, nil, drop...)

	// Table 10: VXLAN from known nodes (NodeRules).
	b.Add(TableVXLANIn, 0, 0, nil, drop...)

	// Table 20: pod anti-spoofing (PodRules); pods may not speak VXLAN.
	b.Add(TablePodIn, 300, 0, match{flowtable.UDP(), flowtable.TpDst(VXLANPort)}, drop...)
	b.Add(TablePodIn, 0, 0, nil, drop...)

	// Table 25: pod traffic back from the host (PodRules).
	b.Add(TableFromHost, 0, 0, nil, drop...)

	// Tables 27, 30 and 81: NetworkPolicy egress and connection state. In
	// networkpolicy mode replies (and ICMP errors) of tracked connections
	// pass egress; so does the first pass of a request to a service, which
	// the host DNATs and sends back through tun0 and table 25, where the
	// real destination meets the egress rules (PolicyRules). A connection
	// is committed, so that its replies pass, only once every policy on
	// its way has let it through: what leaves the node (to another node,
	// a service, the outside) in table 30, after egress; what goes to a
	// local pod in table 81, after that pod's ingress (table 80) — never
	// before, or a pod denied all egress could answer a peer's request its
	// own ingress dropped, as if it were a reply. What came from vxlan0 was
	// committed at the node it left, and is committed here in table 81.
	// Requests the host DNATed (reg3 bit 0, table 0) are committed with
	// viaHostMark. Other modes pass.
	if mode == ModeNetworkPolicy {
		b.Add(TablePolicyEgress, 300, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRpl, 0)}, gotoTable(TableConntrack))
		b.Add(TablePolicyEgress, 300, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRel, 0)}, gotoTable(TableConntrack))
		b.Add(TablePolicyEgress, 250, 0, match{ip, nwDst(cfg.ServiceNetwork.Masked())}, gotoTable(TableConntrack))
	}
	b.Add(TablePolicyEgress, 0, 0, nil, gotoTable(TableConntrack))
	viaHostPending := flowtable.RegMasked(3, 1, 1)
	if mode == ModeNetworkPolicy {
		commit := func(mark bool, recirc bool, table uint8) flowtable.Action {
			c := flowtable.CT{Commit: true, Recirc: recirc, Table: table}
			if mark {
				c.Exec = []flowtable.CTExec{flowtable.SetCtMark(viaHostMark, viaHostMark)}
			}
			return flowtable.Ct(c)
		}
		b.Add(TableConntrack, 200, 0, match{ip, nwDst(sub)}, gotoTable(TableRoute))
		b.Add(TableConntrack, 200, 0, match{inVXLAN, ip}, gotoTable(TableRoute))
		b.Add(TableConntrack, 110, 0, match{ip, viaHostPending}, commit(true, true, TableRoute))
		b.Add(TableConntrack, 100, 0, match{ip}, commit(false, true, TableRoute))
		b.Add(TableCommit, 110, 0, match{ip, viaHostPending}, commit(true, false, 0), outputReg2())
		b.Add(TableCommit, 100, 0, match{ip}, commit(false, false, 0), outputReg2())
		b.Add(TableCommit, 0, 0, nil, outputReg2())
	}
	if cfg.accounts() {
		// Flow export (NodeConfig.Accounting): commit the pods'
		// connections where networkpolicy mode does, for the counts only.
		// No rule of these modes looks at their state (table 31's look
		// for ct_mark bit 0, which these commits never set; a packet
		// table 0 already tracked meets its cached connection, unchanged),
		// so no verdict changes. What leaves the node is committed here
		// (the other node's isolation judges it); what goes to a local pod
		// in table 81, once table 80 let it in.
		b.Add(TableConntrack, 200, 0, match{ip, nwDst(sub)}, gotoTable(TableRoute))
		b.Add(TableConntrack, 200, 0, match{inVXLAN, ip}, gotoTable(TableRoute))
		b.Add(TableConntrack, 100, 0, match{ip}, flowtable.Ct(flowtable.CT{Commit: true, Recirc: true, Table: TableRoute}))
		b.Add(TableCommit, 100, 0, match{ip}, flowtable.Ct(flowtable.CT{Commit: true}), outputReg2())
		b.Add(TableCommit, 0, 0, nil, outputReg2())
	}
	b.Add(TableConntrack, 0, 0, nil, gotoTable(TableRoute))

	// Table 31: route by destination. Replies (and ICMP errors) of
	// connections the host DNATed go back to it first, addressed to tun0's
	// MAC (the backend addressed the client's, which the host would drop).
	viaHost := flowtable.CtMarkMasked(viaHostMark, viaHostMark)
	toHost := []flowtable.Action{flowtable.SetFieldMAC(flowtable.FieldEthDst, GatewayMAC(cfg)), outputTun0()}
	b.Add(TableRoute, 400, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRpl, 0), viaHost}, toHost...)
	b.Add(TableRoute, 400, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRel, 0), viaHost}, toHost...)
	b.Add(TableRoute, 300, 0, match{arp, flowtable.NwDst(gw)}, outputTun0())
	b.Add(TableRoute, 300, 0, match{ip, flowtable.NwDst(gw)}, outputTun0())
	b.Add(TableRoute, 200, 0, match{arp, nwDst(sub)}, gotoTable(TableARPLocal))
	b.Add(TableRoute, 200, 0, match{ip, nwDst(sub)}, gotoTable(TableIPLocal))
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableRoute, 100, 0, match{arp, nwDst(cn)}, gotoTable(TableARPRemote))
	}
	for _, cn := range cfg.ClusterNetworks {
		b.Add(TableRoute, 100, 0, match{ip, nwDst(cn)}, gotoTable(TableIPRemote))
	}
	b.Add(TableRoute, 100, 0, match{ip, nwDst(cfg.ServiceNetwork.Masked())}, gotoTable(TableService))
	b.Add(TableRoute, 50, 0, match{inVXLAN, ip, nwDst(multicastNet)}, gotoTable(TableMulticastDeliver))
	b.Add(TableRoute, 25, 0, match{ip, nwDst(multicastNet)}, gotoTable(TableMulticastOut))
	b.Add(TableRoute, 10, 0, match{ip}, gotoTable(TableEgressDNS))
	b.Add(TableRoute, 0, 0, nil, drop...) // ARP to anything else

	// Tables 40, 50: ARP to a local pod (PodRules) / a remote subnet (NodeRules).
	b.Add(TableARPLocal, 0, 0, nil, drop...)
	b.Add(TableARPRemote, 0, 0, nil, drop...)

	// Table 60: services go to the host (kube-proxy). In multitenant mode
	// only to the services of the pod's own project (ServiceRules) and, from
	// VNID 0, to every service, as OpenShift SDN does: the host may
	// masquerade the request on its way, after which the backend's node
	// sees the gateway (VNID 0) as its source and can no longer tell.
	if mode == ModeMultitenant {
		b.Add(TableService, 200, 0, match{flowtable.Reg(0, 0)}, outputTun0())
		b.Add(TableService, 0, 0, nil, drop...)
	} else {
		b.Add(TableService, 100, 0, nil, outputTun0())
	}

	// Table 70: IP to a local pod (PodRules).
	b.Add(TableIPLocal, 0, 0, nil, drop...)

	// Table 80: isolation. The host (gateway) reaches every pod.
	if mode == ModeNetworkPolicy {
		b.Add(TableIsolation, 300, 0, match{ip, flowtable.NwSrc(gw)}, gotoTable(TableCommit))
	} else {
		b.Add(TableIsolation, 300, 0, match{ip, flowtable.NwSrc(gw)}, cfg.deliver())
	}
	switch mode {
	case ModeMultitenant:
		// VNID 0 is global both ways; reg0 = reg1 = V rules come from VNIDRules.
		b.Add(TableIsolation, 200, 0, match{flowtable.Reg(0, 0)}, cfg.deliver())
		b.Add(TableIsolation, 150, 0, match{flowtable.Reg(1, 0)}, cfg.deliver())
		b.Add(TableIsolation, 0, 0, nil, drop...)
	case ModeNetworkPolicy:
		// Replies of allowed connections always pass; a pod no ingress
		// policy selects accepts everything (priority 0); the rules of
		// selected pods (PolicyRules, 100 and 150) sit between. What a
		// pod accepts is committed in table 81.
		b.Add(TableIsolation, 200, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRpl, 0)}, outputReg2())
		b.Add(TableIsolation, 200, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRel, 0)}, outputReg2())
		b.Add(TableIsolation, 0, 0, nil, gotoTable(TableCommit))
	default:
		b.Add(TableIsolation, 100, 0, nil, cfg.deliver())
	}

	// Table 90: IP to a remote subnet (NodeRules).
	b.Add(TableIPRemote, 0, 0, nil, drop...)

	// Tables 99–101: egress. DNS to the node IP always works; then egress
	// firewall and egress IP hooks; default: tun0, where the host masquerades.
	b.Add(TableEgressDNS, 200, 0, match{flowtable.TCP(), flowtable.NwDst(cfg.NodeIP), flowtable.TpDst(53)}, outputTun0())
	b.Add(TableEgressDNS, 200, 0, match{flowtable.UDP(), flowtable.NwDst(cfg.NodeIP), flowtable.TpDst(53)}, outputTun0())
	b.Add(TableEgressDNS, 0, 0, nil, gotoTable(TableEgressFW))
	b.Add(TableEgressFW, 0, 0, nil, gotoTable(TableEgressIP))
	// Table 101: egress IPs (EgressIPRules) per VNID; the default is NAT
	// egress through tun0, addressed to tun0's own MAC whatever the pod
	// addressed: only the egress IP rules use the egress MACs the host
	// marks for source NAT (sdn/egressip.go). In networkpolicy mode, where
	// all IP is tracked, replies of connections that came from outside
	// through the host (a NodePort not masqueraded) go back to it, not to
	// the project's egress IP.
	if mode == ModeNetworkPolicy {
		b.Add(TableEgressIP, 150, 0, match{ip, flowtable.CtState(conntrack.StateTrk|conntrack.StateRpl, 0)},
			flowtable.SetFieldMAC(flowtable.FieldEthDst, GatewayMAC(cfg)), outputTun0())
	}
	b.Add(TableEgressIP, 0, 0, nil, flowtable.SetFieldMAC(flowtable.FieldEthDst, GatewayMAC(cfg)), outputTun0())

	// Tables 110, 111, 120: multicast, dropped unless a VNID opts in
	// (MulticastRules); table 111 copies it to every remote node
	// (MulticastFanoutRules) and, without remote nodes, only passes it on
	// to the local delivery.
	b.Add(TableMulticastOut, 0, 0, nil, drop...)
	b.Add(TableMulticastFanout, 0, 0, nil, gotoTable(TableMulticastDeliver))
	b.Add(TableMulticastDeliver, 0, 0, nil, drop...)

	// Table 253: version note.
	b.Add(TableVersion, 0, 0, nil, flowtable.Note([]byte{mode.pluginID(), RuleVersion}))
	return b.Rules()
}

// PodRuleCount is the number of rules PodRules returns for one pod.
const PodRuleCount = 5

// PodRules returns the five rules of one local pod (docs/openshift-rules.md),
// all tagged with PodCookie(pod.IP): table 20 ARP and IP anti-spoofing
// (reg0 = VNID), table 25 (reg0 reloaded for traffic back from the host),
// table 40 (ARP to the pod) and table 70 (reg1 = VNID, reg2 = port). In
// subnet mode the VNID is always 0; in networkpolicy mode it names the
// pod's namespace for NetworkPolicy's namespace selectors. The pod should pass cfg.CheckPod; an
// error (wrapping flowtable.ErrInvalidRule) means it does not.
func PodRules(cfg NodeConfig, pod Pod) ([]*flowtable.Rule, error) {
	vnid := pod.VNID & MaxVNID
	if cfg.Mode.Canonical() == ModeSubnet {
		vnid = 0
	}
	ip := flowtable.NwSrc(pod.IP)
	to := flowtable.NwDst(pod.IP)
	c := PodCookie(pod.IP)
	var b flowtable.Builder
	b.Add(TablePodIn, 100, c, match{flowtable.InPort(pod.Port), flowtable.ARP(), ip, flowtable.ArpSha(PodMAC(pod.IP))},
		loadReg(0, vnid), gotoTable(TableConntrack))
	b.Add(TablePodIn, 100, c, match{flowtable.InPort(pod.Port), flowtable.IP(), ip}, loadReg(0, vnid), gotoTable(TablePolicyEgress))
	b.Add(TableFromHost, 100, c, match{flowtable.IP(), ip}, loadReg(0, vnid), gotoTable(TablePolicyEgress))
	b.Add(TableARPLocal, 100, c, match{flowtable.ARP(), to}, flowtable.OutputPort(pod.Port))
	b.Add(TableIPLocal, 100, c, match{flowtable.IP(), to}, loadReg(1, vnid), loadReg(2, pod.Port), gotoTable(TableIsolation))
	return b.Rules()
}

// NodeRules returns the three rules of one remote node, all tagged with
// NodeCookie(node.IP): table 10 accepts its VXLAN (tun_src), tables 50 (ARP)
// and 90 (IP) send traffic for its subnet into the tunnel with the source
// VNID (reg0) as VNI. A host with a fixed VNID (node.HasFixedVNID) gets
// RampRules instead. The node should pass cfg.CheckRemote; an error means it
// does not.
func NodeRules(cfg NodeConfig, node RemoteNode) ([]*flowtable.Rule, error) {
	ip := node.IP.Unmap()
	if !ip.Is4() {
		return nil, fmt.Errorf("%w: node %s IP %v is not IPv4", ErrInvalidConfig, node.Name, node.IP)
	}
	if node.HasFixedVNID {
		return RampRules(cfg, node)
	}
	c := NodeCookie(ip)
	sub := flowtable.NwDstPrefix(node.Subnet.Masked())
	tunnel := []flowtable.Action{reg0ToTun(), flowtable.SetFieldIPv4(flowtable.FieldTunDst, ip.As4()), outputVXLAN()}
	var b flowtable.Builder
	b.Add(TableVXLANIn, 100, c, match{flowtable.TunSrc(ip)}, gotoTable(TableConntrack))
	b.Add(TableARPRemote, 100, c, match{flowtable.ARP(), sub}, tunnel...)
	b.Add(TableIPRemote, 100, c, match{flowtable.IP(), sub}, tunnel...)
	return b.Rules()
}

// VNIDRules returns the isolation rule that lets pods of VNID v talk to each
// other (table 80: reg0 = reg1 = v), tagged with VNIDCookie(v). It returns
// nil outside multitenant mode and for VNID 0, which SetupRules already
// covers. Install it with a VNID's first local pod, remove it (VNIDFilter)
// with its last.
func VNIDRules(cfg NodeConfig, v uint32) ([]*flowtable.Rule, error) {
	if cfg.Mode.Canonical() != ModeMultitenant || v == 0 {
		return nil, nil
	}
	v &= MaxVNID
	var b flowtable.Builder
	b.Add(TableIsolation, 100, VNIDCookie(v), match{flowtable.Reg(0, v), flowtable.Reg(1, v)}, cfg.deliver())
	return b.Rules()
}

// MulticastRules opts VNID v in to multicast, as OpenShift SDN's tables
// 110 and 120 do: table 110 sends the multicast of v's local pods to table
// 111 (MulticastFanoutRules: a copy to every remote node, with v as VNI,
// then table 120), and table 120 copies multicast of v — from a local pod,
// or from vxlan0 with VNI v — to every port in ports (the packet never goes
// back out of its in_port). Both rules match reg0 = v only: another VNID's
// multicast never reaches these ports, and VNID 0 (a global project) is a
// VNID like the others here. Rules carry MulticastCookie(v); with no ports
// (no local pod of v) it returns nil. IGMP joins are not tracked: every pod
// of v receives every group. The switch caps the outputs of one packet
// (flowtable.MaxOutputs), remote copies included.
func MulticastRules(cfg NodeConfig, v uint32, ports []uint32) ([]*flowtable.Rule, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	if cfg.Mode.Canonical() == ModeSubnet {
		v = 0
	}
	v &= MaxVNID
	ps := slices.Clone(ports)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	outs := make([]flowtable.Action, len(ps))
	for i, p := range ps {
		outs[i] = flowtable.OutputPort(p)
	}
	c := MulticastCookie(v)
	var b flowtable.Builder
	b.Add(TableMulticastOut, 100, c, match{flowtable.Reg(0, v)}, gotoTable(TableMulticastFanout))
	b.Add(TableMulticastDeliver, 100, c, match{flowtable.Reg(0, v)}, outs...)
	return b.Rules()
}

// MulticastFanoutRules returns table 111's head-end replication to the
// remote nodes at the underlay addresses remotes, as OpenShift SDN's
// UpdateVXLANMulticastFlows: one rule that sets the source VNID (reg0) as
// VNI and, for each node, its address as tun_dst and outputs to vxlan0,
// then goes on to table 120 for the local pods. Every remote node gets a
// copy, whether or not it has pods of the VNID (a node drops it in its
// table 120 then). It carries MulticastFanoutCookie; with no remote node it
// returns nil (SetupRules' default then only goes on to table 120). An
// address that is not IPv4 is an error wrapping ErrInvalidConfig.
func MulticastFanoutRules(cfg NodeConfig, remotes []netip.Addr) ([]*flowtable.Rule, error) {
	if len(remotes) == 0 {
		return nil, nil
	}
	ips := make([]netip.Addr, len(remotes))
	for i, ip := range remotes {
		ips[i] = ip.Unmap()
		if !ips[i].Is4() {
			return nil, fmt.Errorf("%w: remote node IP %v is not IPv4", ErrInvalidConfig, ip)
		}
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	ips = slices.Compact(ips)
	acts := []flowtable.Action{reg0ToTun()}
	for _, ip := range ips {
		acts = append(acts, flowtable.SetFieldIPv4(flowtable.FieldTunDst, ip.As4()), outputVXLAN())
	}
	acts = append(acts, gotoTable(TableMulticastDeliver))
	var b flowtable.Builder
	b.Add(TableMulticastFanout, 100, MulticastFanoutCookie, nil, acts...)
	return b.Rules()
}

// Program returns the whole rule set of a node: SetupRules, then PodRules
// for each pod (by IP), the VNIDRules of every VNID in use (ascending),
// NodeRules for each remote node (by IP) and their MulticastFanoutRules.
// No VNID has opted in to multicast (MulticastRules). It is what a freshly built bridge
// holds, and what the golden tests pin.
func Program(cfg NodeConfig, pods []Pod, nodes []RemoteNode) ([]*flowtable.Rule, error) {
	r, err := SetupRules(cfg)
	if err != nil {
		return nil, err
	}
	var errs []error
	add := func(rs []*flowtable.Rule, err error) {
		r = append(r, rs...)
		errs = append(errs, err)
	}
	ps := slices.Clone(pods)
	slices.SortFunc(ps, func(a, b Pod) int { return a.IP.Compare(b.IP) })
	var vnids []uint32
	for _, p := range ps {
		add(PodRules(cfg, p))
		vnids = append(vnids, p.VNID&MaxVNID)
	}
	slices.Sort(vnids)
	for _, v := range slices.Compact(vnids) {
		add(VNIDRules(cfg, v))
	}
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b RemoteNode) int { return a.IP.Compare(b.IP) })
	var ips []netip.Addr
	for _, n := range ns {
		add(NodeRules(cfg, n))
		if !n.HasFixedVNID { // a host that is not a node gets no multicast (ramp.go)
			ips = append(ips, n.IP)
		}
	}
	add(MulticastFanoutRules(cfg, ips))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// Text returns rules in ovs-ofctl add-flow syntax, one per string: the
// form people read (gvsctl dump-flows, the golden files in testdata) and
// ovs-ofctl takes. flowtable.ParseRule of each gives the rule back.
func Text(rules []*flowtable.Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.String()
	}
	return out
}

// GatewayMAC returns the MAC address tun0 uses: 0a:58 followed by the
// gateway address, like a pod's.
func GatewayMAC(cfg NodeConfig) [6]byte { return PodMAC(cfg.Gateway()) }
