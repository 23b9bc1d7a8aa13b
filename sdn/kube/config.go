// Package kube is gvs's Kubernetes mode: the API server, not gvs's own etcd
// registry, is the source of truth. Namespaces are projects; gvs-master
// gives every Namespace a NetNamespace (its VNID) and every Node a
// HostSubnet, publishes the ClusterNetwork "default", and applies the
// change-network annotation that `oc adm pod-network` writes — OpenShift
// SDN's own objects and fields (package networkv1), so OpenShift tooling
// and habits carry over. The allocation rules are sdn/master's, shared with
// the etcd mode. docs/kubernetes.md describes the mode.
package kube

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/projectname"
)

// ErrInvalidNetwork is returned (wrapped) by Network.Validate.
var ErrInvalidNetwork = errors.New("kube: invalid network configuration")

// Network is the cluster's network configuration, published as the
// ClusterNetwork "default".
type Network struct {
	// ClusterNetworks are the networks node subnets are taken from, in order.
	ClusterNetworks []master.ClusterNetwork
	// ServiceNetwork is the service CIDR.
	ServiceNetwork netip.Prefix
	// Mode is the plugin mode; "" means ModeSubnet.
	Mode sdn.Mode
	// VXLANPort is the VXLAN UDP port; 0 means sdn.VXLANPort (4789).
	VXLANPort uint16
	// MTU is the overlay MTU; 0 leaves it unset (nodes use their default).
	MTU uint32
	// GlobalProjects get VNID 0 when their Namespace appears, as
	// "default" always does.
	GlobalProjects []string
}

// Validate checks the configuration; errors wrap ErrInvalidNetwork.
func (n Network) Validate() error {
	if _, err := master.NewSubnetAllocator(n.ClusterNetworks); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidNetwork, err)
	}
	if !n.ServiceNetwork.IsValid() || !n.ServiceNetwork.Addr().Is4() {
		return fmt.Errorf("%w: service network %v is not an IPv4 CIDR", ErrInvalidNetwork, n.ServiceNetwork)
	}
	if _, err := sdn.ParseMode(string(n.Mode)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidNetwork, err)
	}
	if n.MTU != 0 && (n.MTU < 576 || n.MTU > 65536) {
		return fmt.Errorf("%w: MTU %d not in 576..65536", ErrInvalidNetwork, n.MTU)
	}
	for _, g := range n.GlobalProjects {
		if !projectname.Valid(g) {
			return fmt.Errorf("%w: global project %q is not a namespace name", ErrInvalidNetwork, g)
		}
	}
	return nil
}

// usesVNIDs reports whether the mode gives Namespaces NetNamespaces:
// multitenant and networkpolicy do (OpenShift SDN assigns VNIDs in both),
// subnet does not.
func (n Network) usesVNIDs() bool { return n.Mode.Canonical() != sdn.ModeSubnet }

// RESTConfig returns the client configuration of a kubeconfig file, or,
// with path "", the in-cluster configuration of a pod's ServiceAccount
// (KUBERNETES_SERVICE_HOST and the mounted token).
func RESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
			return nil, errors.New("kube: no kubeconfig given and not running in a pod (KUBERNETES_SERVICE_HOST unset)")
		}
		return rest.InClusterConfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kube: kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
