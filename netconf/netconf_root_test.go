package netconf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// needRoot skips the test unless it runs as root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// newNS creates a named namespace "gvst-nc-<pid>-<suffix>" removed at the
// end of the test, and returns its path.
func newNS(t *testing.T, suffix string) string {
	t.Helper()
	name := fmt.Sprintf("gvst-nc-%d-%s", os.Getpid(), suffix)
	p, err := CreateNamedNS(name)
	if err != nil {
		t.Fatalf("CreateNamedNS: %v", err)
	}
	t.Cleanup(func() {
		if err := DeleteNamedNS(name); err != nil {
			t.Errorf("DeleteNamedNS: %v", err)
		}
	})
	return p
}

func TestDoEntersAndRestores(t *testing.T) {
	needRoot(t)
	p := newNS(t, "do")
	target, err := netns.GetFromPath(p)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()

	err = Do(p, func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		if !cur.Equal(target) {
			return errors.New("fn does not run in the target namespace")
		}
		// A fresh namespace has only lo.
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		if len(links) != 1 || links[0].Attrs().Name != "lo" {
			return fmt.Errorf("links in new ns: %d", len(links))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// Every unlocked thread, including whatever runs this goroutine next,
	// is still in the original namespace.
	for range 20 {
		cur, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		eq := cur.Equal(host)
		cur.Close()
		if !eq {
			t.Fatal("a thread was left in the target namespace")
		}
	}

	sentinel := errors.New("from fn")
	if err := Do(p, func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do did not return fn's error: %v", err)
	}
	if err := Do("/nonexistent/netns", func() error { return nil }); err == nil {
		t.Error("Do with a bad path succeeded")
	}
}

// TestVethPair builds a veth pair in namespace a, moves one end to b,
// configures both as pods' eth0 with ConfigureLink and pings across.
func TestVethPair(t *testing.T) {
	needRoot(t)
	pa, pb := newNS(t, "a"), newNS(t, "b")
	ipA, ipB := netip.MustParseAddr("10.77.0.1"), netip.MustParseAddr("10.77.0.2")

	err := Do(pa, func() error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "gvst-va"}, PeerName: "gvst-vb"}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		return MoveToNS("gvst-vb", pb)
	})
	if err != nil {
		t.Fatalf("create veth / MoveToNS: %v", err)
	}

	cfgA := LinkConfig{
		Name: "gvst-va", NewName: "eth0", MAC: PodMAC(ipA), MTU: 1450,
		Addrs: []netip.Prefix{netip.PrefixFrom(ipA, 24)}, Up: true,
		Routes: []Route{
			{Dst: netip.MustParsePrefix("10.78.0.0/16"), Gw: ipB},
			{Dst: netip.MustParsePrefix("10.79.0.0/16")}, // on-link
		},
	}
	cfgB := LinkConfig{
		Name: "gvst-vb", NewName: "eth0", MAC: PodMAC(ipB), MTU: 1450,
		Addrs: []netip.Prefix{netip.PrefixFrom(ipB, 24)}, Up: true,
		Routes: []Route{{Gw: ipA}}, // default route
	}
	for _, c := range []struct {
		ns  string
		cfg LinkConfig
	}{{pa, cfgA}, {pb, cfgB}} {
		if err := ConfigureLink(c.ns, c.cfg); err != nil {
			t.Fatalf("ConfigureLink(%s): %v", c.ns, err)
		}
	}
	// Repeating it (by the new name) must succeed: CNI retries ADD.
	again := cfgA
	again.Name = "eth0"
	if err := ConfigureLink(pa, again); err != nil {
		t.Fatalf("repeated ConfigureLink: %v", err)
	}

	err = Do(pa, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		at := l.Attrs()
		if at.HardwareAddr.String() != "0a:58:0a:4d:00:01" || at.MTU != 1450 || at.Flags&net.FlagUp == 0 {
			return fmt.Errorf("eth0: mac %s mtu %d flags %v", at.HardwareAddr, at.MTU, at.Flags)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.77.0.1/24" {
			return fmt.Errorf("addrs: %v", addrs)
		}
		routes, err := netlink.RouteList(l, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		var got []string
		for _, r := range routes {
			got = append(got, fmt.Sprintf("%s gw %s scope %d", r.Dst, r.Gw, r.Scope))
		}
		for _, want := range []string{"10.78.0.0/16 gw 10.77.0.2 scope 0", "10.79.0.0/16 gw <nil> scope 253"} {
			if !slices.Contains(got, want) {
				return fmt.Errorf("route %q missing from %q", want, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = Do(pb, func() error {
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return err
		}
		for _, r := range routes {
			if (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw.Equal(ipA.AsSlice()) {
				return nil
			}
		}
		return fmt.Errorf("no default route via %s in %v", ipA, routes)
	})
	if err != nil {
		t.Fatal(err)
	}

	nameA := fmt.Sprintf("gvst-nc-%d-a", os.Getpid())
	out, err := exec.Command("ip", "netns", "exec", nameA, "ping", "-c1", "-W2", ipB.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from a: %v\n%s", ipB, err, out)
	}
}

func TestConfigureLinkNotFound(t *testing.T) {
	needRoot(t)
	p := newNS(t, "nf")
	err := ConfigureLink(p, LinkConfig{Name: "nope0", Up: true})
	if !errors.Is(err, ErrLinkNotFound) {
		t.Fatalf("err = %v, want ErrLinkNotFound", err)
	}
}
