package console

import (
	"fmt"
	"slices"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// policyOf describes np for the policies page and lists the pods of pods
// (in its namespace) its pod selector matches. Only the selection is
// computed here, to say whom a policy applies to; what traffic is allowed
// is never decided here (the matrix and the "why" page trace the nodes'
// tables for that).
func policyOf(np *networkingv1.NetworkPolicy, pods []Pod) Policy {
	p := Policy{Namespace: np.Namespace, Name: np.Name, PodSelector: metav1.FormatLabelSelector(&np.Spec.PodSelector)}
	if p.PodSelector == "<none>" {
		p.PodSelector = ""
	}
	for _, t := range np.Spec.PolicyTypes {
		p.Types = append(p.Types, string(t))
	}
	if len(p.Types) == 0 {
		p.Types = []string{"Ingress"}
		if len(np.Spec.Egress) > 0 {
			p.Types = append(p.Types, "Egress")
		}
	}
	for _, r := range np.Spec.Ingress {
		p.Ingress = append(p.Ingress, "from "+peers(r.From)+ports(r.Ports))
	}
	for _, r := range np.Spec.Egress {
		p.Egress = append(p.Egress, "to "+peers(r.To)+ports(r.Ports))
	}
	if slices.Contains(p.Types, "Ingress") && len(np.Spec.Ingress) == 0 {
		p.Ingress = []string{"(none: every connection in is refused)"}
	}
	if slices.Contains(p.Types, "Egress") && len(np.Spec.Egress) == 0 {
		p.Egress = []string{"(none: every connection out is refused)"}
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		p.Selects = []string{"(bad selector: " + err.Error() + ")"}
		return p
	}
	for _, pod := range pods {
		if pod.Namespace == np.Namespace && sel.Matches(labels.Set(pod.Labels)) {
			p.Selects = append(p.Selects, pod.Key())
		}
	}
	return p
}

func peers(ps []networkingv1.NetworkPolicyPeer) string {
	if len(ps) == 0 {
		return "anywhere"
	}
	var out []string
	for _, p := range ps {
		var parts []string
		if p.NamespaceSelector != nil {
			parts = append(parts, "namespaces "+selector(p.NamespaceSelector))
		}
		if p.PodSelector != nil {
			parts = append(parts, "pods "+selector(p.PodSelector))
		}
		if p.IPBlock != nil {
			s := "ipBlock " + p.IPBlock.CIDR
			if len(p.IPBlock.Except) > 0 {
				s += " except " + strings.Join(p.IPBlock.Except, ",")
			}
			parts = append(parts, s)
		}
		out = append(out, strings.Join(parts, " and "))
	}
	return strings.Join(out, "; ")
}

func selector(s *metav1.LabelSelector) string {
	f := metav1.FormatLabelSelector(s)
	if f == "<none>" || f == "" {
		return "(all)"
	}
	return f
}

func ports(ps []networkingv1.NetworkPolicyPort) string {
	if len(ps) == 0 {
		return ""
	}
	var out []string
	for _, p := range ps {
		proto := "TCP"
		if p.Protocol != nil {
			proto = string(*p.Protocol)
		}
		s := proto
		if p.Port != nil {
			s += "/" + p.Port.String()
			if p.EndPort != nil {
				s += fmt.Sprintf("-%d", *p.EndPort)
			}
		}
		out = append(out, s)
	}
	return " on " + strings.Join(out, ",")
}

// firewallOf renders an egress firewall's rules, one a line.
func firewallOf(fw *networkv1.EgressNetworkPolicy) []string {
	var out []string
	for _, r := range fw.Spec.Egress {
		to := r.To.CIDRSelector
		if r.To.DNSName != "" {
			to = r.To.DNSName
		}
		out = append(out, fmt.Sprintf("%s to %s", r.Type, to))
	}
	return out
}
