package node_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
)

// serviceRuleText returns the text of the table's rules of the service
// with ClusterIP ip.
func serviceRuleText(table *flowtable.Table, ip netip.Addr) string {
	var out []string
	for _, r := range table.Rules() {
		if r.Cookie == sdn.ServiceCookie(ip) {
			out = append(out, r.String())
		}
	}
	return strings.Join(out, "\n")
}

func TestServicesFollowProjects(t *testing.T) {
	p, table, _ := newProgram(t, map[string]uint32{"alpha": 10})
	web := sdn.Service{Namespace: "alpha", Name: "web", ClusterIP: netip.MustParseAddr("172.30.0.10"),
		Ports: []sdn.ServicePort{{Protocol: sdn.ProtoTCP, Port: 80}}}
	db := sdn.Service{Namespace: "beta", Name: "db", ClusterIP: netip.MustParseAddr("172.30.0.11"),
		Ports: []sdn.ServicePort{{Protocol: sdn.ProtoTCP, Port: 5432}}}
	for _, s := range []sdn.Service{web, db} {
		if err := p.SetService(s); err != nil {
			t.Fatal(err)
		}
	}
	if got := serviceRuleText(table, web.ClusterIP); !strings.Contains(got, "reg0=10,") {
		t.Errorf("alpha's service: %q, want reg0=10", got)
	}
	// beta has no VNID yet: no rules, so table 60 drops its service.
	if got := serviceRuleText(table, db.ClusterIP); got != "" {
		t.Errorf("service of a project without a VNID has rules: %q", got)
	}
	if _, err := p.SetProjectVNID("beta", 11); err != nil {
		t.Fatal(err)
	}
	if got := serviceRuleText(table, db.ClusterIP); !strings.Contains(got, "reg0=11,") {
		t.Errorf("beta's service after its VNID: %q", got)
	}
	// oc adm pod-network join-projects --to=alpha beta: beta's service follows.
	if _, err := p.SetProjectVNID("beta", 10); err != nil {
		t.Fatal(err)
	}
	if got := serviceRuleText(table, db.ClusterIP); !strings.Contains(got, "reg0=10,") || strings.Contains(got, "reg0=11") {
		t.Errorf("beta's service after joining alpha: %q", got)
	}
	// make-projects-global: one rule without a VNID match.
	if _, err := p.SetProjectVNID("beta", 0); err != nil {
		t.Fatal(err)
	}
	if got := serviceRuleText(table, db.ClusterIP); got == "" || strings.Contains(got, "reg0") {
		t.Errorf("global project's service: %q, want a rule for every pod", got)
	}
	// A new ClusterIP replaces the old rules.
	moved := web
	moved.ClusterIP = netip.MustParseAddr("172.30.0.20")
	if err := p.SetService(moved); err != nil {
		t.Fatal(err)
	}
	if got := serviceRuleText(table, web.ClusterIP); got != "" {
		t.Errorf("old ClusterIP still has rules: %q", got)
	}
	if got := serviceRuleText(table, moved.ClusterIP); !strings.Contains(got, "nw_dst=172.30.0.20") {
		t.Errorf("new ClusterIP: %q", got)
	}
	if err := p.DeleteService("alpha", "web"); err != nil {
		t.Fatal(err)
	}
	if got := serviceRuleText(table, moved.ClusterIP); got != "" {
		t.Errorf("deleted service still has rules: %q", got)
	}
	if err := p.DeleteService("alpha", "nothing"); err != nil {
		t.Errorf("deleting an unknown service: %v", err)
	}
	// Refused: a ClusterIP outside the service network changes nothing.
	bad := db
	bad.ClusterIP = netip.MustParseAddr("10.0.0.1")
	if err := p.SetService(bad); err == nil {
		t.Error("service outside the service network accepted")
	}
	if got := serviceRuleText(table, db.ClusterIP); got == "" {
		t.Error("a refused update removed the service's rules")
	}
}
