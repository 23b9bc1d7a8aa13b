package kubesource

import (
	"errors"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

func TestRemoteOf(t *testing.T) {
	hs := func(a map[string]string) *networkv1.HostSubnet {
		return &networkv1.HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: "f5", Annotations: a}, Host: "f5", HostIP: "192.168.0.50", Subnet: "10.130.0.0/23"}
	}
	base := sdn.RemoteNode{Name: "f5", IP: netip.MustParseAddr("192.168.0.50"), Subnet: netip.MustParsePrefix("10.130.0.0/23")}
	if rn, err := remoteOf(hs(nil)); err != nil || rn != base {
		t.Errorf("no annotation: %+v, %v; want a node %+v", rn, err, base)
	}
	fixed := base
	fixed.FixedVNID, fixed.HasFixedVNID = 12, true
	if rn, err := remoteOf(hs(map[string]string{networkv1.FixedVNIDHostAnnotation: "12"})); err != nil || rn != fixed {
		t.Errorf("fixed-vnid-host=12: %+v, %v; want %+v", rn, err, fixed)
	}
	global := base
	global.HasFixedVNID = true
	if rn, err := remoteOf(hs(map[string]string{networkv1.FixedVNIDHostAnnotation: "0"})); err != nil || rn != global {
		t.Errorf("fixed-vnid-host=0: %+v, %v; want %+v", rn, err, global)
	}
	if _, err := remoteOf(hs(map[string]string{networkv1.FixedVNIDHostAnnotation: "x"})); !errors.Is(err, networkv1.ErrInvalidFixedVNID) {
		t.Errorf("fixed-vnid-host=x: %v; want ErrInvalidFixedVNID (refused, not a node)", err)
	}
}
