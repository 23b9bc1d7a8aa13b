// Package gateway configures tun0, the switch's gateway port (port 2), in
// the node's network namespace: the link holds the subnet's gateway address
// and the routes to the cluster and service networks, so that the host
// reaches every pod and pods reach services and the outside world through
// the host stack (docs/openshift-rules.md "NAT egress, services and host
// access").
//
// Configure works in the network namespace of the calling thread, like the
// netlink calls it makes; run it on a locked OS thread inside the node
// namespace.
package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/sdn"
)

// ErrInvalidConfig means the node configuration lacks what tun0 needs.
var ErrInvalidConfig = errors.New("gateway: invalid configuration")

// Address returns the gateway address of the node: subnet base + 1.
func Address(cfg sdn.NodeConfig) netip.Addr { return cfg.Gateway() }

// MAC returns tun0's MAC address: 0a:58 followed by the gateway address.
func MAC(cfg sdn.NodeConfig) net.HardwareAddr {
	m := sdn.GatewayMAC(cfg)
	return net.HardwareAddr(m[:])
}

// Configure sets up the existing link (tun0, a TAP the daemon created) for
// cfg, in the current network namespace, and is idempotent:
//
//  1. MAC 0a:58:<gateway>, MTU cfg.EffectiveMTU();
//  2. address gateway/<subnet bits>, replacing any other IPv4 address;
//  3. link up;
//  4. routes: each cluster network on-link via the link (proto kernel,
//     src gateway), the service network via the link;
//  5. sysctls of this namespace: net.ipv4.ip_forward=1,
//     net.ipv4.conf.<link>.rp_filter=2 (loose: replies to service traffic
//     come back through tun0 with sources routed elsewhere), and IPv6 off on
//     the link (the rule program carries no IPv6).
func Configure(link string, cfg sdn.NodeConfig) error {
	if !cfg.Subnet.IsValid() || !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 30 {
		return fmt.Errorf("%w: subnet %v", ErrInvalidConfig, cfg.Subnet)
	}
	if link == "" || strings.ContainsAny(link, "/") || link == "." || link == ".." {
		return fmt.Errorf("%w: link name %q", ErrInvalidConfig, link)
	}
	l, err := netlink.LinkByName(link)
	if err != nil {
		return fmt.Errorf("gateway: find %s: %w", link, err)
	}
	if err := setMAC(l, MAC(cfg)); err != nil {
		return fmt.Errorf("gateway: %s: set MAC: %w", link, err)
	}
	if mtu := cfg.EffectiveMTU(); l.Attrs().MTU != mtu {
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("gateway: %s: set MTU %d: %w", link, mtu, err)
		}
	}
	gw := Address(cfg)
	if err := setAddress(l, netip.PrefixFrom(gw, cfg.Subnet.Bits())); err != nil {
		return fmt.Errorf("gateway: %s: %w", link, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("gateway: %s: up: %w", link, err)
	}
	for _, cn := range cfg.ClusterNetworks {
		r := &netlink.Route{
			LinkIndex: l.Attrs().Index,
			Dst:       ipNet(cn.Masked()),
			Scope:     netlink.SCOPE_LINK,
			Protocol:  unix.RTPROT_KERNEL,
			Src:       net.IP(gw.AsSlice()),
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("gateway: %s: route %v: %w", link, cn, err)
		}
	}
	if cfg.ServiceNetwork.IsValid() {
		r := &netlink.Route{
			LinkIndex: l.Attrs().Index,
			Dst:       ipNet(cfg.ServiceNetwork.Masked()),
			Scope:     netlink.SCOPE_LINK,
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("gateway: %s: route %v: %w", link, cfg.ServiceNetwork, err)
		}
	}
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := writeSysctl(filepath.Join("net/ipv4/conf", link, "rp_filter"), "2"); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	// Best effort: the kernel may have IPv6 compiled out or disabled.
	_ = writeSysctl(filepath.Join("net/ipv6/conf", link, "disable_ipv6"), "1")
	return nil
}

// setMAC sets the link's MAC address, taking the link down for the change
// if the driver refuses to change it while up.
func setMAC(l netlink.Link, mac net.HardwareAddr) error {
	if l.Attrs().HardwareAddr.String() == mac.String() {
		return nil
	}
	err := netlink.LinkSetHardwareAddr(l, mac)
	if errors.Is(err, unix.EBUSY) {
		if err = netlink.LinkSetDown(l); err != nil {
			return err
		}
		err = netlink.LinkSetHardwareAddr(l, mac)
	}
	return err
}

// setAddress makes want the link's only IPv4 address.
func setAddress(l netlink.Link, want netip.Prefix) error {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		ip, ok := netip.AddrFromSlice(a.IP)
		if ok && netip.PrefixFrom(ip.Unmap(), ones) == want {
			continue
		}
		if err := netlink.AddrDel(l, &a); err != nil {
			return fmt.Errorf("remove stale address %v: %w", a.IPNet, err)
		}
	}
	if err := netlink.AddrReplace(l, &netlink.Addr{IPNet: ipNet(want)}); err != nil {
		return fmt.Errorf("address %v: %w", want, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// writeSysctl writes a sysctl of the calling thread's network namespace
// (/proc/sys/net is resolved per thread).
func writeSysctl(name, value string) error {
	path := filepath.Join("/proc/sys", name)
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", strings.ReplaceAll(name, "/", "."), value, err)
	}
	return nil
}
