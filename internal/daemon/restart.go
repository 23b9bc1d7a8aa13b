package daemon

// Surviving a restart of gvs-switchd: every CNI pod's TAP is persistent
// (TUNSETPERSIST, set by addPod once the TAP is the pod's IfName), so when
// the daemon exits, on upgrade or crash, its fds close but the pods keep
// eth0 with their address and routes. The next daemon reads the leases
// (cniplugin.IPAM) and, for each lease whose namespace still exists,
// adopts the TAP (Reattach): it attaches to it again with tap.Reopen,
// puts it on the switch on the leased port and installs the pod's rules
// with its project's current VNID. Whenever the switch lets go of a CNI
// pod's TAP (DEL, GC, a lost subnet) the flag is cleared first (podTAP),
// so the interface goes; only when the daemon exits is it left. DEL and
// GC also remove a persistent TAP that no daemon holds
// (removeLeftoverTAP), so nothing outlives its lease.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// unpersist clears a pod TAP's persistent flag so that closing it deletes
// the interface. A TAP the kernel removed already (its namespace is gone)
// is fine.
func unpersist(dev *tap.Device, log *slog.Logger) {
	if dev == nil {
		return
	}
	if err := dev.SetPersist(false); err != nil && !errors.Is(err, unix.EBADFD) {
		log.Warn("pod TAP: clearing the persistent flag", "tap", dev.Name(), "err", err)
	}
}

// podTAP is a CNI pod's TAP as the switch holds it: closing it (RemovePort,
// whoever calls it) deletes the interface, unless the daemon is exiting,
// when the TAP must outlive it.
type podTAP struct {
	*tap.Device
	d    *Daemon
	keep atomic.Bool // leave the TAP in place when closed
}

// Close clears the persistent flag, unless the daemon is exiting or keep
// is set, and closes the TAP.
func (p *podTAP) Close() error {
	if !p.d.exiting.Load() && !p.keep.Load() {
		unpersist(p.Device, p.d.log)
	}
	return p.Device.Close()
}

// podPort is what addPod puts on the switch for a pod: a CNI pod's TAP
// wrapped as a podTAP, a static pod's as it is.
func (d *Daemon) podPort(pc PodConfig, dev *tap.Device) vswitch.Port {
	if pc.ContainerID == "" {
		return dev
	}
	return &podTAP{Device: dev, d: d}
}

// closeSwitch closes the switch when Run returns, leaving the CNI pods'
// TAPs in their namespaces for the next daemon.
func (d *Daemon) closeSwitch() {
	d.exiting.Store(true)
	d.sw.Close()
}

// ourTAP reports whether link is a TAP gvs-switchd left for the pod with
// address ip: a persistent TAP with IFF_VNET_HDR and IFF_NO_PI and the
// pod's MAC, which, if it is multi-queue, no process holds. why says what
// differs. (For a single-queue TAP that a process holds, TUNSETIFF answers
// EBUSY; a multi-queue TAP takes more queues, so its count of attached
// queues is checked instead.)
func ourTAP(link netlink.Link, ip netip.Addr) (ok bool, why string) {
	tt, isTAP := link.(*netlink.Tuntap)
	if !isTAP || tt.Mode != netlink.TUNTAP_MODE_TAP {
		return false, fmt.Sprintf("is a %s, not a TAP", link.Type())
	}
	mac := packet.PodMAC(ip.As4())
	switch {
	case tt.NonPersist:
		return false, "is not persistent"
	case tt.Flags&netlink.TUNTAP_VNET_HDR == 0 || tt.Flags&netlink.TUNTAP_NO_PI == 0:
		return false, fmt.Sprintf("has flags %#x, not vnet_hdr|no_pi", uint16(tt.Flags))
	case tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 && tt.Queues+tt.DisabledQueues > 0:
		return false, fmt.Sprintf("is multi-queue and held by another process (%d queues attached, %d detached)",
			tt.Queues, tt.DisabledQueues)
	case tt.Attrs().HardwareAddr.String() != net.HardwareAddr(mac[:]).String():
		return false, fmt.Sprintf("has MAC %s, not the pod's %s", tt.Attrs().HardwareAddr, net.HardwareAddr(mac[:]))
	}
	return true, ""
}

// Reattach adopts the TAP the previous daemon left in l.Netns as l.IfName
// (cniplugin.Reattacher). The TAP is checked before attaching to it (see
// ourTAP) and re-opened with the daemon's current offloads (tap.Reopen);
// its MTU, address, routes and up state are set again as ADD set them
// (replacing, so what is in place does not change).
func (b *cniBackend) Reattach(ctx context.Context, l cniplugin.Lease) error {
	d := b.d
	var dev *tap.Device
	var extra []*tap.Device // a multi-queue TAP's other queues
	// closeAll lets go of the queues; the TAP stays persistent, for a
	// later restart or DEL.
	closeAll := func() {
		if dev != nil {
			dev.Close()
		}
		for _, q := range extra {
			q.Close()
		}
	}
	err := netconf.Do(l.Netns, func() error {
		link, err := netlink.LinkByName(l.IfName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return cniplugin.ErrNoInterface
			}
			return fmt.Errorf("%s in %s: %w", l.IfName, l.Netns, err)
		}
		if ok, why := ourTAP(link, l.IP); !ok {
			return fmt.Errorf("%s in %s %s: not adopting it (CHECK fails until the pod is re-created)", l.IfName, l.Netns, why)
		}
		cfg := tap.Config{Name: l.IfName, Offloads: d.podOffloads(), Logger: d.log,
			MultiQueue: link.(*netlink.Tuntap).Flags&netlink.TUNTAP_MULTI_QUEUE != 0}
		if dev, err = tap.Reopen(cfg); err != nil || !cfg.MultiQueue {
			return err
		}
		if extra, err = openQueues(cfg, d.podQueues()-1); err != nil {
			return err
		}
		// A multi-queue TAP takes more queues even while another process
		// holds it: ourTAP checked before attaching, this closes the race.
		return onlyOurQueues(l.IfName, 1+len(extra))
	})
	if err != nil {
		closeAll() // also when leaving the namespace failed after the attach
		return err
	}
	// Repair what ADD set, should someone have changed it (replacing is a
	// no-op for what is in place): MTU, address, routes, up.
	var routes []netconf.Route
	for _, r := range d.podRoutes() {
		routes = append(routes, netconf.Route{Dst: r.Dst, Gw: r.Gw})
	}
	node := d.nodeConfig() // read under the lock: the subnet can change at run time
	err = netconf.ConfigureLink(l.Netns, netconf.LinkConfig{Name: l.IfName, MTU: node.MTU,
		Addrs: []netip.Prefix{netip.PrefixFrom(l.IP, node.Subnet.Bits())}, Routes: routes, Up: true})
	if err != nil {
		closeAll()
		return err
	}
	d.capPodGSO(l.Netns, l.IfName, node.MTU) // offloads may have been turned on since ADD
	if err := d.adoptPod(ctx, l, dev, extra); err != nil {
		closeAll()
		return err
	}
	if err := netconf.Do(l.Netns, func() error { return flushUnresolved(l.IfName) }); err != nil {
		d.log.Warn("adopted pod: flushing its unresolved neighbour entries", "ifname", l.IfName, "netns", l.Netns, "err", err)
	}
	return nil
}

// flushUnresolved deletes the neighbour entries of link ifName that are
// still being resolved (INCOMPLETE) or failed. While no daemon held the TAP
// the pod's ARP requests were dropped; an entry in INCOMPLETE retries only
// after retrans_time_ms (1 s by default), so the pod's traffic would wait
// up to a second after the adoption. Without the entry, the pod's next
// packet asks again at once. (Packets queued on the entry are dropped.)
func flushUnresolved(ifName string) error {
	link, err := netlink.LinkByName(ifName)
	if err != nil {
		return err
	}
	neighs, err := netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("%s: neighbours: %w", ifName, err)
	}
	var errs []error
	for _, n := range neighs {
		if n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) == 0 {
			continue
		}
		if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("%s: delete neighbour %v: %w", ifName, n.IP, err))
		}
	}
	return errors.Join(errs...)
}

// adoptPod puts a re-opened pod TAP (dev, and extra queues if it is
// multi-queue) on the switch on the lease's port and installs the pod's
// rules with its project's current VNID. When it fails the caller closes
// the queues (which may be closed already; closing again is harmless), and
// the TAP stays persistent.
func (d *Daemon) adoptPod(ctx context.Context, l cniplugin.Lease, dev *tap.Device, extra []*tap.Device) (err error) {
	nsPath := l.Netns
	if !strings.ContainsRune(nsPath, '/') {
		nsPath = filepath.Join("/run/netns", nsPath)
	}
	name := l.PodName
	if name == "" {
		name = l.ContainerID
		if len(name) > 12 {
			name = name[:12]
		}
	}
	if _, err := d.vnidFor(ctx, l.Project); err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	key := leaseKey(l)
	if _, dup := d.pods[key]; dup {
		return fmt.Errorf("pod %s is already attached", key)
	}
	if d.portUsed(l.Port) {
		return fmt.Errorf("pod %s: switch port %d is taken", key, l.Port)
	}
	vnid, err := d.vnidLocked(l.Project)
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	sp := sdn.Pod{Name: name, Namespace: l.Project, IP: l.IP, Port: l.Port, VNID: vnid}
	if err := d.node.CheckPod(sp); err != nil {
		return err
	}
	d.usoSeen(dev)
	pt := &podTAP{Device: dev, d: d}
	if err := d.sw.AddPortQueues(l.Port, portQueues(pt, extra)); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			pt.keep.Store(true)         // the pod keeps eth0 for a later restart or DEL
			_ = d.sw.RemovePort(l.Port) // closes dev
		}
	}()
	if err := d.applyPodRules(sp); err != nil {
		return err
	}
	mac := packet.PodMAC(l.IP.As4())
	p := &Pod{Name: name, Project: l.Project, Netns: nsPath, IP: l.IP, MAC: net.HardwareAddr(mac[:]).String(),
		Port: l.Port, VNID: sp.VNID, ContainerID: l.ContainerID, IfName: l.IfName, dev: dev}
	d.vnids[p.VNID]++
	d.pods[key] = p
	d.log.Info("pod re-attached, interface kept", "pod", p.Name, "project", p.Project, "ip", p.IP, "port", p.Port, "vnid", p.VNID)
	return nil
}

// removeLeftoverTAP deletes a persistent TAP left for l in its namespace
// that no daemon holds: one the restarted daemon could not adopt. Only a
// TAP that ourTAP recognizes is deleted (never, say, a veth the runtime
// put there); a missing namespace or interface is not an error.
func removeLeftoverTAP(l cniplugin.Lease) error {
	if l.Netns == "" {
		return nil
	}
	if !isNetns(l.Netns) {
		return nil // the namespace is gone, and its TAP with it
	}
	return netconf.Do(l.Netns, func() error {
		link, err := netlink.LinkByName(l.IfName)
		if err != nil {
			return nil
		}
		if ok, _ := ourTAP(link, l.IP); !ok {
			return nil
		}
		if link.(*netlink.Tuntap).Flags&netlink.TUNTAP_MULTI_QUEUE == 0 {
			return tap.DeletePersistent(l.IfName) // attaching fails if it is held
		}
		dev, err := tap.Reopen(tap.Config{Name: l.IfName, MultiQueue: true})
		if err != nil {
			return err
		}
		if err := onlyOurQueues(l.IfName, 1); err != nil {
			dev.Close()
			return err
		}
		return dev.Destroy()
	})
}

// onlyOurQueues checks that the multi-queue TAP name in the calling
// thread's namespace has exactly ours queues attached or detached, i.e.
// that no other process holds it.
func onlyOurQueues(name string, ours int) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	tt, ok := link.(*netlink.Tuntap)
	if !ok {
		return fmt.Errorf("%s is not a TAP", name)
	}
	if n := tt.Queues + tt.DisabledQueues; n != ours {
		return fmt.Errorf("%s: %d queues attached, %d of them ours: another process holds it", name, n, ours)
	}
	return nil
}

// isNetns reports whether path is a network namespace (an nsfs file, as
// /run/netns/NAME and /proc/PID/ns/net are). A path that is missing, or
// whose namespace was unmounted while the file stayed (a runtime that
// crashed in its teardown), names no namespace: nothing can be left in it,
// and a DEL must not fail forever trying to enter it.
func isNetns(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}
