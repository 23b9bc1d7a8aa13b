package control

import "time"

import "github.com/gvswitch/gvs/flowtable"

// ShowResult is the answer to "show".
type ShowResult struct {
	Node   string `json:"node"`
	NodeIP string `json:"nodeIP"`
	Subnet string `json:"subnet"`
	// SubnetChanges counts the times the registry gave this node another
	// subnet since the daemon started; PreviousSubnet is the one it lost.
	SubnetChanges  int    `json:"subnetChanges,omitempty"`
	PreviousSubnet string `json:"previousSubnet,omitempty"`
	Mode           string `json:"mode"`
	Version        string `json:"version"`
	Ports          int    `json:"ports"`
	Pods           int    `json:"pods"`
	Rules          int    `json:"rules"`
	Generation     uint64 `json:"generation"`
	// IOEngine is how pod TAPs move frames: "uring" or "tap" (the
	// daemon's ioEngine, resolved on this kernel).
	IOEngine string `json:"ioEngine,omitempty"`
	// SchedSlice is the scheduler time slice of the daemon's threads: the
	// short slice and when they have it (always, or while the CPUs are
	// busy, and whether they are now), or "kernel default (why)".
	SchedSlice string `json:"schedSlice,omitempty"`
	// BusyPoll is the readers' busy polling: its bound, how many may poll
	// at once and what polling found ("" when off).
	BusyPoll string `json:"busyPoll,omitempty"`
	// RxBuffers is the pod queues' receive-buffer budget: how much of it
	// is in use and how often a ring could not grow ("" without a bound).
	RxBuffers string `json:"rxBuffers,omitempty"`
	// Rings is the io_uring rings the TAP queues (pods' and tun0's) hold
	// now ("" without io_uring).
	Rings string `json:"rings,omitempty"`
	// Tunnel is how vxlan0 spreads flows: its receive sockets, whether
	// they are steered by outer source port, and its send ports ("" with
	// no tunnel port).
	Tunnel  string   `json:"tunnel,omitempty"`
	Remotes []Remote `json:"remotes"`
	// Registry is how the node reaches the control plane (nil without one).
	Registry *Registry `json:"registry,omitempty"`
}

// Registry is the node's connection to etcd: its identity and the
// certificate it last presented (after a certificate is replaced on disk,
// the next connection presents the new one).
type Registry struct {
	Endpoints []string `json:"endpoints"`
	Insecure  bool     `json:"insecure,omitempty"`
	Identity  string   `json:"identity,omitempty"`
	// CertSerial and CertNotAfter describe the presented certificate.
	CertSerial   string    `json:"certSerial,omitempty"`
	CertNotAfter time.Time `json:"certNotAfter,omitzero"`
}

// Remote is a remote node as the daemon knows it.
type Remote struct {
	Name   string `json:"name"`
	IP     string `json:"ip"`
	Subnet string `json:"subnet"`
	// FixedVNID is set for a host that is not a node with a fixed VNID
	// (OpenShift's F5 ramp): the one VNI to and from it.
	FixedVNID *uint32 `json:"fixedVNID,omitempty"`
}

// Port is one row of "dump-ports".
type Port struct {
	No        uint32 `json:"port"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	RxPackets uint64 `json:"rxPackets"`
	RxBytes   uint64 `json:"rxBytes"`
	RxDrops   uint64 `json:"rxDrops"`
	TxPackets uint64 `json:"txPackets"`
	TxBytes   uint64 `json:"txBytes"`
	TxDrops   uint64 `json:"txDrops"`
}

// Flow is one row of "dump-flows".
type Flow struct {
	Table    uint8  `json:"table"`
	Priority uint16 `json:"priority"`
	Cookie   uint64 `json:"cookie"`
	Packets  uint64 `json:"packets"`
	Bytes    uint64 `json:"bytes"`
	// Rule is the rule in ovs-ofctl syntax, without counters.
	Rule string `json:"rule"`
}

// CountResult is the answer to "add-flows" and "del-flows".
type CountResult struct {
	Count int `json:"count"`
}

// Stats is the answer to "stats".
type Stats struct {
	Drops      map[string]uint64 `json:"drops"`
	TableDrops map[int]uint64    `json:"tableDrops"`
	// TunnelDrops counts datagrams the tunnel port dropped before the
	// pipeline, by reason (unknown_peer, malformed, ...).
	TunnelDrops map[string]uint64 `json:"tunnelDrops"`
	Lookups     uint64            `json:"lookups"`
	CacheHits   uint64            `json:"cacheHits"`
}

// TraceResult is the answer to "trace".
type TraceResult struct {
	Node  string          `json:"node"`
	Trace flowtable.Trace `json:"trace"`
	Text  string          `json:"text"`
	// Next lists, for each output into the tunnel, the node it reaches and
	// the packet description to trace there.
	Next []NextHop `json:"next,omitempty"`
	// Policies names, for each NetworkPolicy cookie of the trace's steps
	// (a local pod's ingress rules in table 80, egress rules in table 27),
	// the policies those rules are compiled from.
	Policies []PolicyRules `json:"policies,omitempty"`
}

// PolicyRules names the NetworkPolicies behind the rules of one cookie.
type PolicyRules struct {
	Cookie    uint64   `json:"cookie"`
	Pod       string   `json:"pod"`       // the pod's address
	Direction string   `json:"direction"` // "ingress" or "egress"
	Policies  []string `json:"policies"`  // "namespace/name", sorted
}

// NextHop is where a traced packet continues.
type NextHop struct {
	Node   string `json:"node"`
	NodeIP string `json:"nodeIP"`
	Packet string `json:"packet"`
}

// CaptureRequest are the parameters of "capture": capture frames on a port
// and stream them as pcap (see Stream).
type CaptureRequest struct {
	// Port is a port number, a port name (vxlan0, tun0, a TAP) or a pod name.
	Port string `json:"port"`
	// Dir is in, out or both (the default), seen from the switch: in is
	// what the port delivered to the switch.
	Dir string `json:"dir,omitempty"`
	// Count stops the capture after that many frames (0: no limit).
	Count int `json:"count,omitempty"`
	// Seconds stops the capture after that long (0: no limit).
	Seconds float64 `json:"seconds,omitempty"`
	// Snaplen is the most bytes kept per frame (0: 262144).
	Snaplen int `json:"snaplen,omitempty"`
}

// CaptureStart is the response line of "capture", sent before the stream.
type CaptureStart struct {
	Port    uint32 `json:"port"`
	Name    string `json:"name"`
	Dir     string `json:"dir"`
	Snaplen int    `json:"snaplen"`
}

// CaptureSummary is the payload of the end chunk of "capture".
type CaptureSummary struct {
	// Captured frames were copied from the datapath; Dropped were lost
	// because the capture's queue was full (the datapath never waits).
	Captured uint64 `json:"captured"`
	Dropped  uint64 `json:"dropped"`
	// Written frames were sent to the client (Captured minus those still
	// queued when the capture stopped, e.g. after Count).
	Written uint64 `json:"written"`
	// Reason says why the capture ended: count, duration, client, port
	// removed, daemon stopping, or an error.
	Reason string `json:"reason"`
}

// ConntrackDump is the answer to "dump-conntrack": one line per
// connection in ovs-appctl dpctl/dump-conntrack -s's format.
type ConntrackDump struct {
	Entries []string `json:"entries"`
}

// ConntrackStats is the answer to "conntrack-stats": the tracker's
// counters (conntrack.Stats).
type ConntrackStats struct {
	Entries int               `json:"entries"`
	Max     int               `json:"max"`
	ByClass map[string]int64  `json:"byClass"` // entries by protocol and state, e.g. "tcp_established"
	Created uint64            `json:"created"`
	Expired uint64            `json:"expired"`
	Evicted uint64            `json:"evicted"`
	Flushed uint64            `json:"flushed"`
	Invalid uint64            `json:"invalid"`
	Reasons map[string]uint64 `json:"reasons"` // packets by why the tracker marked them (+inv) or refused a commit
}
