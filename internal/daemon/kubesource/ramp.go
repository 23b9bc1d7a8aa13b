package kubesource

import (
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// remoteOf returns the remote node another node's (or a host's that is not
// a node) HostSubnet describes. A fixed-vnid-host annotation makes it a
// host with a fixed VNID (sdn.RampRules); an unparsable one is an error:
// the HostSubnet is refused rather than the host treated as a node, which
// would let it speak as any project.
func remoteOf(hs *networkv1.HostSubnet) (sdn.RemoteNode, error) {
	ip, sub, err := parseHostSubnet(hs)
	if err != nil {
		return sdn.RemoteNode{}, err
	}
	v, fixed, err := networkv1.FixedVNID(hs)
	if err != nil {
		return sdn.RemoteNode{}, err
	}
	return sdn.RemoteNode{Name: hs.Name, IP: ip, Subnet: sub, FixedVNID: v, HasFixedVNID: fixed}, nil
}
