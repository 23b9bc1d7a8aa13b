package registry

import (
	"net/netip"
	"testing"
)

func FuzzParseClaimKey(f *testing.F) {
	for _, s := range []string{ClaimsPrefix + "10.128.0.0_23", ClaimsPrefix + "10.1.0.64_26", "10.0.0.0_8", ClaimsPrefix + "x_y", ClaimsPrefix + "::1_64", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		p, err := ParseClaimKey(key)
		if err != nil {
			return
		}
		q, err := ParseClaimKey(ClaimKey(p))
		if err != nil || q != p {
			t.Fatalf("%q → %v → %q → %v, %v", key, p, ClaimKey(p), q, err)
		}
	})
}

func TestKeys(t *testing.T) {
	p := netip.MustParsePrefix("10.129.2.0/23")
	if k := ClaimKey(p); k != "/gvs/subnet-claims/10.129.2.0_23" {
		t.Errorf("ClaimKey = %s", k)
	}
	if VNIDKey(4242) != "/gvs/vnids/4242" || ProjectKey("a") != "/gvs/projects/a" || SubnetKey("n1") != "/gvs/subnets/n1" || NodeKey("n1") != "/gvs/nodes/n1" {
		t.Error("key layout changed; update docs/control-plane.md")
	}
}
