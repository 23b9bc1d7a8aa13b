package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"

	"github.com/gvswitch/gvs/sdn/gateway"
)

// A node's subnet can change under a running daemon: when the node was cut
// off from etcd past its lease, gvs-master released its subnet and may have
// given it to another node; when the node gets back it registers again and,
// if its old subnet is taken, gets a fresh one (docs/control-plane.md,
// "Lease expiry, partitions and subnet reassignment"). ChangeSubnet is what
// the agent calls then:
//
//  1. the old subnet is withdrawn at once: every local pod loses its rules
//     and its switch port (which deletes its interface), the VNID rules
//     go, and the setup rules of the old subnet are deleted, in one atomic
//     table update, so the node never answers for addresses that are now
//     another node's;
//  2. the setup rules of the new subnet are installed (none while the node
//     waits for a subnet);
//  3. tun0 takes the new gateway address, MAC and routes (or loses its
//     address while the node has no subnet);
//  4. the pods' CNI leases become stale, so CNI CHECK fails naming the
//     reason and the runtime re-creates the pods, whose ADD then gets an
//     address of the new subnet.
//
// Remote nodes learn the new subnet through their watch of the registry.

// subnetHistory records the node's subnet as the control plane gives it
// and its changes (gvsctl show, /metrics).
type subnetHistory struct {
	current  netip.Prefix // the node's subnet now (invalid: none, or no control plane)
	changes  int
	previous netip.Prefix // the last subnet the node lost
	stale    int          // CNI leases made stale, in total
}

func subnetString(p netip.Prefix) string {
	if !p.IsValid() {
		return "(none)"
	}
	return p.String()
}

// ChangeSubnet moves the node from its current subnet to sub (source.Sink);
// an invalid sub withdraws the current subnet and leaves the node without
// one until the next call. The pods of the old subnet are detached and
// their CNI leases marked stale. It is safe for concurrent use with the
// control handlers and the CNI server.
func (n *nodeState) ChangeSubnet(sub netip.Prefix) error {
	w, err := n.prog.ChangeSubnet(sub)
	if err != nil {
		return err
	}
	old := w.Old
	if old.Subnet == sub {
		return nil
	}
	nn := n.prog.Node()
	errs := []error{n.pods.Withdraw(w.Pods)}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subnet.current = sub
	if sub.IsValid() {
		n.rememberSubnet(sub)
	}
	if old.Subnet.IsValid() {
		n.subnet.previous = old.Subnet
		n.subnet.changes++
	}
	if sub.IsValid() {
		if err := gateway.Configure("tun0", nn); err != nil {
			errs = append(errs, err)
		}
	} else if err := flushAddrs("tun0"); err != nil {
		errs = append(errs, err)
	}
	if n.ipam != nil {
		reason := fmt.Sprintf("the node's subnet %v was given to another node while this node was cut off from the registry past its lease",
			old.Subnet)
		st, err := n.ipam.Resubnet(sub, reason)
		if err != nil {
			errs = append(errs, err)
		}
		n.subnet.stale += len(st)
	}
	err = errors.Join(errs...)
	switch {
	case !sub.IsValid():
		n.log.Error("NODE SUBNET LOST: withdrawn from the dataplane; its pods are detached and their CNI leases stale",
			"old", old.Subnet, "podsDetached", len(w.Pods), "err", err)
	case old.Subnet.IsValid():
		n.log.Error("NODE SUBNET CHANGED: the old subnet is withdrawn, its pods are detached and their CNI leases stale",
			"old", old.Subnet, "new", sub, "podsDetached", len(w.Pods), "err", err)
	default:
		n.log.Warn("node subnet assigned after the loss: setup rules and tun0 reconfigured", "new", sub, "err", err)
	}
	return err
}

// startSubnet records the subnet the control plane gave the node at start
// (Daemon.startControlPlane) and the one it lost while it was down, if any.
func (n *nodeState) startSubnet(sub, lost netip.Prefix) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subnet.current = sub
	if lost.IsValid() {
		n.subnet.previous, n.subnet.changes = lost, 1
	}
	n.rememberSubnet(sub)
}

// currentSubnet returns the subnet the control plane gave the node last
// (invalid: none, or the node has no control plane).
func (n *nodeState) currentSubnet() netip.Prefix {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.subnet.current
}

// subnetFile is where the node remembers its subnet across restarts: the
// daemon's state directory (with CNI), else nowhere.
func (c *Config) subnetFile() string {
	dir := c.StateDir
	if dir == "" {
		if c.CNISocket == "" || c.CNISocket == "off" {
			return ""
		}
		dir = filepath.Join("/var/lib/gvs", c.NodeName) // as startCNI
	}
	return filepath.Join(dir, "node-subnet")
}

// rememberedSubnet returns the subnet the node had when it last ran: a
// restarted node asks for it, and gets it back if nobody took it, so its
// pods' leases stay valid.
func (c *Config) rememberedSubnet() (netip.Prefix, bool) {
	f := c.subnetFile()
	if f == "" {
		return netip.Prefix{}, false
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(string(b)))
	return p, err == nil
}

// rememberSubnet records the node's subnet (best effort, logged).
func (n *nodeState) rememberSubnet(p netip.Prefix) {
	f := n.cfg.subnetFile()
	if f == "" {
		return
	}
	err := os.MkdirAll(filepath.Dir(f), 0o755)
	if err == nil {
		err = os.WriteFile(f+".tmp", []byte(p.String()+"\n"), 0o644)
	}
	if err == nil {
		err = os.Rename(f+".tmp", f)
	}
	if err != nil {
		n.log.Warn("cannot remember the node subnet", "file", f, "err", err)
	}
}

// flushAddrs removes the IPv4 addresses of a link (tun0 while the node
// has no subnet); the routes using them as source go with them.
func flushAddrs(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, a := range addrs {
		if err := netlink.AddrDel(l, &a); err != nil {
			return fmt.Errorf("%s: remove %v: %w", name, a.IPNet, err)
		}
	}
	return nil
}

// subnetCollector exports the subnet history.
type subnetCollector struct {
	d              *nodeState
	changes, stale *prometheus.Desc
	info           *prometheus.Desc
}

func newSubnetCollector(d *nodeState) *subnetCollector {
	return &subnetCollector{d: d,
		changes: prometheus.NewDesc("gvs_node_subnet_changes_total",
			"Times the registry gave this node another subnet (its old one went to another node while it was cut off past its lease).", nil, nil),
		stale: prometheus.NewDesc("gvs_cni_stale_leases_total",
			"CNI leases made stale by a subnet change (their pods must be re-created).", nil, nil),
		info: prometheus.NewDesc("gvs_node_subnet_info", "The node's subnet; the value is always 1.", []string{"subnet"}, nil),
	}
}

func (c *subnetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.changes
	ch <- c.stale
	ch <- c.info
}

func (c *subnetCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.mu.Lock()
	h := c.d.subnet
	c.d.mu.Unlock()
	sub := c.d.prog.Node().Subnet
	ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(h.changes))
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(h.stale))
	ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, subnetString(sub))
}

// previousString is the last lost subnet, or "" when there was none.
func (h subnetHistory) previousString() string {
	if !h.previous.IsValid() {
		return ""
	}
	return h.previous.String()
}
