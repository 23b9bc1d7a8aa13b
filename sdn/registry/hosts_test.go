package registry_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/sdn/registry"
)

// TestRegisterHost: a host that is not a node, registered by an
// administrator, gets a subnet (the one it asks for when free) and a
// subnet record carrying its fixed VNID; changing the VNID reaches the
// record; unregistering releases the subnet. A running node's name, a
// VNID past 24 bits and a node's address are refused.
func TestRegisterHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, reg := startEtcd(t)
	runMaster(t, ctx, reg, false)
	register(t, ctx, node(t, e, "n1"), "n1", netip.MustParseAddr("192.168.0.1"), 60, netip.Prefix{})

	want := netip.MustParsePrefix("10.128.100.0/23")
	v := uint32(10)
	if err := reg.RegisterHost(ctx, registry.Host{Name: "f5", IP: netip.MustParseAddr("192.168.0.50"), Want: want, FixedVNID: &v}); err != nil {
		t.Fatal(err)
	}
	s, err := reg.WaitSubnet(ctx, "f5", 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Subnet != want || s.IP != netip.MustParseAddr("192.168.0.50") || s.FixedVNID == nil || *s.FixedVNID != 10 || s.Lease != 0 {
		t.Fatalf("f5's subnet record %+v (fixed VNID %v); want %v, 192.168.0.50, fixed VNID 10, no lease", s, s.FixedVNID, want)
	}

	// The fixed VNID changes (0: global); the subnet stays.
	v0 := uint32(0)
	if err := reg.RegisterHost(ctx, registry.Host{Name: "f5", IP: netip.MustParseAddr("192.168.0.50"), FixedVNID: &v0}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "f5's record to carry fixed VNID 0", func() (bool, error) {
		s, err := reg.WaitSubnet(ctx, "f5", 0)
		return err == nil && s.Subnet == want && s.FixedVNID != nil && *s.FixedVNID == 0, err
	})

	// Refusals.
	if err := reg.RegisterHost(ctx, registry.Host{Name: "n1", IP: netip.MustParseAddr("192.168.0.51")}); !errors.Is(err, registry.ErrNodeExists) {
		t.Errorf("RegisterHost over a running node: %v, want ErrNodeExists", err)
	}
	if err := reg.UnregisterHost(ctx, "n1"); !errors.Is(err, registry.ErrNodeExists) {
		t.Errorf("UnregisterHost of a running node: %v, want ErrNodeExists", err)
	}
	big := uint32(registry.MaxVNID + 1)
	if err := reg.RegisterHost(ctx, registry.Host{Name: "f5-big", IP: netip.MustParseAddr("192.168.0.52"), FixedVNID: &big}); err == nil {
		t.Error("RegisterHost with a VNID past 24 bits succeeded")
	}
	if err := reg.RegisterHost(ctx, registry.Host{Name: "f5-dup", IP: netip.MustParseAddr("192.168.0.1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.AssignSubnet(ctx, testConfig.ClusterNetworks, "f5-dup"); !errors.Is(err, registry.ErrBadNodeRecord) {
		t.Errorf("a host with node n1's address: %v, want ErrBadNodeRecord", err)
	}

	// Unregistering releases the subnet.
	if err := reg.UnregisterHost(ctx, "f5"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "f5's subnet released", func() (bool, error) {
		holder, err := reg.ClaimHolder(ctx, want)
		return holder == "", err
	})
	subs, _, err := reg.Subnets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if s.Node == "f5" {
			t.Errorf("f5's subnet record is still there: %+v", s)
		}
	}
}
