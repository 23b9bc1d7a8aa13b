package source

import (
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/sdn"
)

// Discard is a Sink that takes everything and keeps nothing. A sink that
// cares about part of the cluster embeds it and defines the methods it
// records; the sources' tests build their recorders that way.
type Discard struct{}

var _ Sink = Discard{}

// AddRemote forgets the node.
func (Discard) AddRemote(sdn.RemoteNode) error { return nil }

// RemoveRemote forgets the removal.
func (Discard) RemoveRemote(netip.Addr) error { return nil }

// SetProjectVNID forgets the VNID.
func (Discard) SetProjectVNID(string, uint32) error { return nil }

// ChangeSubnet forgets the subnet.
func (Discard) ChangeSubnet(netip.Prefix) error { return nil }

// SetNamespaceLabels forgets the labels.
func (Discard) SetNamespaceLabels(string, map[string]string) error { return nil }

// SetPod forgets the pod.
func (Discard) SetPod(Pod) error { return nil }

// DeletePod forgets the deletion.
func (Discard) DeletePod(string, string) error { return nil }

// SetPolicy forgets the policy.
func (Discard) SetPolicy(*networkingv1.NetworkPolicy) error { return nil }

// DeletePolicy forgets the deletion.
func (Discard) DeletePolicy(string, string) error { return nil }

// SetService forgets the service.
func (Discard) SetService(sdn.Service) error { return nil }

// DeleteService forgets the deletion.
func (Discard) DeleteService(string, string) error { return nil }

// SetEgressFirewall forgets the firewall.
func (Discard) SetEgressFirewall(string, string, []EgressRule) error { return nil }

// DeleteEgressFirewall forgets the deletion.
func (Discard) DeleteEgressFirewall(string, string) error { return nil }

// SetMulticast forgets the opt-in.
func (Discard) SetMulticast(string, bool) error { return nil }

// SetEgressIPs forgets the egress IPs.
func (Discard) SetEgressIPs(string, []sdn.EgressIPHost) error { return nil }
