package sdn

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestServiceRules(t *testing.T) {
	mt := sampleNode(ModeMultitenant)
	svc := sampleServices()[0]
	rules, err := ServiceRules(mt, svc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"table=60, priority=100, cookie=0x7ac1e000a, tcp, reg0=10, nw_dst=172.30.0.10, tp_dst=80, actions=output:2",
		"table=60, priority=100, cookie=0x7ac1e000a, sctp, reg0=10, nw_dst=172.30.0.10, tp_dst=80, actions=output:2",
	}
	if got := Text(rules); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, r := range rules {
		if r.Cookie != ServiceCookie(svc.ClusterIP) {
			t.Errorf("cookie %#x", r.Cookie)
		}
	}
	for _, mode := range []Mode{ModeSubnet} {
		if r, err := ServiceRules(sampleNode(mode), svc); err != nil || r != nil {
			t.Errorf("%s: %v, %v; want no rules", mode, r, err)
		}
	}
	for name, bad := range map[string]Service{
		"outside the service network": {ClusterIP: netip.MustParseAddr("10.128.0.5"), Ports: []ServicePort{{ProtoTCP, 80}}},
		"IPv6":                        {ClusterIP: netip.MustParseAddr("fd00::1"), Ports: []ServicePort{{ProtoTCP, 80}}},
		"ICMP":                        {ClusterIP: ipSvcWeb, Ports: []ServicePort{{1, 80}}},
		"port 0":                      {ClusterIP: ipSvcWeb, Ports: []ServicePort{{ProtoUDP, 0}}},
		"VNID out of range":           {ClusterIP: ipSvcWeb, VNID: MaxVNID + 1, Ports: []ServicePort{{ProtoUDP, 53}}},
	} {
		if _, err := ServiceRules(mt, bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: err %v, want ErrInvalidConfig", name, err)
		}
	}
}
