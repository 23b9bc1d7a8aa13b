package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/sdn/registry"
)

const twoPolicies = `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: deny-all
spec:
  podSelector: {}
  policyTypes: [Ingress]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-web
  namespace: alpha
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - namespaceSelector:
        matchLabels: {team: red}
    ports:
    - {protocol: TCP, port: 80, endPort: 90}
    - port: http
`

func TestDecodePolicies(t *testing.T) {
	got, err := decodePolicies([]byte(twoPolicies))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "deny-all" || got[1].Namespace != "alpha" ||
		got[1].Spec.Ingress[0].Ports[0].EndPort == nil || *got[1].Spec.Ingress[0].Ports[0].EndPort != 90 ||
		got[1].Spec.Ingress[0].Ports[1].Port.StrVal != "http" {
		t.Fatalf("decoded %+v", got)
	}
	list := `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"a","namespace":"x"},"spec":{"podSelector":{}}}]}`
	if got, err := decodePolicies([]byte(list)); err != nil || len(got) != 1 || got[0].Name != "a" {
		t.Errorf("a List: %+v, %v", got, err)
	}
	bad := map[string]string{
		"a misspelt field": strings.Replace(twoPolicies, "podSelector: {}", "podSelektor: {}", 1),
		"another kind":     strings.Replace(twoPolicies, "kind: NetworkPolicy", "kind: Service", 1),
		"an old version":   strings.Replace(twoPolicies, "networking.k8s.io/v1", "extensions/v1beta1", 1),
		"no name":          strings.Replace(twoPolicies, "name: deny-all", "labels: {}", 1),
		"not YAML":         "{[",
		"nothing":          "---\n",
		"a string port":    strings.Replace(twoPolicies, "port: 80,", "port: \"80x\",", 1),
	}
	for what, doc := range bad {
		if got, err := decodePolicies([]byte(doc)); err == nil {
			if what == "a string port" { // a named port, refused by ValidatePolicy
				if err := registry.ValidatePolicy(withNS(got[1])); err != nil {
					continue
				}
			}
			t.Errorf("%s: decoded %+v", what, got)
		}
	}
}

func withNS(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	if np.Namespace == "" {
		np.Namespace = "x"
	}
	return np
}

func TestReadPoliciesNamespace(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(f, []byte(twoPolicies), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readPolicies(f, ""); err == nil {
		t.Error("a policy without a namespace was taken without -n")
	}
	if _, err := readPolicies(f, "beta"); err == nil {
		t.Error("a policy of namespace alpha was taken with -n beta")
	}
	got, err := readPolicies(f, "alpha")
	if err != nil || got[0].Namespace != "alpha" || got[1].Namespace != "alpha" {
		t.Errorf("-n alpha: %+v, %v", got, err)
	}
}

func TestEditPorts(t *testing.T) {
	p, err := editPorts(nil, []string{"http=tcp/8080", "dns=udp/53"})
	if err != nil || len(p) != 2 || p[0].Name != "dns" || p[0].Protocol != "UDP" || p[1].Port != 8080 {
		t.Fatalf("%+v, %v", p, err)
	}
	p, err = editPorts(p, []string{"dns-", "http=sctp/9"})
	if err != nil || len(p) != 1 || p[0].Protocol != "SCTP" || p[0].Port != 9 {
		t.Errorf("%+v, %v", p, err)
	}
	for _, e := range []string{"http", "http=tcp", "http=tcp/0", "http=icmp/1", "http=tcp/70000"} {
		if _, err := editPorts(nil, []string{e}); err == nil {
			t.Errorf("%q accepted", e)
		}
	}
}

func FuzzDecodePolicies(f *testing.F) {
	f.Add([]byte(twoPolicies))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[null]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodePolicies(b)
		if err == nil && len(got) == 0 {
			t.Error("no policies and no error")
		}
		for _, np := range got {
			if np == nil || np.Name == "" {
				t.Errorf("decoded %+v", np)
			}
		}
	})
}

func TestReadEgressFirewalls(t *testing.T) {
	doc := `apiVersion: network.openshift.io/v1
kind: EgressNetworkPolicy
metadata: {name: default, namespace: alpha}
spec:
  egress:
  - {type: Allow, to: {dnsName: www.example.com}}
  - {type: Deny, to: {cidrSelector: 0.0.0.0/0}}
`
	f := filepath.Join(t.TempDir(), "e.yaml")
	write := func(s string) {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(doc)
	got, err := readEgressFirewalls(f, "")
	if err != nil || len(got) != 1 || len(got[0].Spec.Egress) != 2 || got[0].Spec.Egress[0].To.DNSName != "www.example.com" {
		t.Fatalf("%+v, %v", got, err)
	}
	for what, bad := range map[string]string{
		"a rule type":     strings.Replace(doc, "type: Allow", "type: Maybe", 1),
		"both peers":      strings.Replace(doc, "{dnsName: www.example.com}", "{dnsName: www.example.com, cidrSelector: 10.0.0.0/8}", 1),
		"a bad CIDR":      strings.Replace(doc, "0.0.0.0/0", "0.0.0.0/33", 1),
		"a field typo":    strings.Replace(doc, "egress:", "egres:", 1),
		"a NetworkPolicy": strings.Replace(doc, "kind: EgressNetworkPolicy", "kind: NetworkPolicy", 1),
	} {
		write(bad)
		if _, err := readEgressFirewalls(f, ""); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}
