// Package e2e holds gvs's end-to-end tests: real gvs-switchd processes in
// network namespaces that the tests create, with pods on TAPs, VXLAN on a
// veth underlay, NAT egress to an external host, and a kernel vxlan node to
// interoperate with. They need root and skip without it.
package e2e
