package node

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// Egress firewalls (OpenShift's EgressNetworkPolicy): the Program keeps
// each namespace's firewall objects, with DNS names already resolved by
// the caller, and installs table 100's rules per VNID. A VNID gets a
// firewall's rules when exactly one namespace of that VNID has exactly one
// firewall object; when several do (joined projects, or two objects in one
// namespace) nothing tells which should win, and the VNID's egress is
// denied entirely, as OpenShift does, until an administrator leaves one.

// denyAll is the firewall of a VNID whose firewall is ambiguous.
var denyAll = []sdn.EgressRule{{Allow: false, To: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}

// SetEgressFirewall records or replaces the egress firewall object name of
// namespace (rules in order, DNS names resolved) and installs its VNID's
// rules.
func (p *Program) SetEgressFirewall(namespace, name string, rules []sdn.EgressRule) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(rules) > sdn.MaxEgressRules {
		return fmt.Errorf("%w: egress firewall %s/%s has %d rules, at most %d", sdn.ErrInvalidConfig, namespace, name, len(rules), sdn.MaxEgressRules)
	}
	if p.fw[namespace] == nil {
		p.fw[namespace] = map[string][]sdn.EgressRule{}
	}
	p.fw[namespace][name] = slices.Clone(rules)
	return p.renderEgress(namespace)
}

// DeleteEgressFirewall forgets an egress firewall object.
func (p *Program) DeleteEgressFirewall(namespace, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.fw[namespace], name)
	if len(p.fw[namespace]) == 0 {
		delete(p.fw, namespace)
	}
	return p.renderEgress(namespace)
}

// renderEgress installs the firewall of namespace's VNID (if it has one).
func (p *Program) renderEgress(namespace string) error {
	if !p.isolated() {
		return nil
	}
	v, ok := p.projects[namespace]
	if !ok || v == 0 {
		return nil // no VNID yet (rendered when it comes), or global: no firewall
	}
	return p.renderEgressVNID(v)
}

// egressRulesOf returns the firewall VNID v must have; nil: none.
func (p *Program) egressRulesOf(v uint32) []sdn.EgressRule {
	var objects [][]sdn.EgressRule
	for ns, objs := range p.fw {
		if pv, ok := p.projects[ns]; !ok || pv != v {
			continue
		}
		for _, r := range objs {
			objects = append(objects, r)
		}
	}
	switch len(objects) {
	case 0:
		return nil
	case 1:
		return objects[0]
	}
	return denyAll
}

func (p *Program) renderEgressVNID(v uint32) error {
	var rules []*flowtable.Rule
	if fw := p.egressRulesOf(v); fw != nil {
		var err error
		if rules, err = sdn.EgressFirewallRules(p.node, v, fw); err != nil {
			return err
		}
	}
	return p.table.Apply([]flowtable.Filter{cookieFilter(sdn.EgressFirewallCookie(v))}, rules)
}
