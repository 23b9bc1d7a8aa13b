package ctdiff

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/ovs"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// The pods of each side: A, B and C on ports 1, 2 and 3 of the switch, in
// one /24. natAddr (SNAT) and vipAddr (DNAT) belong to nobody: the pods
// send to them through gwMAC, which the switch rewrites.
var (
	podIPs  = [3]netip.Addr{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")}
	natAddr = netip.MustParseAddr("10.1.0.100")
	vipAddr = netip.MustParseAddr("10.1.0.200")
	gwMAC   = net.HardwareAddr{0x0a, 0x58, 0x0a, 0x01, 0x00, 0xfe}
)

// pod is one endpoint: a namespace with eth0.
type pod struct {
	name string // A, B or C
	ns   string
	ip   netip.Addr
	mac  net.HardwareAddr
}

// side is one switch under test with its three pods.
type side struct {
	name string
	lab  *lab.Lab
	pods [3]pod
	// load replaces the rule set and forgets every connection.
	load func(ctx context.Context, rules string) error
}

func (s *side) exec(ctx context.Context, p pod, argv ...string) ([]byte, error) {
	return s.lab.Exec(ctx, p.ns, argv...)
}

// newLab creates the namespaces of both sides: node 1's pods for gvs,
// node 2 (hosting the OVS daemons) and its pods for OVS.
func newLab(t *testing.T, ctx context.Context) *lab.Lab {
	l, err := lab.Create(ctx, lab.Spec{Prefix: "ctd" + strconv.Itoa(os.Getpid()%1000000), Nodes: 2, PodsPerNode: 3,
		Underlay: netip.MustParsePrefix("192.168.244.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Destroy(); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	return l
}

// setupPods names a side's pods and gives each eth0 (made by mkLink) its
// MAC, address and the static neighbours of the other pods and of the
// NAT and VIP addresses (the rule sets pass no ARP); IPv6 is off so that
// nothing else crosses the switch.
func setupPods(ctx context.Context, s *side, nodePods []lab.Pod, mkLink func(i int, p pod) error) error {
	for i := range s.pods {
		s.pods[i] = pod{name: string(rune('A' + i)), ns: nodePods[i].NS, ip: podIPs[i], mac: netconf.PodMAC(podIPs[i])}
	}
	for i, p := range s.pods {
		if err := mkLink(i, p); err != nil {
			return fmt.Errorf("%s pod %s: %w", s.name, p.name, err)
		}
		cmds := [][]string{{"sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"}}
		for _, q := range s.pods {
			if q.ip != p.ip {
				cmds = append(cmds, []string{"ip", "neigh", "replace", q.ip.String(), "lladdr", q.mac.String(), "dev", "eth0", "nud", "permanent"})
			}
		}
		for _, a := range []netip.Addr{natAddr, vipAddr} {
			cmds = append(cmds, []string{"ip", "neigh", "replace", a.String(), "lladdr", gwMAC.String(), "dev", "eth0", "nud", "permanent"})
		}
		for _, argv := range cmds {
			if out, err := s.exec(ctx, p, argv...); err != nil {
				return fmt.Errorf("%s pod %s: %v: %w: %s", s.name, p.name, argv, err, out)
			}
		}
	}
	return nil
}

// newGVSSide builds the gvs side: an in-process switch with a tracker,
// whose ports 1 to 3 are TAPs (with TSO, as gvs-switchd opens pod TAPs)
// created in the pods' namespaces and named eth0 there, as
// docs/embedding.md shows.
func newGVSSide(t *testing.T, ctx context.Context, l *lab.Lab) *side {
	s := &side{name: "gvs", lab: l}
	tr, err := conntrack.New(conntrack.Config{MaxEntries: 4096})
	if err != nil {
		t.Fatal(err)
	}
	tbl := flowtable.New(flowtable.Config{})
	sw, err := vswitch.New(vswitch.Config{Table: tbl, Conntrack: tr, SweepInterval: time.Second, MaxFrame: packet.MaxSuperFrame + 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sw.Close(); err != nil {
			t.Errorf("close the gvs switch: %v", err)
		}
	})
	err = setupPods(ctx, s, l.Nodes[0].Pods, func(i int, p pod) error {
		var dev *tap.Device
		if err := netconf.Do(netconf.NsPath(p.ns), func() (err error) {
			dev, err = tap.Create(tap.Config{Name: "ctdtap", Offloads: tap.OffloadsTSO})
			return err
		}); err != nil {
			return err
		}
		if err := sw.AddPort(uint32(i+1), dev); err != nil {
			dev.Close()
			return err
		}
		return netconf.ConfigureLink(netconf.NsPath(p.ns), netconf.LinkConfig{Name: "ctdtap", NewName: "eth0", MAC: p.mac,
			MTU: 1500, Addrs: []netip.Prefix{netip.PrefixFrom(p.ip, 24)}, Up: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.load = func(ctx context.Context, rules string) error {
		rs, err := flowtable.ParseRules(rules)
		if err != nil {
			return err
		}
		if err := tbl.Apply([]flowtable.Filter{{Table: -1}}, rs); err != nil {
			return err
		}
		tr.Flush()
		return nil
	}
	return s
}

// newOVSSide builds the OVS side: ovsdb-server and ovs-vswitchd in node
// 2's namespace, bridge br0 with datapath_type=netdev and fail_mode=secure,
// whose ports 1 to 3 (ofport_request) are veths into the pods' namespaces,
// named eth0 there with transmit checksum offload off (OVS's netdev
// datapath does not complete partial checksums).
func newOVSSide(t *testing.T, ctx context.Context, l *lab.Lab) *side {
	s := &side{name: "ovs", lab: l}
	node := l.Nodes[1]
	d, err := ovs.Start(ctx, l, node.NS, filepath.Join(l.StateDir(), "ovs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Errorf("stop OVS: %v", err)
		}
	})
	if _, err := d.Vsctl(ctx, "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "fail_mode=secure"); err != nil {
		t.Fatal(err)
	}
	err = setupPods(ctx, s, l.Nodes[1].Pods, func(i int, p pod) error {
		host := "ctdv" + strconv.Itoa(i+1)
		for _, argv := range [][]string{
			{"ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.ns},
			{"ip", "link", "set", host, "up"},
		} {
			if out, err := l.Exec(ctx, node.NS, argv...); err != nil {
				return fmt.Errorf("%v: %w: %s", argv, err, out)
			}
		}
		if _, err := d.Vsctl(ctx, "add-port", "br0", host, "--", "set", "interface", host, "ofport_request="+strconv.Itoa(i+1)); err != nil {
			return err
		}
		for _, argv := range [][]string{
			{"ip", "link", "set", "eth0", "address", p.mac.String(), "up"},
			{"ip", "addr", "add", netip.PrefixFrom(p.ip, 24).String(), "dev", "eth0"},
			{"ethtool", "-K", "eth0", "tx", "off"},
		} {
			if out, err := s.exec(ctx, p, argv...); err != nil {
				return fmt.Errorf("%v: %w: %s", argv, err, out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.load = func(ctx context.Context, rules string) error {
		f := filepath.Join(d.Dir, "rules.txt")
		if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
			return err
		}
		if _, err := d.Ofctl(ctx, "del-flows", "br0"); err != nil {
			return err
		}
		if _, err := d.Ofctl(ctx, "add-flows", "br0", f); err != nil {
			return err
		}
		_, err := d.Appctl(ctx, "dpctl/flush-conntrack")
		return err
	}
	return s
}
