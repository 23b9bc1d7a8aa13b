package sdn

import (
	"fmt"
	"net/netip"

	"github.com/gvswitch/gvs/flowtable"
)

// EgressRule is one rule of a project's egress firewall (OpenShift's
// EgressNetworkPolicy), in the policy's order: the first rule that matches
// a packet's destination decides. A rule naming a DNS name is given here
// as the addresses the name resolved to, all at that rule's place.
type EgressRule struct {
	Allow bool
	To    []netip.Prefix
}

// MaxEgressRules is the most rules one egress firewall may have (as
// OpenShift's limit of 1000 per EgressNetworkPolicy).
const MaxEgressRules = 1000

// egressFirstPriority is the priority of a firewall's first rule; rule i
// has egressFirstPriority - i.
const egressFirstPriority = 60000

// EgressFirewallCookie returns the cookie of the egress firewall rules of
// VNID v (table 100).
func EgressFirewallCookie(v uint32) uint64 { return cookieClassEgressFW | uint64(v&MaxVNID) }

// EgressFirewallRules returns the table 100 rules of the egress firewall
// of the pods of VNID v, tagged EgressFirewallCookie(v): rule i matches
// `ip, reg0=v, nw_dst=P` for each of its prefixes at priority 60000-i and
// either continues to table 101 (Allow) or drops (Deny). Traffic no rule
// matches goes on (the table's default). Only traffic leaving the cluster
// reaches table 100. The firewall needs per-project VNIDs: in subnet mode,
// or for VNID 0 (the global projects, which OpenShift refuses firewalls
// to), it is an error.
func EgressFirewallRules(cfg NodeConfig, v uint32, rules []EgressRule) ([]*flowtable.Rule, error) {
	if m := cfg.Mode.Canonical(); m != ModeMultitenant && m != ModeNetworkPolicy {
		return nil, fmt.Errorf("%w: an egress firewall needs the multitenant or networkpolicy mode", ErrInvalidConfig)
	}
	if v == 0 || v > MaxVNID {
		return nil, fmt.Errorf("%w: no egress firewall for VNID %d (global projects have none)", ErrInvalidConfig, v)
	}
	if len(rules) > MaxEgressRules {
		return nil, fmt.Errorf("%w: %d egress firewall rules, at most %d", ErrInvalidConfig, len(rules), MaxEgressRules)
	}
	c := EgressFirewallCookie(v)
	var b flowtable.Builder
	for i, r := range rules {
		prio := uint16(egressFirstPriority - i)
		for _, p := range r.To {
			if !p.Addr().Is4() {
				continue // the pod network is IPv4: an IPv6 destination never comes here
			}
			m := match{flowtable.IP(), flowtable.Reg(0, v), flowtable.NwDstPrefix(p.Masked())}
			if r.Allow {
				b.Add(TableEgressFW, prio, c, m, gotoTable(TableEgressIP))
			} else {
				b.Add(TableEgressFW, prio, c, m)
			}
		}
	}
	return b.Rules()
}
