package cluster

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gvswitch/gvs/lab/ovs"
)

// OVSSchema is the OVSDB schema Debian's openvswitch-switch installs.
const OVSSchema = ovs.Schema

// ErrOVSMissing is returned (wrapped) when Open vSwitch is not installed.
var ErrOVSMissing = ovs.ErrMissing

// OVSAvailable reports, with an error wrapping ErrOVSMissing, whether the
// Open vSwitch programs and schema the OVS dataplane needs are installed.
func OVSAvailable() error { return ovs.Available() }

// ovsDir is node i's Open vSwitch run, database and log directory.
func (c *Cluster) ovsDir(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-ovs")
}

// vsctl runs ovs-vsctl against node i's database.
func (c *Cluster) vsctl(ctx context.Context, i int, args ...string) ([]byte, error) {
	n := &c.Nodes[i]
	if n.ovs == nil {
		return nil, fmt.Errorf("ovs node %s: no Open vSwitch running", n.Name)
	}
	return n.ovs.Vsctl(ctx, args...)
}

// upOVSNode builds node i on Open vSwitch's userspace datapath, with an
// ovsdb-server and an ovs-vswitchd of its own (started through the lab, so
// that they end with it):
//
//   - br-ul (netdev) holds the underlay: eth0 is its port and the node's
//     address moves from eth0 to br-ul, as OVS userspace tunnelling needs;
//   - br0 (netdev) holds a veth per pod, one vxlan port per peer (VNI 0,
//     UDP 4789) and the gateway address on its internal port; it forwards
//     with the NORMAL action (a learning switch), which for a flat subnet
//     is what the per-destination rules would do.
//
// The pods' ends of the veths have tx checksum offload off: OVS's netdev
// datapath does not complete partial checksums.
func (c *Cluster) upOVSNode(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	d, err := ovs.Start(ctx, c.Lab, n.NS, c.ovsDir(i))
	if err != nil {
		return err
	}
	n.ovs = d
	n.procs = append(n.procs, d.Procs...)

	mac, err := c.Lab.Exec(ctx, n.NS, "cat", "/sys/class/net/eth0/address")
	if err != nil {
		return fmt.Errorf("ovs node %s: eth0 address: %w", n.Name, err)
	}
	ul := netip.PrefixFrom(n.IP, c.Lab.Underlay.Bits()).String()
	vs := [][]string{
		{"add-br", "br-ul", "--", "set", "bridge", "br-ul", "datapath_type=netdev",
			"other_config:hwaddr=" + strings.TrimSpace(string(mac)), "--", "add-port", "br-ul", "eth0"},
		{"add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev"},
	}
	for j, o := range c.Nodes {
		if j != i {
			port := "vx" + strconv.Itoa(j)
			vs = append(vs, []string{"add-port", "br0", port, "--", "set", "interface", port, "type=vxlan",
				"options:remote_ip=" + o.IP.String(), "options:key=0", "options:dst_port=4789"})
		}
	}
	for _, args := range vs {
		if _, err := c.vsctl(ctx, i, args...); err != nil {
			return err
		}
	}
	gw := n.Subnet.Addr().Next()
	cmds := [][]string{
		{"ip", "addr", "flush", "dev", "eth0"},
		{"ip", "addr", "add", ul, "dev", "br-ul"},
		{"ip", "link", "set", "br-ul", "up"},
		{"ip", "link", "set", "br0", "mtu", "1450", "up"},
		{"ip", "addr", "add", netip.PrefixFrom(gw, n.Subnet.Bits()).String(), "dev", "br0"},
		{"ip", "route", "add", c.Spec.ClusterNetwork.String(), "dev", "br0"},
	}
	for k, p := range n.Pods {
		host := "veth" + strconv.Itoa(k)
		cmds = append(cmds,
			[]string{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.NS},
			[]string{"ip", "link", "set", host, "mtu", "1450", "up"})
	}
	for _, argv := range cmds {
		if out, err := c.Lab.Exec(ctx, n.NS, argv...); err != nil {
			return fmt.Errorf("ovs node %s: %v: %w: %s", n.Name, argv, err, out)
		}
	}
	for k := range n.Pods {
		if _, err := c.vsctl(ctx, i, "add-port", "br0", "veth"+strconv.Itoa(k)); err != nil {
			return err
		}
	}
	for _, p := range n.Pods {
		if err := c.configurePod(ctx, n, p, []string{"ethtool", "-K", "eth0", "tx", "off"}); err != nil {
			return err
		}
	}
	return nil
}

// DataplanePIDs returns the processes that carry node i's packets: its
// gvs-switchd, its floor (gvs-bench floor) or its ovs-vswitchd; none for
// the kernel dataplane, whose work is done in softirq context.
func (c *Cluster) DataplanePIDs(i int) []int {
	n := &c.Nodes[i]
	switch c.Spec.dataplane(i) {
	case DataplaneGVS, DataplaneFloor:
		if n.proc != nil {
			return []int{n.proc.PID}
		}
	case DataplaneOVS:
		var pids []int
		for _, p := range n.procs {
			if slices.Contains(p.Argv, "ovs-vswitchd") {
				pids = append(pids, p.PID)
			}
		}
		return pids
	}
	return nil
}
