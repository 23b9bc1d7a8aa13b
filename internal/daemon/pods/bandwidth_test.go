package pods

import (
	"math"
	"testing"

	"github.com/gvswitch/gvs/cniplugin"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// TestLimitOf: CNI bandwidth arguments in bits become the switch's bytes;
// the runtimes' "no limit" bursts become the default burst.
func TestLimitOf(t *testing.T) {
	for _, c := range []struct {
		in   *cniplugin.Bandwidth
		want vswitch.Limit
	}{
		{nil, vswitch.Limit{}},
		{&cniplugin.Bandwidth{IngressRate: 50e6, IngressBurst: 800_000, EgressRate: 8e6},
			vswitch.Limit{Ingress: vswitch.Bandwidth{Rate: 6_250_000, Burst: 100_000}, Egress: vswitch.Bandwidth{Rate: 1e6}}},
		{&cniplugin.Bandwidth{EgressRate: 10e6, EgressBurst: math.MaxInt32}, vswitch.Limit{Egress: vswitch.Bandwidth{Rate: 1_250_000}}},
		{&cniplugin.Bandwidth{IngressRate: 10e6, IngressBurst: math.MaxUint32}, vswitch.Limit{Ingress: vswitch.Bandwidth{Rate: 1_250_000}}},
	} {
		if got := LimitOf(c.in); got != c.want {
			t.Errorf("LimitOf(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if l := limitOf(Spec{Limit: vswitch.Limit{Egress: vswitch.Bandwidth{Rate: 1e6}}}); l == nil ||
		l.Egress.Burst != vswitch.DefaultPoliceBurst(1e6) || l.Ingress != (vswitch.Bandwidth{}) {
		t.Errorf("limitOf: %+v, want the egress default burst", l)
	}
}
