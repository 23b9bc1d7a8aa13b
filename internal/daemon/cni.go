package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
	"github.com/vishvananda/netlink"
)

// CNIFirstPort is the first switch port given to pods attached by CNI;
// statically configured pods count from sdn.FirstPodPort.
const CNIFirstPort uint32 = 1000

// startCNI opens the leases, re-attaches the leased pods whose namespaces
// still exist and serves the CNI socket (Config.CNISocket) until ctx is
// done. Serving errors go to errc.
func (d *Daemon) startCNI(ctx context.Context, errc chan<- error) error {
	sock := d.cfg.CNISocket
	if sock == "" || sock == "off" {
		return nil
	}
	dir := d.cfg.StateDir
	if dir == "" {
		dir = filepath.Join("/var/lib/gvs", d.node.NodeName)
	}
	ipam, err := cniplugin.OpenIPAM(filepath.Join(dir, "ipam"), d.node.Subnet, CNIFirstPort)
	if ipam == nil {
		return fmt.Errorf("cni: %w", err)
	}
	if err != nil {
		d.log.Warn("cni: some lease files were ignored", "err", err)
	}
	d.mu.Lock()
	d.ipam = ipam
	d.mu.Unlock()
	pool := cniplugin.NewTapPool(d.cfg.TapPool, tap.Config{Offloads: d.podOffloads(), MultiQueue: d.podQueues() > 1, Logger: d.log}, d.log)
	be := &cniBackend{d: d, pool: pool}
	srv := cniplugin.NewServer(cniplugin.ServerConfig{IPAM: ipam, Backend: be, Logger: d.log, Observe: d.observeCNI})
	restoreStart := time.Now()
	st := srv.Restore(ctx)
	d.log.Info("cni: leases restored", "kept", st.Adopted, "recreated", st.Recreated, "netnsGone", st.NetnsGone,
		"failed", st.Failed, "took", time.Since(restoreStart).Round(time.Microsecond))
	l, err := d.listenLocal(sock, cniplugin.Listen, cniplugin.Refuse)
	if err != nil {
		pool.Close()
		return err
	}
	go func() {
		errc <- srv.Serve(ctx, l)
		pool.Close()
	}()
	d.log.Info("cni: serving", "socket", sock, "leases", len(ipam.Leases()), "state", dir, "tapPool", d.cfg.TapPool)
	return nil
}

// cniBackend attaches CNI pods to the daemon.
type cniBackend struct {
	d    *Daemon
	pool *cniplugin.TapPool
}

func leaseKey(l cniplugin.Lease) string { return l.ContainerID + "/" + l.IfName }

// podRoutes are the routes of a pod: default and service network via the
// gateway, cluster networks on-link.
func (d *Daemon) podRoutes() []cniplugin.Route {
	node := d.nodeConfig()
	gw := node.Gateway()
	rs := []cniplugin.Route{{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw}}
	if node.ServiceNetwork.IsValid() {
		rs = append(rs, cniplugin.Route{Dst: node.ServiceNetwork, Gw: gw})
	}
	for _, cn := range node.ClusterNetworks {
		rs = append(rs, cniplugin.Route{Dst: cn})
	}
	return rs
}

func (b *cniBackend) Attach(ctx context.Context, l cniplugin.Lease) (cniplugin.Attachment, error) {
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
	// Without a pool, addPod creates the TAP inside the pod's namespace,
	// which is faster than taking a pooled one and moving it (docs/cni.md).
	var dev *tap.Device
	if b.d.cfg.TapPool > 0 {
		if dev, err = b.pool.Get(); err != nil {
			return cniplugin.Attachment{}, err
		}
	}
	name := l.PodName
	if name == "" {
		name = l.ContainerID
		if len(name) > 12 {
			name = name[:12]
		}
	}
	p, err := b.d.addPod(ctx, PodConfig{Name: name, Project: l.Project, Netns: l.Netns, IP: l.IP.String(),
		IfName: l.IfName, ContainerID: l.ContainerID, Port: l.Port}, dev)
	if err != nil {
		return cniplugin.Attachment{}, err
	}
	node := b.d.nodeConfig()
	return cniplugin.Attachment{MAC: p.MAC, Prefix: netip.PrefixFrom(p.IP, node.Subnet.Bits()),
		Gateway: node.Gateway(), Routes: b.d.podRoutes()}, nil
}

// Detach removes the pod from the switch (DelPod) and then a persistent
// TAP that no daemon holds, if one is left in the pod's namespace.
func (b *cniBackend) Detach(_ context.Context, l cniplugin.Lease) error {
	if err := b.d.DelPod(leaseKey(l)); err != nil {
		return err
	}
	if err := removeLeftoverTAP(l); err != nil {
		return fmt.Errorf("pod %s: removing its TAP: %w", leaseKey(l), err)
	}
	return nil
}

// DelPod removes a pod's rules (sdn.PodFilter, and its VNID's rules if it
// was the VNID's last local pod) and its switch port, which closes the TAP
// and so deletes its interface (a CNI pod's TAP is made non-persistent
// first). key is the pod's name, or
// "CONTAINERID/IFNAME" for a pod attached by CNI. Removing an unknown pod
// is not an error.
func (d *Daemon) DelPod(key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pods[key]
	if p == nil {
		return nil
	}
	dels := []flowtable.Filter{cookieFilter(sdn.PodCookie(p.IP))}
	lastOfVNID := d.vnids[p.VNID] <= 1
	if d.node.Mode == sdn.ModeMultitenant && p.VNID != 0 && lastOfVNID {
		dels = append(dels, cookieFilter(sdn.VNIDCookie(p.VNID)))
	}
	if err := d.table.Apply(dels, nil); err != nil {
		return fmt.Errorf("pod %s: remove rules: %w", key, err)
	}
	unpersist(p.dev, d.log) // so that the switch's close deletes it
	if err := d.sw.RemovePort(p.Port); err != nil {
		d.log.Warn("pod detach: switch port", "pod", key, "port", p.Port, "err", err)
	}
	if lastOfVNID {
		delete(d.vnids, p.VNID)
	} else {
		d.vnids[p.VNID]--
	}
	delete(d.pods, key)
	d.log.Info("pod detached", "pod", p.Name, "ip", p.IP, "port", p.Port)
	return nil
}

// portUsed reports whether a pod has port; d.mu is held.
func (d *Daemon) portUsed(port uint32) bool {
	for _, p := range d.pods {
		if p.Port == port {
			return true
		}
	}
	return false
}

// Check verifies the pod's switch port, rules, and interface in its
// namespace (name, MAC, address, MTU, up, routes).
func (b *cniBackend) Check(_ context.Context, l cniplugin.Lease) error {
	d := b.d
	d.mu.Lock()
	p := d.pods[leaseKey(l)]
	var want int
	if p != nil {
		want = sdn.PodRuleCount
	}
	d.mu.Unlock()
	if p == nil {
		return fmt.Errorf("pod %s (%s) has a lease but no switch port: gvs-switchd could not re-attach it", leaseKey(l), l.IP)
	}
	var missing []string
	cookie := sdn.PodCookie(l.IP)
	got := 0
	for _, r := range d.table.Rules() {
		if r.Cookie == cookie {
			got++
		}
	}
	if got != want {
		missing = append(missing, fmt.Sprintf("rules: %d of the pod's %d rules (%s) are installed", got, want, sdn.PodFilter(l.IP)))
	}
	if !slices.ContainsFunc(d.sw.Ports(), func(pi vswitch.PortInfo) bool { return pi.No == p.Port }) {
		missing = append(missing, fmt.Sprintf("switch port %d", p.Port))
	}
	mac := packet.PodMAC(l.IP.As4())
	node := d.nodeConfig()
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
		for _, want := range d.podRoutes() {
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

func routeMatches(r netlink.Route, want cniplugin.Route) bool {
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
