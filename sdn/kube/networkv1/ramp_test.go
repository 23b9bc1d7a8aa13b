package networkv1

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFixedVNID(t *testing.T) {
	for _, tc := range []struct {
		value       *string
		vnid        uint32
		fixed, fail bool
	}{
		{nil, 0, false, false},
		{fixedValue("0"), 0, true, false},
		{fixedValue("12"), 12, true, false},
		{fixedValue("16777215"), 16777215, true, false},
		{fixedValue("16777216"), 0, true, true},
		{fixedValue("-1"), 0, true, true},
		{fixedValue(""), 0, true, true},
		{fixedValue("0x10"), 0, true, true},
		{fixedValue(" 12"), 0, true, true},
	} {
		hs := &HostSubnet{ObjectMeta: metav1.ObjectMeta{Name: "f5", Annotations: map[string]string{}}}
		if tc.value != nil {
			hs.Annotations[FixedVNIDHostAnnotation] = *tc.value
		}
		v, fixed, err := FixedVNID(hs)
		if v != tc.vnid || fixed != tc.fixed || (err != nil) != tc.fail || (err != nil && !errors.Is(err, ErrInvalidFixedVNID)) {
			t.Errorf("%v: FixedVNID = %d, %v, %v", tc.value, v, fixed, err)
		}
	}
}

func TestWantsSubnet(t *testing.T) {
	a := map[string]string{AssignSubnetAnnotation: "true"}
	for _, tc := range []struct {
		hs   HostSubnet
		want bool
	}{
		{HostSubnet{ObjectMeta: metav1.ObjectMeta{Annotations: a}}, true},
		{HostSubnet{ObjectMeta: metav1.ObjectMeta{Annotations: a}, Subnet: "10.128.2.0/23"}, false},
		{HostSubnet{}, false},
	} {
		if got := WantsSubnet(&tc.hs); got != tc.want {
			t.Errorf("WantsSubnet(%+v) = %v", tc.hs, got)
		}
	}
}

func fixedValue(s string) *string { return &s }
