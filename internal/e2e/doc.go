// Package e2e holds gvs's end-to-end tests: real gvs-switchd processes in
// network namespaces that the tests create, with pods on TAPs, VXLAN on a
// veth underlay, NAT egress to an external host, and a kernel vxlan node to
// interoperate with. They need root and skip without it.
//
// Each test's lab is its own: its namespaces carry the test's prefix and
// the process ID, so tests whose verdict does not hang on timing run in
// parallel (t.Parallel, as many at once as go test's -parallel). Tests that
// count lost pings, measure throughput or race timeouts run alone.
package e2e
