// Package ctdiff holds the differential test of gvs's connection tracking
// against Open vSwitch's userspace datapath (ctdiff_root_test.go): the same
// ct rule sets loaded into an in-process gvs switch (package vswitch, TAP
// ports in pod namespaces, a conntrack.Tracker) and into an OVS bridge with
// datapath_type=netdev (veth ports in pod namespaces of its own), the same
// traffic from the pods of both, and the same deliveries asserted.
//
// The rule sets: a stateful firewall that lets only replies in; two zones
// kept apart; SNAT; DNAT to a backend with un-NAT of its replies. The
// traffic: a TCP handshake, data both ways and FIN, a connection refused
// (RST) and one aborted (RST), out-of-window and impossible TCP segments
// written as raw frames, UDP with replies, UDP to a closed port (an ICMP
// port unreachable back), ICMP echo, and a 3000-byte ping in fragments.
//
// It needs root and Open vSwitch (make deps); it runs in namespaces it
// creates (through package lab) and removes them, and the OVS
// daemons, when it ends.
package ctdiff
