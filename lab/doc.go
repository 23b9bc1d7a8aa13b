// Package lab builds network-namespace topologies on this machine for the
// demo, the integration tests and gvs-bench: N nodes on a shared underlay,
// M pods per node spread over P projects, and optionally an "outside world"
// host beyond the nodes.
//
// A lab with Spec.Prefix "gvs-demo", two nodes and two pods per node is
//
//	gvs-demo-ul        underlay: Linux bridge br0, one port per node (n1, n2, ...) and ext
//	gvs-demo-n1        node 1: eth0 at Underlay+11 (peer n1 on br0), lo up
//	gvs-demo-n1-p1     pod 1 of node 1: only lo, up (the switch daemon adds eth0)
//	gvs-demo-n1-p2
//	gvs-demo-n2        node 2: eth0 at Underlay+12
//	gvs-demo-n2-p1
//	gvs-demo-n2-p2
//	gvs-demo-ext       external host (Spec.External): eth0 at Underlay+200 on br0
//
// Every namespace is a named namespace, bind-mounted at /run/netns/NAME, so
// `ip netns exec NAME ...` works for humans too. The underlay addresses exist
// only inside these namespaces; nothing is added to the machine's own
// namespace, and nodes get no default route (the external host is on-link).
//
// The lab's description (lab.json) and the processes started in it (pids)
// are kept in the state directory /run/gvs-lab/PREFIX, so another process can
// reopen a running lab with Load and remove it with Lab.Destroy or
// DestroyPrefix. Processes are ended by process id only, and only after the
// recorded start time has been checked, so a reused id is never signalled.
//
// Creating a lab needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and the `ip`
// command from iproute2; Ping needs iputils-ping.
package lab
