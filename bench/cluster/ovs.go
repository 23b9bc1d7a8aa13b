package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OVSSchema is the OVSDB schema Debian's openvswitch-switch installs.
const OVSSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// ErrOVSMissing is returned (wrapped) when Open vSwitch is not installed.
var ErrOVSMissing = errors.New("cluster: Open vSwitch is not installed (apt-get install openvswitch-switch)")

// OVSAvailable reports, with an error wrapping ErrOVSMissing, whether the
// Open vSwitch programs and schema the OVS dataplane needs are installed.
func OVSAvailable() error {
	for _, p := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %v", ErrOVSMissing, err)
		}
	}
	if _, err := os.Stat(OVSSchema); err != nil {
		return fmt.Errorf("%w: %v", ErrOVSMissing, err)
	}
	return nil
}

// ovsDir is node i's Open vSwitch run, database and log directory.
func (c *Cluster) ovsDir(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-ovs")
}

// ovsEnv prefixes argv so that an OVS program run for node i uses only
// node i's directory, never the host's /var/run/openvswitch.
func (c *Cluster) ovsEnv(i int, argv ...string) []string {
	d := c.ovsDir(i)
	return append([]string{"env", "OVS_RUNDIR=" + d, "OVS_DBDIR=" + d, "OVS_LOGDIR=" + d, "OVS_SYSCONFDIR=" + d}, argv...)
}

// vsctl runs ovs-vsctl against node i's database.
func (c *Cluster) vsctl(ctx context.Context, i int, args ...string) ([]byte, error) {
	n := &c.Nodes[i]
	argv := c.ovsEnv(i, append([]string{"ovs-vsctl", "--timeout=20", "--db=unix:" + filepath.Join(c.ovsDir(i), "db.sock")}, args...)...)
	out, err := c.Lab.Exec(ctx, n.NS, argv...)
	if err != nil {
		return out, fmt.Errorf("ovs node %s: ovs-vsctl %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return out, nil
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
	if err := OVSAvailable(); err != nil {
		return err
	}
	n := &c.Nodes[i]
	dir := c.ovsDir(i)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ovs node %s: %w", n.Name, err)
	}
	db := filepath.Join(dir, "conf.db")
	if out, err := exec.CommandContext(ctx, "ovsdb-tool", "create", db, OVSSchema).CombinedOutput(); err != nil {
		return fmt.Errorf("ovs node %s: ovsdb-tool create: %w: %s", n.Name, err, out)
	}
	sock := filepath.Join(dir, "db.sock")
	p, err := c.Lab.Start(ctx, n.NS, filepath.Join(dir, "ovsdb-server.log"), c.ovsEnv(i,
		"ovsdb-server", db, "--remote=punix:"+sock,
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"),
		"--unixctl="+filepath.Join(dir, "ovsdb-server.ctl"))...)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)
	if err := waitFile(ctx, sock, p.Done()); err != nil {
		return fmt.Errorf("ovs node %s: ovsdb-server: %w (log %s)", n.Name, err, p.LogFile)
	}
	if _, err := c.vsctl(ctx, i, "--no-wait", "init"); err != nil {
		return err
	}
	p, err = c.Lab.Start(ctx, n.NS, filepath.Join(dir, "ovs-vswitchd.log"), c.ovsEnv(i,
		"ovs-vswitchd", "unix:"+sock,
		"--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--unixctl="+filepath.Join(dir, "ovs-vswitchd.ctl"))...)
	if err != nil {
		return err
	}
	n.procs = append(n.procs, p)

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

// waitFile waits up to 10 s for path to exist, or until done is closed.
func waitFile(ctx context.Context, path string, done <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear", path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("process ended before %s appeared", path)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DataplanePIDs returns the processes that carry node i's packets: its
// gvs-switchd, or its ovs-vswitchd; none for the kernel dataplane, whose
// work is done in softirq context.
func (c *Cluster) DataplanePIDs(i int) []int {
	n := &c.Nodes[i]
	switch c.Spec.dataplane(i) {
	case DataplaneGVS:
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
