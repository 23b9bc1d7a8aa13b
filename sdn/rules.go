package sdn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RuleVersion is the version of the rule program, the second byte of the
// version note in table 253. It must change whenever the text produced by
// the generators changes: the golden test pins the program's hash to it.
const RuleVersion = 1

// The tables of the rule program (SPEC §2.3; docs/openshift-rules.md).
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
	TableService          = 60  // service network → tun0
	TableIPLocal          = 70  // IP to a local pod: reg1, reg2
	TableIsolation        = 80  // tenant isolation, output reg2
	TableIPRemote         = 90  // IP to a remote subnet
	TableEgressDNS        = 99  // DNS to the node IP bypasses egress policy
	TableEgressFW         = 100 // egress firewall (keyed by reg0)
	TableEgressIP         = 101 // egress IP; default NAT egress via tun0
	TableMulticastOut     = 110 // multicast from local pods, per-VNID opt-in
	TableMulticastDeliver = 120 // multicast delivery to local pods
	TableVersion          = 253 // version note
)

// Fixed action texts.
const (
	actTunToReg0   = "move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[]"
	actReg0ToTun   = "move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31]"
	actOutputReg2  = "output:NXM_NX_REG2[]"
	actDrop        = "drop"
	actOutputTun0  = "output:2"
	actOutputVXLAN = "output:1"
)

func gotoTable(n int) string           { return "goto_table:" + strconv.Itoa(n) }
func output(port uint32) string        { return "output:" + strconv.FormatUint(uint64(port), 10) }
func loadReg(reg int, v uint32) string { return fmt.Sprintf("load:%#x->NXM_NX_REG%d[]", v, reg) }

// flow formats one rule in ovs-ofctl syntax:
// "table=N, priority=P[, cookie=0x…][, match], actions=a1,a2".
func flow(table, priority int, cookie uint64, match string, actions ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table=%d, priority=%d", table, priority)
	if cookie != 0 {
		fmt.Fprintf(&b, ", cookie=%#x", cookie)
	}
	if match != "" {
		b.WriteString(", ")
		b.WriteString(match)
	}
	b.WriteString(", actions=")
	b.WriteString(strings.Join(actions, ","))
	return b.String()
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
// be valid (see NodeConfig.Validate); the result is deterministic.
func SetupRules(cfg NodeConfig) []string {
	mode := cfg.Mode.Canonical()
	gw := cfg.Gateway()
	sub := cfg.Subnet.Masked()
	var r []string
	add := func(s string) { r = append(r, s) }

	// Table 0: dispatch on in_port.
	// vxlan0: ARP to the local subnet, IP to the cluster network (and
	// cluster multicast); the VNI is the source VNID.
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableClassify, 200, 0, fmt.Sprintf("in_port=%d, arp, nw_src=%v, nw_dst=%v", PortVXLAN, cn, sub), actTunToReg0, gotoTable(TableVXLANIn)))
	}
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableClassify, 200, 0, fmt.Sprintf("in_port=%d, ip, nw_dst=%v", PortVXLAN, cn), actTunToReg0, gotoTable(TableVXLANIn)))
	}
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableClassify, 200, 0, fmt.Sprintf("in_port=%d, ip, nw_src=%v, nw_dst=%v", PortVXLAN, cn, multicastNet), actTunToReg0, gotoTable(TableVXLANIn)))
	}
	add(flow(TableClassify, 150, 0, fmt.Sprintf("in_port=%d", PortVXLAN), actDrop))
	// tun0: the host is VNID 0 (explicitly), except pod-sourced traffic the
	// host sends back after service DNAT, which table 25 re-tags.
	add(flow(TableClassify, 500, 0, fmt.Sprintf("in_port=%d, ip, nw_dst=%v", PortTun0, multicastNet), actDrop))
	add(flow(TableClassify, 400, 0, fmt.Sprintf("in_port=%d, ip, nw_src=%v", PortTun0, gw), loadReg(0, 0), gotoTable(TableConntrack)))
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableClassify, 300, 0, fmt.Sprintf("in_port=%d, ip, nw_src=%v, nw_dst=%v", PortTun0, sub, cn), gotoTable(TableFromHost)))
	}
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableClassify, 200, 0, fmt.Sprintf("in_port=%d, arp, nw_src=%v, nw_dst=%v", PortTun0, gw, cn), loadReg(0, 0), gotoTable(TableConntrack)))
	}
	add(flow(TableClassify, 200, 0, fmt.Sprintf("in_port=%d, ip", PortTun0), loadReg(0, 0), gotoTable(TableConntrack)))
	add(flow(TableClassify, 150, 0, fmt.Sprintf("in_port=%d", PortTun0), actDrop))
	// pods
	add(flow(TableClassify, 100, 0, "arp", gotoTable(TablePodIn)))
	add(flow(TableClassify, 100, 0, "ip", gotoTable(TablePodIn)))
	add(flow(TableClassify, 0, 0, "", actDrop))

	// Table 10: VXLAN from known nodes (NodeRules).
	add(flow(TableVXLANIn, 0, 0, "", actDrop))

	// Table 20: pod anti-spoofing (PodRules); pods may not speak VXLAN.
	add(flow(TablePodIn, 300, 0, fmt.Sprintf("udp, udp_dst=%d", VXLANPort), actDrop))
	add(flow(TablePodIn, 0, 0, "", actDrop))

	// Table 25: pod traffic back from the host (PodRules).
	add(flow(TableFromHost, 0, 0, "", actDrop))

	// Tables 27 and 30: NetworkPolicy hooks, pass-through here.
	add(flow(TablePolicyEgress, 0, 0, "", gotoTable(TableConntrack)))
	add(flow(TableConntrack, 0, 0, "", gotoTable(TableRoute)))

	// Table 31: route by destination.
	add(flow(TableRoute, 300, 0, fmt.Sprintf("arp, nw_dst=%v", gw), actOutputTun0))
	add(flow(TableRoute, 300, 0, fmt.Sprintf("ip, nw_dst=%v", gw), actOutputTun0))
	add(flow(TableRoute, 200, 0, fmt.Sprintf("arp, nw_dst=%v", sub), gotoTable(TableARPLocal)))
	add(flow(TableRoute, 200, 0, fmt.Sprintf("ip, nw_dst=%v", sub), gotoTable(TableIPLocal)))
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableRoute, 100, 0, fmt.Sprintf("arp, nw_dst=%v", cn), gotoTable(TableARPRemote)))
	}
	for _, cn := range cfg.ClusterNetworks {
		add(flow(TableRoute, 100, 0, fmt.Sprintf("ip, nw_dst=%v", cn), gotoTable(TableIPRemote)))
	}
	add(flow(TableRoute, 100, 0, fmt.Sprintf("ip, nw_dst=%v", cfg.ServiceNetwork.Masked()), gotoTable(TableService)))
	add(flow(TableRoute, 50, 0, fmt.Sprintf("in_port=%d, ip, nw_dst=%v", PortVXLAN, multicastNet), gotoTable(TableMulticastDeliver)))
	add(flow(TableRoute, 25, 0, fmt.Sprintf("ip, nw_dst=%v", multicastNet), gotoTable(TableMulticastOut)))
	add(flow(TableRoute, 10, 0, "ip", gotoTable(TableEgressDNS)))
	add(flow(TableRoute, 0, 0, "", actDrop)) // ARP to anything else

	// Tables 40, 50: ARP to a local pod (PodRules) / a remote subnet (NodeRules).
	add(flow(TableARPLocal, 0, 0, "", actDrop))
	add(flow(TableARPRemote, 0, 0, "", actDrop))

	// Table 60: services go to the host (kube-proxy).
	add(flow(TableService, 100, 0, "", actOutputTun0))

	// Table 70: IP to a local pod (PodRules).
	add(flow(TableIPLocal, 0, 0, "", actDrop))

	// Table 80: isolation. The host (gateway) reaches every pod.
	add(flow(TableIsolation, 300, 0, fmt.Sprintf("ip, nw_src=%v", gw), actOutputReg2))
	if mode == ModeMultitenant {
		// VNID 0 is global both ways; reg0 = reg1 = V rules come from VNIDRules.
		add(flow(TableIsolation, 200, 0, "reg0=0", actOutputReg2))
		add(flow(TableIsolation, 150, 0, "reg1=0", actOutputReg2))
		add(flow(TableIsolation, 0, 0, "", actDrop))
	} else {
		add(flow(TableIsolation, 100, 0, "", actOutputReg2))
	}

	// Table 90: IP to a remote subnet (NodeRules).
	add(flow(TableIPRemote, 0, 0, "", actDrop))

	// Tables 99–101: egress. DNS to the node IP always works; then egress
	// firewall and egress IP hooks; default: tun0, where the host masquerades.
	add(flow(TableEgressDNS, 200, 0, fmt.Sprintf("tcp, nw_dst=%v, tp_dst=53", cfg.NodeIP), actOutputTun0))
	add(flow(TableEgressDNS, 200, 0, fmt.Sprintf("udp, nw_dst=%v, tp_dst=53", cfg.NodeIP), actOutputTun0))
	add(flow(TableEgressDNS, 0, 0, "", gotoTable(TableEgressFW)))
	add(flow(TableEgressFW, 0, 0, "", gotoTable(TableEgressIP)))
	add(flow(TableEgressIP, 0, 0, "", actOutputTun0))

	// Tables 110, 120: multicast, dropped unless a VNID opts in (MulticastRules).
	add(flow(TableMulticastOut, 0, 0, "", actDrop))
	add(flow(TableMulticastDeliver, 0, 0, "", actDrop))

	// Table 253: version note.
	add(flow(TableVersion, 0, 0, "", "note:"+VersionNote(mode)))
	return r
}

// PodRules returns the five rules of one local pod (SPEC §2.3), all tagged
// with PodCookie(pod.IP): table 20 ARP and IP anti-spoofing (reg0 = VNID),
// table 25 (reg0 reloaded for traffic back from the host), table 40 (ARP to
// the pod) and table 70 (reg1 = VNID, reg2 = port). In subnet mode the VNID
// is always 0. The pod should pass cfg.CheckPod.
func PodRules(cfg NodeConfig, pod Pod) []string {
	vnid := pod.VNID & MaxVNID
	if cfg.Mode.Canonical() == ModeSubnet {
		vnid = 0
	}
	ip := pod.IP.Unmap()
	c := PodCookie(ip)
	mac := FormatMAC(PodMAC(ip))
	return []string{
		flow(TablePodIn, 100, c, fmt.Sprintf("in_port=%d, arp, nw_src=%v, arp_sha=%s", pod.Port, ip, mac), loadReg(0, vnid), gotoTable(TableConntrack)),
		flow(TablePodIn, 100, c, fmt.Sprintf("in_port=%d, ip, nw_src=%v", pod.Port, ip), loadReg(0, vnid), gotoTable(TablePolicyEgress)),
		flow(TableFromHost, 100, c, fmt.Sprintf("ip, nw_src=%v", ip), loadReg(0, vnid), gotoTable(TablePolicyEgress)),
		flow(TableARPLocal, 100, c, fmt.Sprintf("arp, nw_dst=%v", ip), output(pod.Port)),
		flow(TableIPLocal, 100, c, fmt.Sprintf("ip, nw_dst=%v", ip), loadReg(1, vnid), loadReg(2, pod.Port), gotoTable(TableIsolation)),
	}
}

// NodeRules returns the three rules of one remote node, all tagged with
// NodeCookie(node.IP): table 10 accepts its VXLAN (tun_src), tables 50 (ARP)
// and 90 (IP) send traffic for its subnet into the tunnel with the source
// VNID (reg0) as VNI. The node should pass cfg.CheckRemote.
func NodeRules(cfg NodeConfig, node RemoteNode) []string {
	ip := node.IP.Unmap()
	c := NodeCookie(ip)
	sub := node.Subnet.Masked()
	tunnel := []string{actReg0ToTun, fmt.Sprintf("set_field:%v->tun_dst", ip), actOutputVXLAN}
	return []string{
		flow(TableVXLANIn, 100, c, fmt.Sprintf("tun_src=%v", ip), gotoTable(TableConntrack)),
		flow(TableARPRemote, 100, c, fmt.Sprintf("arp, nw_dst=%v", sub), tunnel...),
		flow(TableIPRemote, 100, c, fmt.Sprintf("ip, nw_dst=%v", sub), tunnel...),
	}
}

// VNIDRules returns the isolation rule that lets pods of VNID v talk to each
// other (table 80: reg0 = reg1 = v), tagged with VNIDCookie(v). It returns
// nil outside multitenant mode and for VNID 0, which SetupRules already
// covers. Install it with a VNID's first local pod, remove it (VNIDFilter)
// with its last.
func VNIDRules(cfg NodeConfig, v uint32) []string {
	if cfg.Mode.Canonical() != ModeMultitenant || v == 0 {
		return nil
	}
	v &= MaxVNID
	return []string{
		flow(TableIsolation, 100, VNIDCookie(v), fmt.Sprintf("reg0=%d, reg1=%d", v, v), actOutputReg2),
	}
}

// MulticastRules opts VNID v in to multicast between its local pods: table
// 110 passes its multicast to table 120, which copies it to every port in
// ports (the packet never goes back out of its in_port). Rules carry
// MulticastCookie(v); with no ports it returns nil. Multicast across nodes
// is not implemented: VXLAN multicast is dropped at table 0 unless these
// rules exist, and nothing sends it. The switch caps the outputs of one
// packet (flowtable.MaxOutputs), so only that many pods receive a copy.
func MulticastRules(cfg NodeConfig, v uint32, ports []uint32) []string {
	if len(ports) == 0 {
		return nil
	}
	if cfg.Mode.Canonical() == ModeSubnet {
		v = 0
	}
	v &= MaxVNID
	ps := slices.Clone(ports)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	outs := make([]string, len(ps))
	for i, p := range ps {
		outs[i] = output(p)
	}
	c := MulticastCookie(v)
	return []string{
		flow(TableMulticastOut, 100, c, fmt.Sprintf("reg0=%d", v), gotoTable(TableMulticastDeliver)),
		flow(TableMulticastDeliver, 100, c, fmt.Sprintf("reg0=%d", v), outs...),
	}
}

// Program returns the whole rule set of a node: SetupRules, then PodRules
// for each pod (by IP), the VNIDRules of every VNID in use (ascending), and
// NodeRules for each remote node (by IP). It is what a freshly built bridge
// holds, and what the golden tests pin.
func Program(cfg NodeConfig, pods []Pod, nodes []RemoteNode) []string {
	r := SetupRules(cfg)
	ps := slices.Clone(pods)
	slices.SortFunc(ps, func(a, b Pod) int { return a.IP.Compare(b.IP) })
	var vnids []uint32
	for _, p := range ps {
		r = append(r, PodRules(cfg, p)...)
		vnids = append(vnids, p.VNID&MaxVNID)
	}
	slices.Sort(vnids)
	for _, v := range slices.Compact(vnids) {
		r = append(r, VNIDRules(cfg, v)...)
	}
	ns := slices.Clone(nodes)
	slices.SortFunc(ns, func(a, b RemoteNode) int { return a.IP.Compare(b.IP) })
	for _, n := range ns {
		r = append(r, NodeRules(cfg, n)...)
	}
	return r
}

// GatewayMAC returns the MAC address tun0 uses: 0a:58 followed by the
// gateway address, like a pod's.
func GatewayMAC(cfg NodeConfig) [6]byte { return PodMAC(cfg.Gateway()) }
