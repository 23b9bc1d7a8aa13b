package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Dataplanes a node can run.
const (
	DataplaneGVS    = "gvs"
	DataplaneKernel = "kernel" // Linux bridge + kernel vxlan device
	DataplaneOVS    = "ovs"    // Open vSwitch userspace (datapath_type=netdev)
	// DataplaneFloor is the floor dataplane (package bench/floor): gvs's
	// TAPs and vxlan0 without the switch.
	DataplaneFloor = "floor"
)

// ErrUnknownDataplane is returned by Up for a dataplane name it does not
// know.
var ErrUnknownDataplane = errors.New("cluster: unknown dataplane")

// upOtherNode builds node i with a dataplane other than gvs.
func (c *Cluster) upOtherNode(ctx context.Context, i int, dp string) error {
	switch dp {
	case DataplaneKernel:
		return c.upKernelNode(ctx, i)
	case DataplaneOVS:
		return c.upOVSNode(ctx, i)
	case DataplaneFloor:
		return c.upFloorNode(ctx, i)
	}
	return fmt.Errorf("%w: %q", ErrUnknownDataplane, dp)
}

// dataplane returns node i's dataplane.
func (s *Spec) dataplane(i int) string {
	if i < len(s.Dataplanes) && s.Dataplanes[i] != "" {
		return s.Dataplanes[i]
	}
	return DataplaneGVS
}

// mixed reports whether the cluster's nodes run more than one dataplane.
func (c *Cluster) mixed() bool {
	for i := 1; i < len(c.Nodes); i++ {
		if c.Spec.dataplane(i) != c.Spec.dataplane(0) {
			return true
		}
	}
	return false
}

// upKernelNode builds node i the way the kernel would carry it: a bridge
// br0 holding the gateway address, a vxlan device (VNI 0, UDP 4789) that
// floods to every peer, and a veth pair per pod. It runs only `ip` commands
// inside the node's and pods' namespaces.
func (c *Cluster) upKernelNode(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	gw := n.Subnet.Addr().Next()
	var cmds [][]string
	if c.mixed() {
		// A NIC completes checksums before a frame reaches the wire; a veth
		// does not, and hands the other node VXLAN whose inner TCP/UDP
		// checksum is still partial. A kernel peer takes that state from the
		// skb, but a userspace peer reads only bytes, so in a mixed cluster
		// the kernel must finish the checksum here, as a real NIC would.
		// Kernel-only clusters keep the offload: turning it off also turns
		// off TSO and costs the kernel baseline two thirds of its TCP
		// throughput.
		cmds = append(cmds, []string{"ethtool", "-K", "eth0", "tx", "off"})
	}
	cmds = append(cmds, [][]string{
		{"ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "link", "set", "br0", "mtu", "1450", "up"},
		{"ip", "addr", "add", netip.PrefixFrom(gw, n.Subnet.Bits()).String(), "dev", "br0"},
		{"ip", "link", "add", "vxlan0", "type", "vxlan", "id", "0", "dstport", "4789", "local", n.IP.String(), "dev", "eth0"},
		{"ip", "link", "set", "vxlan0", "master", "br0", "up"},
		{"ip", "route", "add", c.Spec.ClusterNetwork.String(), "dev", "br0"},
	}...)
	for j, o := range c.Nodes {
		if j != i {
			cmds = append(cmds, []string{"bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vxlan0", "dst", o.IP.String()})
		}
	}
	for k, p := range n.Pods {
		host := "veth" + strconv.Itoa(k)
		cmds = append(cmds,
			[]string{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.NS},
			[]string{"ip", "link", "set", host, "master", "br0", "mtu", "1450", "up"})
	}
	for _, argv := range cmds {
		if out, err := c.Lab.Exec(ctx, n.NS, argv...); err != nil {
			return fmt.Errorf("kernel node %s: %v: %w: %s", n.Name, argv, err, out)
		}
	}
	for _, p := range n.Pods {
		if err := c.configurePod(ctx, n, p); err != nil {
			return err
		}
	}
	return nil
}

// configurePod sets up the eth0 a kernel or OVS node moved into pod p's
// namespace: MAC 0a:58:<ip>, MTU 1450, the pod address, a route to the
// cluster network and a default route via the node's gateway.
func (c *Cluster) configurePod(ctx context.Context, n *Node, p Pod, extra ...[]string) error {
	gw := n.Subnet.Addr().Next()
	b := p.IP.As4()
	mac := fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
	cmds := append([][]string{
		{"ip", "link", "set", "eth0", "address", mac, "mtu", "1450", "up"},
		{"ip", "addr", "add", netip.PrefixFrom(p.IP, n.Subnet.Bits()).String(), "dev", "eth0"},
		{"ip", "route", "add", c.Spec.ClusterNetwork.String(), "dev", "eth0"},
		{"ip", "route", "add", "default", "via", gw.String()},
	}, extra...)
	for _, argv := range cmds {
		if out, err := c.Lab.Exec(ctx, p.NS, argv...); err != nil {
			return fmt.Errorf("pod %s: %v: %w: %s", p.Name, argv, err, out)
		}
	}
	return nil
}
