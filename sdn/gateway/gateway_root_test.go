package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/sdn"
)

func testNode(subnet string) sdn.NodeConfig {
	return sdn.NodeConfig{
		NodeName:        "node-1",
		NodeIP:          netip.MustParseAddr("192.168.100.11"),
		Subnet:          netip.MustParsePrefix(subnet),
		ClusterNetworks: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/14")},
		ServiceNetwork:  netip.MustParsePrefix("172.30.0.0/16"),
		Mode:            sdn.ModeMultitenant,
		MTU:             1400,
	}
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(string(b))
}

// check verifies tun0 against cfg; it runs inside the namespace, off the
// test goroutine, so it only reports with t.Errorf.
func check(t *testing.T, cfg sdn.NodeConfig) error {
	l, err := netlink.LinkByName("tun0")
	if err != nil {
		return err
	}
	a := l.Attrs()
	if a.Flags&net.FlagUp == 0 {
		t.Error("tun0 is not up")
	}
	if got, want := a.HardwareAddr.String(), "0a:58:"+fmt.Sprintf("%02x:%02x:%02x:%02x", 10, 128, cfg.Subnet.Addr().As4()[2], 1); got != want {
		t.Errorf("MAC %s, want %s", got, want)
	}
	if a.MTU != cfg.MTU {
		t.Errorf("MTU %d, want %d", a.MTU, cfg.MTU)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	want := netip.PrefixFrom(cfg.Gateway(), cfg.Subnet.Bits()).String()
	if len(addrs) != 1 || addrs[0].IPNet.String() != want {
		t.Errorf("addresses %v, want only %s", addrs, want)
	}
	routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	found := map[string]netlink.Route{}
	for _, r := range routes {
		if r.Dst != nil {
			found[r.Dst.String()] = r
		}
	}
	if r, ok := found["10.128.0.0/14"]; !ok {
		t.Errorf("no cluster network route in %v", routes)
	} else if r.Scope != netlink.SCOPE_LINK || !r.Src.Equal(net.IP(cfg.Gateway().AsSlice())) || r.Protocol != unix.RTPROT_KERNEL {
		t.Errorf("cluster route %v: want scope link, proto kernel, src %v", r, cfg.Gateway())
	}
	if r, ok := found["172.30.0.0/16"]; !ok || r.Gw != nil {
		t.Errorf("service network route missing or via a gateway: %v", routes)
	}
	if _, ok := found[cfg.Subnet.String()]; !ok {
		t.Errorf("no connected route for %v in %v", cfg.Subnet, routes)
	}
	if v := readSysctl("net/ipv4/ip_forward"); v != "1" {
		t.Errorf("ip_forward = %s in the namespace", v)
	}
	if v := readSysctl("net/ipv4/conf/tun0/rp_filter"); v != "2" {
		t.Errorf("rp_filter = %s", v)
	}
	return nil
}

func TestConfigureInNetns(t *testing.T) {
	nstest.RequireRoot(t)
	hostForward := readSysctl("net/ipv4/ip_forward")
	ns := nstest.New(t, "gw", "a")
	// A fresh namespace starts with forwarding off: the test shows that the
	// write lands in the namespace, not on the host.
	err := nstest.Do(ns, func() error {
		if v := readSysctl("net/ipv4/ip_forward"); v != "0" {
			return fmt.Errorf("fresh namespace has ip_forward=%s", v)
		}
		tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: "tun0"}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI}
		if err := netlink.LinkAdd(tap); err != nil {
			return fmt.Errorf("create tap: %w", err)
		}
		defer netlink.LinkDel(tap)
		cfg := testNode("10.128.2.0/23")
		for i := 0; i < 2; i++ { // idempotent
			if err := Configure("tun0", cfg); err != nil {
				return fmt.Errorf("Configure #%d: %w", i+1, err)
			}
			if err := check(t, cfg); err != nil {
				return err
			}
		}
		// A new subnet replaces the old address.
		cfg = testNode("10.128.4.0/23")
		if err := Configure("tun0", cfg); err != nil {
			return err
		}
		if err := check(t, cfg); err != nil {
			return err
		}
		if err := Configure("nosuch0", cfg); err == nil {
			t.Error("Configure of a missing link succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := readSysctl("net/ipv4/ip_forward"); v != hostForward {
		t.Errorf("host ip_forward changed from %s to %s", hostForward, v)
	}
}

func TestConfigureRejects(t *testing.T) {
	cfg := testNode("10.128.2.0/23")
	if err := Configure("../x", cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad link name: %v", err)
	}
	cfg.Subnet = netip.Prefix{}
	if err := Configure("tun0", cfg); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("no subnet: %v", err)
	}
}

func TestAddressAndMAC(t *testing.T) {
	cfg := testNode("10.128.2.0/23")
	if got := Address(cfg); got != netip.MustParseAddr("10.128.2.1") {
		t.Errorf("Address = %v", got)
	}
	if got := MAC(cfg).String(); got != "0a:58:0a:80:02:01" {
		t.Errorf("MAC = %s", got)
	}
}
