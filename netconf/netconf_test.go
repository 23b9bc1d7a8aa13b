package netconf

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestPodMAC(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want string
	}{
		{"10.128.2.7", "0a:58:0a:80:02:07"},
		{"::ffff:10.1.2.3", "0a:58:0a:01:02:03"},
		{"fd00::1", ""},
	} {
		got := PodMAC(netip.MustParseAddr(tc.ip))
		if got.String() != tc.want {
			t.Errorf("PodMAC(%s) = %q, want %q", tc.ip, got, tc.want)
		}
	}
}

func TestRoute(t *testing.T) {
	for _, tc := range []struct {
		name  string
		r     Route
		dst   string
		gw    string
		scope netlink.Scope
	}{
		{"default via gw", Route{Gw: netip.MustParseAddr("10.0.0.1")}, "0.0.0.0/0", "10.0.0.1", netlink.SCOPE_UNIVERSE},
		{"on-link", Route{Dst: netip.MustParsePrefix("10.1.2.3/16")}, "10.1.0.0/16", "<nil>", netlink.SCOPE_LINK},
		{"v6 default", Route{Gw: netip.MustParseAddr("fd00::1")}, "::/0", "fd00::1", netlink.SCOPE_UNIVERSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := route(7, tc.r)
			if nr.LinkIndex != 7 || nr.Dst.String() != tc.dst || nr.Gw.String() != tc.gw || nr.Scope != tc.scope {
				t.Errorf("route = idx %d dst %s gw %s scope %v, want dst %s gw %s scope %v",
					nr.LinkIndex, nr.Dst, nr.Gw, nr.Scope, tc.dst, tc.gw, tc.scope)
			}
		})
	}
}

func TestNsPath(t *testing.T) {
	if got := NsPath("pod1"); got != "/run/netns/pod1" {
		t.Errorf("NsPath = %q", got)
	}
	if _, err := CreateNamedNS("../x"); err == nil {
		t.Error("CreateNamedNS accepted a path")
	}
}
