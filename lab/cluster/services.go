package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// ServiceDNAT makes node i's namespace DNAT proto (tcp or udp) traffic to
// clusterIP:port to backend, as kube-proxy's iptables mode does with its
// defaults (a PREROUTING DNAT rule, no masquerading). The rules go with
// the node's namespace.
func (c *Cluster) ServiceDNAT(ctx context.Context, i int, clusterIP netip.Addr, proto string, port uint16, backend netip.AddrPort) error {
	argv := []string{"iptables", "-t", "nat", "-A", "PREROUTING", "-d", clusterIP.String(), "-p", strings.ToLower(proto),
		"--dport", fmt.Sprint(port), "-j", "DNAT", "--to-destination", backend.String()}
	if out, err := c.Lab.Exec(ctx, c.Nodes[i].NS, argv...); err != nil {
		return fmt.Errorf("%s: %v: %w\n%s", c.Nodes[i].Name, argv, err, out)
	}
	return nil
}
