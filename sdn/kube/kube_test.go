package kube

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// testLogger logs through t.Log.
func testLogger(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", name)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

func TestApplyChange(t *testing.T) {
	v := master.NewVNIDs([]string{"infra"})
	for _, p := range []string{"default", "infra", "a", "b", "c"} {
		if _, err := v.Create(p); err != nil {
			t.Fatal(err)
		}
	}
	get := func(p string) uint32 { n, _ := v.Get(p); return n }
	a, b := get("a"), get("b")
	if get("default") != 0 || get("infra") != 0 || a < master.MinVNID || b == a {
		t.Fatalf("initial VNIDs %v", v.Projects())
	}
	steps := []struct {
		project, value string
		err            error
		check          func() bool
	}{
		{"b", "join:a", nil, func() bool { return get("b") == a }},
		{"c", "global", nil, func() bool { return get("c") == 0 }},
		{"b", "isolate", nil, func() bool { return get("b") != a && get("b") >= master.MinVNID && get("a") == a }},
		{"c", "isolate", nil, func() bool { return get("c") >= master.MinVNID }},
		{"a", "join:nosuch", master.ErrNoSuchProject, func() bool { return get("a") == a }},
		{"default", "isolate", master.ErrIsolateDefault, func() bool { return get("default") == 0 }},
		{"a", "global:x", networkv1.ErrInvalidChangeNetwork, func() bool { return get("a") == a }},
		{"a", "", networkv1.ErrInvalidChangeNetwork, func() bool { return get("a") == a }},
	}
	for _, s := range steps {
		err := applyChange(v, s.project, s.value)
		if !errors.Is(err, s.err) || (s.err != nil && err == nil) {
			t.Fatalf("%s %q: err %v, want %v", s.project, s.value, err, s.err)
		}
		if !s.check() {
			t.Fatalf("%s %q: VNIDs now %v", s.project, s.value, v.Projects())
		}
	}
}

// unitController is a controller whose informers are never started: the
// test fills their stores by hand.
func unitController(t *testing.T, n Network) *controller {
	m, err := NewMaster(MasterConfig{Network: n, REST: &rest.Config{Host: "https://127.0.0.1:1"}, Log: testLogger(t, "unit")})
	if err != nil {
		t.Fatal(err)
	}
	return newController(m)
}

func TestRebuild(t *testing.T) {
	c := unitController(t, testNetwork())
	for _, nn := range []networkv1.NetNamespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, NetID: 0},
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, NetID: 10},
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, NetID: 10}, // joined
		{ObjectMeta: metav1.ObjectMeta{Name: "c"}, NetID: 42},
	} {
		if err := c.netnsInf.GetStore().Add(nn.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	want := expectedSubnets(t, testNetwork(), 3)
	for _, hs := range []networkv1.HostSubnet{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", CreationTimestamp: metav1.Unix(1, 0)}, Subnet: want[0]},
		{ObjectMeta: metav1.ObjectMeta{Name: "n2", CreationTimestamp: metav1.Unix(2, 0)}, Subnet: want[1]},
		{ObjectMeta: metav1.ObjectMeta{Name: "dup", CreationTimestamp: metav1.Unix(3, 0)}, Subnet: want[0]},
		{ObjectMeta: metav1.ObjectMeta{Name: "outside", CreationTimestamp: metav1.Unix(4, 0)}, Subnet: "10.9.0.0/26"},
		{ObjectMeta: metav1.ObjectMeta{Name: "garbage", CreationTimestamp: metav1.Unix(5, 0)}, Subnet: "nonsense"},
	} {
		if err := c.hsInf.GetStore().Add(hs.DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	c.saved = map[string]string{SubnetCursorsAnnotation: "[2]"}
	if err := c.rebuild(); err != nil {
		t.Fatal(err)
	}
	if got := c.vnids.Projects(); len(got) != 4 || got["b"] != 10 || got["c"] != 42 {
		t.Fatalf("VNIDs %v", got)
	}
	// No saved VNID cursor: the next one comes after the highest in use;
	// 10 stays in use while a and b hold it.
	if n, err := c.vnids.Create("d"); err != nil || n != 43 {
		t.Fatalf("next VNID %d, %v; want 43", n, err)
	}
	if err := c.vnids.Delete("a"); err != nil || !c.vnids.InUse(10) {
		t.Fatalf("VNID 10 released while b uses it (err %v)", err)
	}
	// The first HostSubnet keeps a subnet; a later duplicate is not held;
	// a subnet outside the networks is kept; garbage is not held.
	if c.held["n1"].String() != want[0] || c.held["n2"].String() != want[1] || c.held["outside"].String() != "10.9.0.0/26" {
		t.Fatalf("held %v", c.held)
	}
	if _, ok := c.held["dup"]; ok {
		t.Fatal("a duplicate subnet was held twice")
	}
	if _, ok := c.held["garbage"]; ok {
		t.Fatal("an unparsable subnet was held")
	}
	if p, err := c.subnets.Allocate(); err != nil || p.String() != want[2] {
		t.Fatalf("next subnet %v, %v; want %s (saved cursor 2)", p, err, want[2])
	}
}

func TestRebuildSubnetMode(t *testing.T) {
	n := testNetwork()
	n.Mode = sdn.ModeSubnet
	c := unitController(t, n)
	if err := c.rebuild(); err != nil {
		t.Fatal(err)
	}
	if c.vnids != nil {
		t.Fatal("subnet mode allocates VNIDs")
	}
	if err := c.syncProject(context.Background(), "a"); err != nil {
		t.Fatalf("subnet mode project sync: %v", err)
	}
}

func TestNetworkValidate(t *testing.T) {
	good := testNetwork()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Network){
		"no cluster network": func(n *Network) { n.ClusterNetworks = nil },
		"no service network": func(n *Network) { n.ServiceNetwork = netip.Prefix{} },
		"bad mode":           func(n *Network) { n.Mode = "ovn" },
		"small MTU":          func(n *Network) { n.MTU = 100 },
		"bad global project": func(n *Network) { n.GlobalProjects = []string{"Not_A_Name"} },
	} {
		n := testNetwork()
		mod(&n)
		if err := n.Validate(); !errors.Is(err, ErrInvalidNetwork) {
			t.Errorf("%s: %v, want ErrInvalidNetwork", name, err)
		}
	}
}

func TestClusterNetworkObject(t *testing.T) {
	n := testNetwork()
	n.VXLANPort, n.MTU = 4790, 1400
	cn := unitController(t, n).clusterNetwork()
	if cn.Name != "default" || cn.Network != "10.1.0.0/16" || cn.HostSubnetLength != 6 || cn.PluginName != "redhat/openshift-ovs-multitenant" ||
		*cn.VXLANPort != 4790 || *cn.MTU != 1400 || cn.ServiceNetwork != "172.30.0.0/16" {
		t.Fatalf("%+v", cn)
	}
}
