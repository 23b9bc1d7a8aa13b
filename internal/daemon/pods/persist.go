package pods

// Surviving a restart of gvs-switchd: every CNI pod's TAP is persistent
// (TUNSETPERSIST, set by Add once the TAP is the pod's IfName), so when
// the daemon exits, on upgrade or crash, its fds close but the pods keep
// eth0 with their address and routes. The next daemon reads the leases
// (cniplugin.IPAM) and, for each lease whose namespace still exists,
// adopts the TAP (Adopt, through the CNI backend's Reattach): it attaches to it again with tap.Reopen,
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
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
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
	tapIO
	dev  *tap.Device
	m    *Manager
	keep atomic.Bool // leave the TAP in place when closed
}

// Close clears the persistent flag, unless the daemon is exiting or keep
// is set, and closes the TAP.
func (p *podTAP) Close() error {
	if !p.m.exiting.Load() && !p.keep.Load() {
		unpersist(p.dev, p.m.log)
	}
	return p.tapIO.Close()
}

// Holds is the engine's vswitch.Holder, which the embedded interface
// does not carry: an io_uring port gives its rings and thread up when its
// idle reader is woken, and the switch wakes it only if it says it holds
// them.
func (p *podTAP) Holds() bool {
	h, ok := p.tapIO.(vswitch.Holder)
	return ok && h.Holds()
}

// portOf is what Add puts on the switch for a pod: a CNI pod's TAP
// wrapped as a podTAP, a static pod's as it is.
func (m *Manager) portOf(s Spec, dev *tap.Device) vswitch.Port {
	if s.ContainerID == "" {
		return m.io(dev)
	}
	return &podTAP{tapIO: m.io(dev), dev: dev, m: m}
}

// Exiting is called when the daemon exits: from then on the switch's
// closing a CNI pod's TAP leaves it in place, for the next daemon.
func (m *Manager) Exiting() { m.exiting.Store(true) }

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

// Adopt takes over the TAP a previous daemon left in s.Netns as s.IfName
// for pod s (a CNI pod: s.ContainerID, s.IfName and s.Port are its
// lease's). The TAP is checked before attaching to it (see ourTAP) and
// re-opened with the current offloads (tap.Reopen); its MTU, address,
// routes and up state are set again as Add set them (replacing, so what is
// in place does not change); it goes on the switch on the lease's port and
// the pod's rules are installed with its project's current VNID. On failure
// the TAP stays, persistent, for a later restart or DEL.
func (m *Manager) Adopt(ctx context.Context, s Spec) error {
	nsPath := NsPath(s.Netns)
	var dev *tap.Device
	var extra []*tap.Device // a multi-queue TAP's other queues
	// A daemon killed with io_uring requests in flight holds its TAPs
	// until the kernel's asynchronous teardown of its rings has run, a
	// few milliseconds after the process is gone: a TAP held by another
	// process is tried again for a while (heldWait) before it is refused.
	deadline := time.Now().Add(heldWait)
	for {
		err := m.attachLeft(nsPath, s, &dev, &extra)
		if err == nil {
			break
		}
		closeAll(dev, extra) // also when leaving the namespace failed after the attach
		dev, extra = nil, nil
		if !errors.Is(err, errHeld) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(heldRetry)
	}
	node := m.cfg.Program.Node()
	err := netconf.ConfigureLink(nsPath, netconf.LinkConfig{Name: s.IfName, MTU: node.MTU,
		Addrs: []netip.Prefix{netip.PrefixFrom(s.IP, node.Subnet.Bits())}, Routes: Routes(node), Up: true})
	if err != nil {
		closeAll(dev, extra)
		return err
	}
	m.capGSO(nsPath, s.IfName, node.MTU) // offloads may have been turned on since ADD
	if err := m.adopt(ctx, s, nsPath, dev, extra); err != nil {
		closeAll(dev, extra) // closing again what the switch closed is harmless
		return err
	}
	if err := netconf.Do(nsPath, func() error { return flushUnresolved(s.IfName) }); err != nil {
		m.log.Warn("adopted pod: flushing its unresolved neighbour entries", "ifname", s.IfName, "netns", nsPath, "err", err)
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

// adopt puts a re-opened pod TAP on the switch on s.Port and installs the
// pod's rules.
func (m *Manager) adopt(ctx context.Context, s Spec, nsPath string, dev *tap.Device, extra []*tap.Device) (err error) {
	if err := m.cfg.VNIDs.Wait(ctx, s.Project, ""); err != nil {
		return fmt.Errorf("pod %s: %w", s.Name, err)
	}
	key := s.Key()
	port, release, err := m.reserve(key, s.Port)
	if err != nil {
		return err
	}
	attached := false
	defer func() { release(attached) }()
	if m.cfg.OnTAP != nil {
		m.cfg.OnTAP(dev)
	}
	pt := &podTAP{tapIO: m.io(dev), dev: dev, m: m}
	if err := m.cfg.Switch.AddPortQueues(port, m.portQueues(pt, extra)); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			pt.keep.Store(true)               // the pod keeps eth0 for a later restart or DEL
			_ = m.cfg.Switch.RemovePort(port) // closes dev
		}
	}()
	if err := m.setLimit(port, s.Limit); err != nil {
		return err
	}
	sp, err := m.cfg.Program.AddPod(sdn.Pod{Name: s.Name, Namespace: s.Project, IP: s.IP, Port: port})
	if err != nil {
		return err
	}
	mac := packet.PodMAC(s.IP.As4())
	p := &Pod{Name: s.Name, Project: s.Project, Netns: nsPath, IP: s.IP, MAC: net.HardwareAddr(mac[:]).String(),
		Port: port, VNID: sp.VNID, ContainerID: s.ContainerID, IfName: s.IfName, Limit: limitOf(s), dev: dev, extra: extra}
	m.record(key, p)
	attached = true
	m.log.Info("pod re-attached, interface kept", "pod", p.Name, "project", p.Project, "ip", p.IP, "port", p.Port, "vnid", p.VNID)
	return nil
}

// removeLeftoverTAP deletes a persistent TAP ifName left for the pod with
// address ip in namespace netns
// that no daemon holds: one the restarted daemon could not adopt. Only a
// TAP that ourTAP recognizes is deleted (never, say, a veth the runtime
// put there); a missing namespace or interface is not an error.
func removeLeftoverTAP(netns, ifName string, ip netip.Addr) error {
	if netns == "" {
		return nil
	}
	if !isNetns(netns) {
		return nil // the namespace is gone, and its TAP with it
	}
	return netconf.Do(netns, func() error {
		link, err := netlink.LinkByName(ifName)
		if err != nil {
			return nil
		}
		if ok, _ := ourTAP(link, ip); !ok {
			return nil
		}
		if link.(*netlink.Tuntap).Flags&netlink.TUNTAP_MULTI_QUEUE == 0 {
			return tap.DeletePersistent(ifName) // attaching fails if it is held
		}
		dev, err := tap.Reopen(tap.Config{Name: ifName, MultiQueue: true})
		if err != nil {
			return err
		}
		if err := onlyOurQueues(ifName, 1); err != nil {
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

// Waiting for a TAP another process holds (Adopt).
const (
	heldWait  = 2 * time.Second
	heldRetry = 20 * time.Millisecond
)

// errHeld marks Adopt's errors for a TAP another process holds.
var errHeld = errors.New("held by another process")

// attachLeft checks the TAP s.IfName left in the namespace nsPath and
// attaches to it (Adopt): its first queue in *dev, the others in *extra,
// which the caller closes on an error.
func (m *Manager) attachLeft(nsPath string, s Spec, dev **tap.Device, extra *[]*tap.Device) error {
	if qs := m.takeInherited(s.ContainerID, s.IfName); len(qs) > 0 {
		// Handed over by the running daemon (handoff.go): the queues
		// are attached already, with frames waiting in them.
		*dev, *extra = qs[0], qs[1:]
		return nil
	}
	return netconf.Do(nsPath, func() error {
		link, err := netlink.LinkByName(s.IfName)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return cniplugin.ErrNoInterface
			}
			return fmt.Errorf("%s in %s: %w", s.IfName, nsPath, err)
		}
		if ok, why := ourTAP(link, s.IP); !ok {
			err := fmt.Errorf("%s in %s %s: not adopting it (CHECK fails until the pod is re-created)", s.IfName, nsPath, why)
			if tt, _ := link.(*netlink.Tuntap); tt != nil && tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0 && tt.Queues+tt.DisabledQueues > 0 {
				err = fmt.Errorf("%w: %w", errHeld, err)
			}
			return err
		}
		cfg := tap.Config{Name: s.IfName, Offloads: m.cfg.Offloads, Logger: m.log,
			MultiQueue: link.(*netlink.Tuntap).Flags&netlink.TUNTAP_MULTI_QUEUE != 0}
		if *dev, err = tap.Reopen(cfg); err != nil || !cfg.MultiQueue {
			if errors.Is(err, unix.EBUSY) {
				// A single-queue TAP a process holds refuses TUNSETIFF.
				err = fmt.Errorf("%w: %w", errHeld, err)
			}
			return err
		}
		if *extra, err = openQueues(cfg, m.cfg.Queues-1); err != nil {
			return err
		}
		// A multi-queue TAP takes more queues even while another process
		// holds it: ourTAP checked before attaching, this closes the race.
		if err := onlyOurQueues(s.IfName, 1+len(*extra)); err != nil {
			return fmt.Errorf("%w: %w", errHeld, err)
		}
		return nil
	})
}
