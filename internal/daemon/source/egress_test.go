package source

import (
	"strings"
	"testing"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

func TestEgressRulesOf(t *testing.T) {
	np := func(rules ...networkv1.EgressNetworkPolicyRule) *networkv1.EgressNetworkPolicy {
		return &networkv1.EgressNetworkPolicy{Spec: networkv1.EgressNetworkPolicySpec{Egress: rules}}
	}
	allow, deny := networkv1.EgressNetworkPolicyRuleAllow, networkv1.EgressNetworkPolicyRuleDeny
	got, err := EgressRulesOf(np(
		networkv1.EgressNetworkPolicyRule{Type: allow, To: networkv1.EgressNetworkPolicyPeer{DNSName: "www.example.com."}},
		networkv1.EgressNetworkPolicyRule{Type: deny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "10.1.2.3/8"}},
	))
	if err != nil || len(got) != 2 || !got[0].Allow || got[0].DNSName != "www.example.com" || got[1].Allow || got[1].CIDR.String() != "10.0.0.0/8" {
		t.Fatalf("%+v %v", got, err)
	}
	for name, bad := range map[string]*networkv1.EgressNetworkPolicy{
		"type":    np(networkv1.EgressNetworkPolicyRule{Type: "Maybe", To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "0.0.0.0/0"}}),
		"both":    np(networkv1.EgressNetworkPolicyRule{Type: deny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "0.0.0.0/0", DNSName: "a.b"}}),
		"neither": np(networkv1.EgressNetworkPolicyRule{Type: deny}),
		"cidr":    np(networkv1.EgressNetworkPolicyRule{Type: deny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "10.0.0.0/33"}}),
		"name":    np(networkv1.EgressNetworkPolicyRule{Type: deny, To: networkv1.EgressNetworkPolicyPeer{DNSName: "a b"}}),
		"too many": np(func() []networkv1.EgressNetworkPolicyRule {
			r := make([]networkv1.EgressNetworkPolicyRule, 1001)
			for i := range r {
				r[i] = networkv1.EgressNetworkPolicyRule{Type: deny, To: networkv1.EgressNetworkPolicyPeer{CIDRSelector: "0.0.0.0/0"}}
			}
			return r
		}()...),
	} {
		if _, err := EgressRulesOf(bad); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: empty error", name)
		}
	}
}
