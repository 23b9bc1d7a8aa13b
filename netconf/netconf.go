// Package netconf sets links up with netlink: it runs code inside network
// namespaces, moves links between them, and gives a pod's interface its
// name, MAC, MTU, addresses and routes.
//
// It is what a program embedding gvs's dataplane uses to attach a pod: the
// tap package creates a TAP in the calling thread's namespace and leaves
// the link's configuration to the caller; Do creates it elsewhere,
// MoveToNS moves it into the pod's namespace and ConfigureLink names it and
// gives it its MAC, MTU, addresses and routes (see the package example).
// gvs-switchd attaches its pods the same way.
//
// It is the only place in gvs besides the CNI code that imports
// github.com/vishvananda/netlink; the dataplane packages (tap, vxlan,
// switch) stay free of it.
//
// Namespaces are named by path: /run/netns/NAME for a named namespace (see
// NsPath) or /proc/PID/ns/net for a process's. The empty path means the
// namespace of the calling process. Everything here needs CAP_NET_ADMIN
// (and CAP_SYS_ADMIN to create namespaces), in practice root.
package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"runtime"

	"github.com/gvswitch/gvs/packet"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, as by
// `ip netns add`.
const NetnsDir = "/run/netns"

// ErrLinkNotFound is returned when the named link does not exist in the
// namespace.
var ErrLinkNotFound = errors.New("netconf: link not found")

// NsPath returns the path of the named network namespace name.
func NsPath(name string) string { return filepath.Join(NetnsDir, name) }

// Do runs fn with the calling goroutine's work moved into the network
// namespace at nsPath: fn runs on a fresh goroutine locked to its OS thread,
// which enters the namespace, runs fn and returns to the original
// namespace. If it cannot return, the thread stays locked and Go discards it
// when the goroutine ends, so no other goroutine ever runs in the wrong
// namespace. Do waits for fn and returns its error. An empty nsPath runs fn
// directly.
//
// Sockets and file descriptors opened by fn keep their namespace after Do
// returns; goroutines started by fn do not inherit it.
func Do(nsPath string, fn func() error) error {
	if nsPath == "" {
		return fn()
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("netconf: open netns %s: %w", nsPath, err)
	}
	defer target.Close()
	errc := make(chan error, 1)
	go func() {
		errc <- doLocked(target, nsPath, fn)
	}()
	return <-errc
}

// doLocked runs on its own goroutine; see Do.
func doLocked(target netns.NsHandle, nsPath string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netconf: current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netconf: enter netns %s: %w", nsPath, err)
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with this goroutine.
		return errors.Join(fnErr, fmt.Errorf("netconf: restore netns: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// CreateNamedNS creates a network namespace bind-mounted at NsPath(name),
// as `ip netns add name` does, and returns its path. It fails if the name
// is taken.
func CreateNamedNS(name string) (string, error) {
	if name == "" || filepath.Base(name) != name {
		return "", fmt.Errorf("netconf: bad netns name %q", name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netconf: current netns: %w", err)
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name) // unshares this thread into the new ns
		if err == nil {
			h.Close()
		}
		if rerr := netns.Set(orig); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("netconf: restore netns: %w", rerr))
			return // thread stays locked and is discarded
		}
		runtime.UnlockOSThread()
		if err != nil {
			err = fmt.Errorf("netconf: create netns %s: %w", name, err)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return "", err
	}
	return NsPath(name), nil
}

// DeleteNamedNS unmounts and removes the named namespace. The namespace
// itself lives on while something (a process, an open fd) still holds it.
func DeleteNamedNS(name string) error {
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("netconf: delete netns %s: %w", name, err)
	}
	return nil
}

// linkByName wraps netlink's not-found error in ErrLinkNotFound.
func linkByName(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("%w: %s", ErrLinkNotFound, name)
		}
		return nil, fmt.Errorf("netconf: link %s: %w", name, err)
	}
	return l, nil
}

// MoveToNS moves link from the calling process's namespace into the
// namespace at nsPath. A TAP keeps working through its file descriptor.
func MoveToNS(link, nsPath string) error {
	l, err := linkByName(link)
	if err != nil {
		return err
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netconf: open netns %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	if err := netlink.LinkSetNsFd(l, fd); err != nil {
		return fmt.Errorf("netconf: move %s to %s: %w", link, nsPath, err)
	}
	return nil
}

// Route is a route through a link.
type Route struct {
	// Dst is the destination; the zero Prefix means the default route
	// (0.0.0.0/0).
	Dst netip.Prefix
	// Gw is the next hop; the zero Addr means on-link (scope link).
	Gw netip.Addr
	// Src is the preferred source address; zero means none.
	Src netip.Addr
}

// LinkConfig says how ConfigureLink sets up a link. Zero fields are left
// alone.
type LinkConfig struct {
	Name    string           // the link's current name
	NewName string           // rename to this (e.g. "eth0") if not empty
	MAC     net.HardwareAddr // set the address if not nil
	MTU     int              // set the MTU if > 0
	Addrs   []netip.Prefix   // addresses to add (replacing equal ones)
	Routes  []Route          // routes to add after the link is up
	Up      bool             // bring the link up
}

// ConfigureLink sets the link c.Name up in the namespace at nsPath (empty:
// the caller's): in this order it renames it, sets MAC and MTU, adds the
// addresses, brings it up and adds the routes. Addresses and routes are
// replaced when they exist, so a repeated call succeeds. It fails with
// ErrLinkNotFound if the link is missing.
func ConfigureLink(nsPath string, c LinkConfig) error {
	return Do(nsPath, func() error { return configure(c) })
}

func configure(c LinkConfig) error {
	l, err := linkByName(c.Name)
	if err != nil {
		return err
	}
	name := c.Name
	if c.NewName != "" && c.NewName != c.Name {
		if err := netlink.LinkSetDown(l); err != nil {
			return fmt.Errorf("netconf: %s down: %w", name, err)
		}
		if err := netlink.LinkSetName(l, c.NewName); err != nil {
			return fmt.Errorf("netconf: rename %s to %s: %w", name, c.NewName, err)
		}
		name = c.NewName
	}
	if c.MAC != nil {
		if err := netlink.LinkSetHardwareAddr(l, c.MAC); err != nil {
			return fmt.Errorf("netconf: %s mac %s: %w", name, c.MAC, err)
		}
	}
	if c.MTU > 0 {
		if err := netlink.LinkSetMTU(l, c.MTU); err != nil {
			return fmt.Errorf("netconf: %s mtu %d: %w", name, c.MTU, err)
		}
	}
	for _, p := range c.Addrs {
		a := &netlink.Addr{IPNet: ipNet(p)}
		if err := netlink.AddrReplace(l, a); err != nil {
			return fmt.Errorf("netconf: %s addr %s: %w", name, p, err)
		}
	}
	if c.Up {
		if err := netlink.LinkSetUp(l); err != nil {
			return fmt.Errorf("netconf: %s up: %w", name, err)
		}
	}
	for _, r := range c.Routes {
		if err := netlink.RouteReplace(route(l.Attrs().Index, r)); err != nil {
			return fmt.Errorf("netconf: %s route %s via %s: %w", name, r.Dst, r.Gw, err)
		}
	}
	return nil
}

func route(index int, r Route) *netlink.Route {
	nr := &netlink.Route{LinkIndex: index, Scope: netlink.SCOPE_UNIVERSE}
	switch {
	case r.Dst.IsValid():
		nr.Dst = ipNet(r.Dst.Masked())
	case r.Gw.Is6():
		nr.Dst = &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	default:
		nr.Dst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	if r.Gw.IsValid() {
		nr.Gw = r.Gw.AsSlice()
	} else {
		nr.Scope = netlink.SCOPE_LINK
	}
	if r.Src.IsValid() {
		nr.Src = r.Src.AsSlice()
	}
	return nr
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// PodMAC returns the MAC address OpenShift SDN derives from a pod's IPv4
// address (0a:58:<ip>), or nil if ip is not IPv4.
func PodMAC(ip netip.Addr) net.HardwareAddr {
	ip = ip.Unmap()
	if !ip.Is4() {
		return nil
	}
	m := packet.PodMAC(ip.As4())
	return net.HardwareAddr(m[:])
}

// InterfaceWith returns the interface that holds addr in the calling
// thread's namespace (inside Do, the namespace Do entered).
func InterfaceWith(addr netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		as, _ := ifs[i].Addrs()
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(addr.AsSlice()) {
				return &ifs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no interface has %v", addr)
}
