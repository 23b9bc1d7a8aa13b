package kubesource

import (
	"testing"

	"github.com/gvswitch/gvs/cniplugin"
)

// TestBandwidthOf: the annotations as the kubelet reads them (quantities
// in bit/s between 1k and 1P), each direction on its own; anything else is
// refused, not ignored or clamped.
func TestBandwidthOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want *cniplugin.Bandwidth
		err  bool
	}{
		{"none", nil, nil, false},
		{"other annotations", map[string]string{"a": "b"}, nil, false},
		{"egress", map[string]string{EgressBandwidthAnnotation: "10M"}, &cniplugin.Bandwidth{EgressRate: 10e6}, false},
		{"ingress", map[string]string{IngressBandwidthAnnotation: "1500k"}, &cniplugin.Bandwidth{IngressRate: 1.5e6}, false},
		{"both", map[string]string{IngressBandwidthAnnotation: "1G", EgressBandwidthAnnotation: "2Mi"},
			&cniplugin.Bandwidth{IngressRate: 1e9, EgressRate: 2 << 20}, false},
		{"bounds", map[string]string{IngressBandwidthAnnotation: "1k", EgressBandwidthAnnotation: "1P"},
			&cniplugin.Bandwidth{IngressRate: 1e3, EgressRate: 1e15}, false},
		{"not a quantity", map[string]string{EgressBandwidthAnnotation: "fast"}, nil, true},
		{"too small", map[string]string{IngressBandwidthAnnotation: "999"}, nil, true},
		{"too large", map[string]string{EgressBandwidthAnnotation: "2P"}, nil, true},
		{"negative", map[string]string{EgressBandwidthAnnotation: "-10M"}, nil, true},
	} {
		got, err := BandwidthOf(tc.ann)
		switch {
		case tc.err != (err != nil):
			t.Errorf("%s: error %v, want error %v", tc.name, err, tc.err)
		case (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want:
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
