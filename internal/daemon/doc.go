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
// This package holds the configuration (config.go), the start-up with a
// control plane (controlplane.go), the node's state as the control plane
// drives it (the Sink: sink.go, labels.go, egressfw.go, subnet.go), the
// control socket's handlers (handle.go, capture.go, conntrack.go), the live
// upgrade (handoff.go), /metrics (metrics.go) and the CNI server (cni.go).
package daemon
