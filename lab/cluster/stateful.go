package cluster

import (
	"context"
	"fmt"
	"strings"
)

// The stateful rule set of the benchmarks' conntrack rows, the same on
// every dataplane: every IP packet goes through the connection tracker;
// new connections are committed, packets of established and related ones
// pass, anything else (invalid) is dropped.
var (
	// gvs: in front of the OpenShift program (tracking in table 0,
	// verdict in table 30, between the policy hooks and routing).
	statefulGVS = []string{
		"table=0, priority=1001, ip, ct_state=-trk, actions=ct(table=0)",
		"table=30, priority=500, ip, ct_state=+trk+new, actions=ct(commit),goto_table:31",
		"table=30, priority=500, ip, ct_state=+trk+est, actions=goto_table:31",
		"table=30, priority=500, ip, ct_state=+trk+rel, actions=goto_table:31",
		"table=30, priority=400, ip, ct_state=+trk, actions=drop",
	}
	// Open vSwitch: in front of the bridge's NORMAL switching.
	statefulOVS = []string{
		"table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)",
		"table=1, priority=100, ip, ct_state=+trk+new, actions=ct(commit),NORMAL",
		"table=1, priority=100, ip, ct_state=+trk+est, actions=NORMAL",
		"table=1, priority=100, ip, ct_state=+trk+rel, actions=NORMAL",
		"table=1, priority=90, ip, actions=drop",
		"table=1, priority=0, actions=NORMAL",
	}
	// The kernel: an nftables forward chain on the node's bridge.
	statefulNft = `table inet gvsbench {
	chain forward {
		type filter hook forward priority filter; policy accept;
		ct state established,related accept
		ct state new accept
		ct state invalid drop
	}
}
`
)

// StatefulRules installs (on) or removes the benchmarks' stateful rule set
// on node i, whatever its dataplane.
func (c *Cluster) StatefulRules(ctx context.Context, i int, on bool) error {
	n := &c.Nodes[i]
	dp := DataplaneGVS
	if i < len(c.Spec.Dataplanes) && c.Spec.Dataplanes[i] != "" {
		dp = c.Spec.Dataplanes[i]
	}
	var err error
	var out []byte
	switch dp {
	case DataplaneGVS:
		if on {
			for _, r := range statefulGVS {
				if out, err = c.Ctl(ctx, i, "add-flow", r); err != nil {
					break
				}
			}
			break
		}
		for _, r := range statefulGVS {
			match, _, _ := strings.Cut(r, ", actions=")
			if out, err = c.Ctl(ctx, i, "del-flows", "--strict", match); err != nil {
				break
			}
		}
	case DataplaneOVS:
		if n.ovs == nil {
			return fmt.Errorf("cluster: node %s runs no OVS", n.Name)
		}
		if on {
			if out, err = n.ovs.Ofctl(ctx, "del-flows", "br0"); err == nil {
				for _, r := range statefulOVS {
					if out, err = n.ovs.Ofctl(ctx, "add-flow", "br0", r); err != nil {
						break
					}
				}
			}
			break
		}
		if out, err = n.ovs.Ofctl(ctx, "del-flows", "br0"); err == nil {
			out, err = n.ovs.Ofctl(ctx, "add-flow", "br0", "priority=0,actions=NORMAL")
		}
	case DataplaneKernel:
		if on {
			out, err = c.Lab.Exec(ctx, n.NS, "sh", "-c", "printf '%s' \"$0\" | nft -f -", statefulNft)
			break
		}
		out, err = c.Lab.Exec(ctx, n.NS, "nft", "delete", "table", "inet", "gvsbench")
	default:
		return fmt.Errorf("%w: %q", ErrUnknownDataplane, dp)
	}
	if err != nil {
		return fmt.Errorf("cluster: stateful rules on %s (%s): %w: %s", n.Name, dp, err, out)
	}
	return nil
}
