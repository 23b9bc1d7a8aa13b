// Package daemon is gvs-switchd: it builds one node's switch, its fixed
// ports and the OpenShift rule program, follows the control plane, and
// serves the control socket, /metrics and the CNI socket. cmd/gvs-switchd
// is a thin main around it.
//
// The parts live in packages of their own:
//
//   - sdn/node: the node's rule program, kept live in the flow table;
//   - internal/daemon/pods: the pod lifecycle (attach, adopt, detach, CNI);
//   - internal/daemon/source: the control plane as the node follows it
//     (ControlPlane) and the Mirror that drives the node (Sink); its
//     followers are internal/daemon/etcdsource (the etcd registry) and
//     internal/daemon/kubesource (a Kubernetes API server).
//
// This package holds the configuration (config.go, checked by pure
// functions; New takes a copy of it and never writes the caller's, and
// what the control plane fills in is the Daemon's own state, which
// Daemon.Config returns) and the Daemon, which composes four parts, each owning its
// state: the dataplane (dataplane.go, offload.go, conntrack.go), the
// node's state as the control plane drives it, which is the source.Sink
// (node.go, sink.go, labels.go, egressfw.go, subnet.go), the control
// plane followed (controlplane.go, kube.go) and the live upgrade
// (upgrade.go, handoff.go). The Daemon itself starts them (daemon.go) and
// serves the control socket (handle.go, capture.go), /metrics (metrics.go)
// and CNI (cni.go, cniinstall.go).
package daemon
