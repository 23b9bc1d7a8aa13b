package source

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// EgressRulesOf reads an EgressNetworkPolicy's rules, in order; an object
// it refuses should deny its project's egress (DenyAllEgress) until fixed.
func EgressRulesOf(np *networkv1.EgressNetworkPolicy) ([]EgressRule, error) {
	if len(np.Spec.Egress) > sdn.MaxEgressRules {
		return nil, fmt.Errorf("%d rules, at most %d", len(np.Spec.Egress), sdn.MaxEgressRules)
	}
	var out []EgressRule
	for i, r := range np.Spec.Egress {
		var er EgressRule
		switch r.Type {
		case networkv1.EgressNetworkPolicyRuleAllow:
			er.Allow = true
		case networkv1.EgressNetworkPolicyRuleDeny:
		default:
			return nil, fmt.Errorf("rule %d: type %q (Allow or Deny)", i, r.Type)
		}
		switch {
		case r.To.CIDRSelector != "" && r.To.DNSName != "":
			return nil, fmt.Errorf("rule %d: both cidrSelector and dnsName", i)
		case r.To.CIDRSelector != "":
			p, err := netip.ParsePrefix(r.To.CIDRSelector)
			if err != nil {
				return nil, fmt.Errorf("rule %d: cidrSelector: %w", i, err)
			}
			er.CIDR = p.Masked()
		case r.To.DNSName != "":
			name := strings.TrimSuffix(r.To.DNSName, ".")
			if len(name) > 253 || strings.ContainsAny(name, " /\\:@") || name == "" {
				return nil, fmt.Errorf("rule %d: dnsName %q", i, r.To.DNSName)
			}
			er.DNSName = name
		default:
			return nil, fmt.Errorf("rule %d: neither cidrSelector nor dnsName", i)
		}
		out = append(out, er)
	}
	return out, nil
}

// DenyAllEgress is what an egress firewall the node cannot read stands
// for: nothing leaves the cluster (fail closed).
func DenyAllEgress() []EgressRule {
	return []EgressRule{{Allow: false, CIDR: netip.MustParsePrefix("0.0.0.0/0")}}
}
