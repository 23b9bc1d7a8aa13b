package pods

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// CNI is the CNI server's backend (cniplugin.Backend and
// cniplugin.Reattacher) on a Manager: ADD attaches, DEL detaches, CHECK
// verifies, and a restarted daemon adopts the leased pods' TAPs.
type CNI struct {
	m *Manager
	// pool, if set, hands out pre-created TAPs; nil creates each TAP in
	// its pod's namespace, which is faster (docs/cni.md).
	pool *cniplugin.TapPool
}

// NewCNI returns the CNI backend of m, with a TAP pool or nil.
func NewCNI(m *Manager, pool *cniplugin.TapPool) *CNI { return &CNI{m: m, pool: pool} }

// LeaseKey is the pod key of a CNI lease.
func LeaseKey(l cniplugin.Lease) string { return l.ContainerID + "/" + l.IfName }

// specOf is the pod a lease attaches.
func specOf(l cniplugin.Lease) Spec {
	name := l.PodName
	if name == "" {
		name = l.ContainerID
		if len(name) > 12 {
			name = name[:12]
		}
	}
	return Spec{Name: name, Project: l.Project, Netns: l.Netns, IP: l.IP, IfName: l.IfName,
		ContainerID: l.ContainerID, Port: l.Port, Limit: LimitOf(l.Bandwidth)}
}

// LimitOf is the switch's limit for the CNI bandwidth arguments b (bits
// per second and bits, validated by cniplugin.Bandwidth.Validate): bytes
// per second and bytes. A burst of 2³¹-1 bits or more is what runtimes
// pass for a pod annotation, which has no burst (the kubelet's
// math.MaxInt32, containerd's math.MaxUint32: "no limit"); taken
// literally it would let the first 256 MiB through at line rate, so it is
// the default burst instead (vswitch.DefaultBurst), as is a burst of 0.
func LimitOf(b *cniplugin.Bandwidth) vswitch.Limit {
	if b == nil {
		return vswitch.Limit{}
	}
	burst := func(bits uint64) uint64 {
		if bits >= math.MaxInt32 {
			return 0
		}
		return bits / 8
	}
	return vswitch.Limit{
		Ingress: vswitch.Bandwidth{Rate: b.IngressRate / 8, Burst: burst(b.IngressBurst)},
		Egress:  vswitch.Bandwidth{Rate: b.EgressRate / 8, Burst: burst(b.EgressBurst)},
	}
}

// CNIRoutes are a pod's routes as the CNI result lists them.
func CNIRoutes(node sdn.NodeConfig) []cniplugin.Route {
	var out []cniplugin.Route
	for _, r := range Routes(node) {
		out = append(out, cniplugin.Route{Dst: r.Dst, Gw: r.Gw})
	}
	return out
}

// Attach is CNI ADD.
func (c *CNI) Attach(ctx context.Context, l cniplugin.Lease) (cniplugin.Attachment, error) {
	if _, err := os.Stat(l.Netns); err != nil {
		return cniplugin.Attachment{}, fmt.Errorf("%w: %w", cniplugin.ErrNoNetns, err)
	}
	err := netconf.Do(l.Netns, func() error {
		if _, err := netlink.LinkByName(l.IfName); err == nil {
			return cniplugin.ErrInterfaceExists
		}
		return nil
	})
	if err != nil {
		return cniplugin.Attachment{}, err
	}
	var dev *tap.Device
	if c.pool != nil {
		if dev, err = c.pool.Get(); err != nil {
			return cniplugin.Attachment{}, err
		}
	}
	p, err := c.m.Add(ctx, specOf(l), dev)
	if err != nil {
		return cniplugin.Attachment{}, err
	}
	node := c.m.cfg.Program.Node()
	return cniplugin.Attachment{MAC: p.MAC, Prefix: netip.PrefixFrom(p.IP, node.Subnet.Bits()),
		Gateway: node.Gateway(), Routes: CNIRoutes(node)}, nil
}

// Detach is CNI DEL: the pod leaves the switch, then a persistent TAP that
// no daemon holds, if one is left in the pod's namespace, is removed.
func (c *CNI) Detach(_ context.Context, l cniplugin.Lease) error {
	if err := c.m.Delete(LeaseKey(l)); err != nil {
		return err
	}
	if err := removeLeftoverTAP(l.Netns, l.IfName, l.IP); err != nil {
		return fmt.Errorf("pod %s: removing its TAP: %w", LeaseKey(l), err)
	}
	return nil
}

// Reattach adopts the TAP the previous daemon left for l (Manager.Adopt).
func (c *CNI) Reattach(ctx context.Context, l cniplugin.Lease) error {
	return c.m.Adopt(ctx, specOf(l))
}

// Check is CNI CHECK: the pod's switch port, rules, and interface in its
// namespace (name, MAC, address, MTU, up, routes).
func (c *CNI) Check(_ context.Context, l cniplugin.Lease) error {
	p, ok := c.m.Get(LeaseKey(l))
	if !ok {
		return fmt.Errorf("pod %s (%s) has a lease but no switch port: gvs-switchd could not re-attach it", LeaseKey(l), l.IP)
	}
	var missing []string
	if got, want := c.m.cfg.Program.PodRules(l.IP); got != want {
		missing = append(missing, fmt.Sprintf("rules: %d of the pod's %d rules (%s) are installed", got, want, sdn.PodFilter(l.IP)))
	}
	if !slices.ContainsFunc(c.m.cfg.Switch.Ports(), func(pi vswitch.PortInfo) bool { return pi.No == p.Port }) {
		missing = append(missing, fmt.Sprintf("switch port %d", p.Port))
	}
	mac := packet.PodMAC(l.IP.As4())
	node := c.m.cfg.Program.Node()
	err := netconf.Do(l.Netns, func() error {
		link, err := netlink.LinkByName(l.IfName)
		if err != nil {
			missing = append(missing, fmt.Sprintf("interface %s in %s", l.IfName, l.Netns))
			return nil
		}
		a := link.Attrs()
		if a.HardwareAddr.String() != net.HardwareAddr(mac[:]).String() {
			missing = append(missing, fmt.Sprintf("MAC %s on %s (has %s)", net.HardwareAddr(mac[:]), l.IfName, a.HardwareAddr))
		}
		if a.MTU != node.MTU && node.MTU > 0 {
			missing = append(missing, fmt.Sprintf("MTU %d on %s (has %d)", node.MTU, l.IfName, a.MTU))
		}
		if a.Flags&net.FlagUp == 0 {
			missing = append(missing, l.IfName+" up")
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		pfx := netip.PrefixFrom(l.IP, node.Subnet.Bits())
		if !slices.ContainsFunc(addrs, func(x netlink.Addr) bool { return x.IPNet.String() == pfx.String() }) {
			missing = append(missing, fmt.Sprintf("address %s on %s", pfx, l.IfName))
		}
		routes, err := netlink.RouteList(link, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, want := range Routes(node) {
			if !slices.ContainsFunc(routes, func(r netlink.Route) bool { return routeMatches(r, want) }) {
				via := "on-link"
				if want.Gw.IsValid() {
					via = "via " + want.Gw.String()
				}
				missing = append(missing, fmt.Sprintf("route %s %s", want.Dst, via))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return errors.New("missing: " + strings.Join(missing, "; "))
	}
	return nil
}

func routeMatches(r netlink.Route, want netconf.Route) bool {
	dst := "0.0.0.0/0"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	if dst != want.Dst.Masked().String() {
		return false
	}
	if !want.Gw.IsValid() {
		return r.Gw == nil
	}
	return r.Gw != nil && r.Gw.String() == want.Gw.String()
}
