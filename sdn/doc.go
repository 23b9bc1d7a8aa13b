// Package sdn generates the OpenShift-SDN rule program that gvs-switchd
// loads into the flow table: flowtable.Rule values built in Go (no text is
// parsed on the way), so the switch needs to know nothing about pods,
// projects or VNIDs. Text returns the program in ovs-ofctl syntax, the form
// people read and the golden files in testdata hold.
//
// The program follows OpenShift SDN's (pkg/network/node/ovscontroller.go)
// with the table layout of docs/openshift-rules.md:
//
//  1. Table 0 dispatches on in_port: vxlan0 (port 1) copies the VNI into
//     reg0 and goes to 10; tun0 (port 2) is VNID 0 and goes to 30, except
//     pod-sourced traffic the host sends back after service DNAT (25); pods
//     go to 20.
//  2. Tables 10, 20, 25 admit traffic: known nodes, anti-spoofed pods (reg0 =
//     the pod's VNID), pods coming back from the host.
//  3. Tables 27 and 30 are NetworkPolicy hooks (pass-through here).
//  4. Table 31 routes by destination to 40/70 (local pod), 50/90 (remote
//     subnet, VXLAN with VNI = reg0), 60 (services, tun0), 110/111/120
//     (multicast: a copy to every remote node, then the local pods of the
//     VNID) or 99–101 (egress through tun0, masqueraded by the host).
//  5. Table 80 enforces isolation between VNIDs and outputs to reg2.
//  6. Table 253 holds the version note "MM.VV".
//
// SetupRules, PodRules, NodeRules, VNIDRules, MulticastRules and
// MulticastFanoutRules are pure functions of their arguments; each dynamic
// rule set carries a cookie (PodCookie, NodeCookie, VNIDCookie,
// MulticastCookie, MulticastFanoutCookie) so that it can be
// removed as one (PodFilter, NodeFilter, VNIDFilter). They return an error,
// and no rules, for input the validation functions (NodeConfig.Validate,
// CheckPod, CheckRemote) refuse and that cannot be written as rules.
// Subpackages nat and gateway set up the host side: the masquerade rule and
// tun0.
//
// docs/openshift-rules.md explains every table.
package sdn
