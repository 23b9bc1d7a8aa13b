package cniplugin

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
)

// Bandwidth is the CNI "bandwidth" capability's runtime arguments
// (runtimeConfig.bandwidth), as the reference bandwidth plug-in
// (containernetworking/plugins, plugins/meta/bandwidth) defines them:
// rates in bits per second, bursts in bits. The kubelet's runtime
// (containerd, CRI-O) fills them from a pod's kubernetes.io/ingress-bandwidth
// and kubernetes.io/egress-bandwidth annotations when the network
// configuration declares the capability ("capabilities": {"bandwidth":
// true}), which the one gvs-switchd installs does. Ingress is what the pod
// receives, egress what it sends. A zero rate is no limit; a zero burst
// with a rate is gvs's default burst (vswitch.DefaultBurst), where the
// reference plug-in refuses it.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// Limits of the values Validate accepts: rates from 8 bit/s (a byte a
// second) to 2⁵³ bit/s, bursts up to 2³⁵ bits (4 GiB), what the switch can
// hold (vswitch.MaxRate, vswitch.MaxBurst).
const (
	minRateBits  = 8
	maxRateBits  = 1 << 53
	maxBurstBits = 1 << 35
)

// IsZero reports whether b limits nothing.
func (b *Bandwidth) IsZero() bool { return b == nil || b.IngressRate == 0 && b.EgressRate == 0 }

// Validate reports, as a CNI error with code 7 (invalid network
// configuration), a value the switch cannot apply.
func (b *Bandwidth) Validate() error {
	if b == nil {
		return nil
	}
	for _, d := range []struct {
		dir         string
		rate, burst uint64
	}{{"ingress", b.IngressRate, b.IngressBurst}, {"egress", b.EgressRate, b.EgressBurst}} {
		var why string
		switch {
		case d.rate == 0 && d.burst != 0:
			why = fmt.Sprintf("%sBurst %d without %sRate", d.dir, d.burst, d.dir)
		case d.rate != 0 && d.rate < minRateBits:
			why = fmt.Sprintf("%sRate %d bit/s: less than %d bit/s", d.dir, d.rate, minRateBits)
		case d.rate > maxRateBits:
			why = fmt.Sprintf("%sRate %d bit/s: more than %d bit/s", d.dir, d.rate, uint64(maxRateBits))
		case d.burst > maxBurstBits:
			why = fmt.Sprintf("%sBurst %d bits: more than %d bits (4 GiB)", d.dir, d.burst, uint64(maxBurstBits))
		}
		if why != "" {
			return types.NewError(types.ErrInvalidNetworkConfig, "invalid bandwidth limit", "runtimeConfig.bandwidth: "+why)
		}
	}
	return nil
}
