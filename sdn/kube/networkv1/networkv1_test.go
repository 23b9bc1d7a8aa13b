package networkv1

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseChangeNetwork(t *testing.T) {
	good := map[string]ChangeNetwork{
		"global":                          {Action: ActionGlobal},
		"isolate":                         {Action: ActionIsolate},
		"join:alpha":                      {Action: ActionJoin, Project: "alpha"},
		"join:a-1":                        {Action: ActionJoin, Project: "a-1"},
		"join:" + strings.Repeat("x", 63): {Action: ActionJoin, Project: strings.Repeat("x", 63)},
	}
	for in, want := range good {
		got, err := ParseChangeNetwork(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%q formats back as %q", in, got.String())
		}
	}
	for _, in := range []string{"", "join", "join:", "join:Alpha", "join:a:b", "join:-a", "global:x", "isolate:", "Global", "merge:a",
		"join:" + strings.Repeat("x", 64)} {
		if c, err := ParseChangeNetwork(in); !errors.Is(err, ErrInvalidChangeNetwork) {
			t.Errorf("%q: %+v, %v; want ErrInvalidChangeNetwork", in, c, err)
		}
	}
}

func FuzzParseChangeNetwork(f *testing.F) {
	for _, s := range []string{"global", "isolate", "join:alpha", "join:", "join:a:b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseChangeNetwork(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidChangeNetwork) {
				t.Fatalf("%q: error %v does not wrap ErrInvalidChangeNetwork", s, err)
			}
			return
		}
		if c.String() != s {
			t.Fatalf("%q parsed as %+v, formats as %q", s, c, c.String())
		}
		if (c.Action == ActionJoin) != (c.Project != "") {
			t.Fatalf("%q: %+v", s, c)
		}
	})
}

// TestJSONNames checks the JSON field names against OpenShift's
// (network.openshift.io/v1 as openshift/api defines it).
func TestJSONNames(t *testing.T) {
	port, mtu := uint32(4789), uint32(1450)
	for _, c := range []struct {
		obj  any
		want []string
	}{
		{ClusterNetwork{Network: "n", HostSubnetLength: 9, ServiceNetwork: "s", PluginName: "p", ClusterNetworks: []ClusterNetworkEntry{{"c", 9}}, VXLANPort: &port, MTU: &mtu},
			[]string{`"network":"n"`, `"hostsubnetlength":9`, `"serviceNetwork":"s"`, `"pluginName":"p"`, `"clusterNetworks":[{"CIDR":"c","hostSubnetLength":9}]`, `"vxlanPort":4789`, `"mtu":1450`}},
		{HostSubnet{Host: "h", HostIP: "i", Subnet: "s", EgressIPs: []string{"e"}, EgressCIDRs: []string{"c"}},
			[]string{`"host":"h"`, `"hostIP":"i"`, `"subnet":"s"`, `"egressIPs":["e"]`, `"egressCIDRs":["c"]`}},
		{NetNamespace{NetName: "n", NetID: 0, EgressIPs: []string{"e"}},
			[]string{`"netname":"n"`, `"netid":0`, `"egressIPs":["e"]`}},
		{EgressNetworkPolicy{Spec: EgressNetworkPolicySpec{Egress: []EgressNetworkPolicyRule{{Type: EgressNetworkPolicyRuleDeny, To: EgressNetworkPolicyPeer{CIDRSelector: "c", DNSName: "d"}}}}},
			[]string{`"spec":{"egress":[{"type":"Deny","to":{"cidrSelector":"c","dnsName":"d"}}]}`}},
	} {
		b, err := json.Marshal(c.obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%T: %s lacks %s", c.obj, b, w)
			}
		}
	}
}

// TestDeepCopy fills every field and checks that the copy is equal and
// shares no memory: changing the copy leaves the original alone.
func TestDeepCopy(t *testing.T) {
	port, mtu := uint32(4789), uint32(1450)
	meta := metav1.ObjectMeta{Name: "x", Annotations: map[string]string{"a": "b"}, Labels: map[string]string{"l": "v"}}
	cn := &ClusterNetwork{ObjectMeta: meta, ClusterNetworks: []ClusterNetworkEntry{{"c", 9}}, VXLANPort: &port, MTU: &mtu}
	hs := &HostSubnet{ObjectMeta: meta, EgressIPs: []string{"e"}, EgressCIDRs: []string{"c"}}
	nn := &NetNamespace{ObjectMeta: meta, EgressIPs: []string{"e"}}
	enp := &EgressNetworkPolicy{ObjectMeta: meta, Spec: EgressNetworkPolicySpec{Egress: []EgressNetworkPolicyRule{{Type: "Allow"}}}}
	lists := []any{
		&ClusterNetworkList{Items: []ClusterNetwork{*cn}}, &HostSubnetList{Items: []HostSubnet{*hs}},
		&NetNamespaceList{Items: []NetNamespace{*nn}}, &EgressNetworkPolicyList{Items: []EgressNetworkPolicy{*enp}},
	}
	check := func(name string, a, b any, mutate func()) {
		t.Helper()
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: copy differs", name)
		}
		before, _ := json.Marshal(a)
		mutate()
		after, _ := json.Marshal(a)
		if string(before) != string(after) {
			t.Fatalf("%s: changing the copy changed the original:\n%s\n%s", name, before, after)
		}
	}
	c1 := cn.DeepCopy()
	check("ClusterNetwork", cn, c1, func() { *c1.VXLANPort, *c1.MTU, c1.ClusterNetworks[0].CIDR, c1.Annotations["a"] = 1, 2, "z", "z" })
	c2 := hs.DeepCopy()
	check("HostSubnet", hs, c2, func() { c2.EgressIPs[0], c2.EgressCIDRs[0], c2.Labels["l"] = "z", "z", "z" })
	c3 := nn.DeepCopy()
	check("NetNamespace", nn, c3, func() { c3.EgressIPs[0], c3.Annotations["a"] = "z", "z" })
	c4 := enp.DeepCopy()
	check("EgressNetworkPolicy", enp, c4, func() { c4.Spec.Egress[0].Type = "Deny" })
	l1 := lists[0].(*ClusterNetworkList).DeepCopy()
	check("ClusterNetworkList", lists[0], l1, func() { *l1.Items[0].VXLANPort = 7 })
	l2 := lists[1].(*HostSubnetList).DeepCopy()
	check("HostSubnetList", lists[1], l2, func() { l2.Items[0].EgressIPs[0] = "z" })
	l3 := lists[2].(*NetNamespaceList).DeepCopy()
	check("NetNamespaceList", lists[2], l3, func() { l3.Items[0].Annotations["a"] = "z" })
	l4 := lists[3].(*EgressNetworkPolicyList).DeepCopy()
	check("EgressNetworkPolicyList", lists[3], l4, func() { l4.Items[0].Spec.Egress[0].To.DNSName = "z" })
	var nilNN *NetNamespace
	if nilNN.DeepCopy() != nil {
		t.Fatal("nil DeepCopy")
	}
}
