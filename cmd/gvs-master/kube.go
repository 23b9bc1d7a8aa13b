package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube"
	"github.com/gvswitch/gvs/sdn/registry"
)

// kubeFlags are the flags of the Kubernetes mode: with --kubeconfig or
// --in-cluster gvs-master follows the API server instead of etcd.
type kubeFlags struct {
	kubeconfig     *string
	inCluster      *bool
	leaseNamespace *string
	identity       *string
	mtu            *uint
}

func addKubeFlags(fs *flag.FlagSet) *kubeFlags {
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = kube.DefaultLeaseNamespace
	}
	return &kubeFlags{
		kubeconfig:     fs.String("kubeconfig", "", "Kubernetes mode: follow the API server of this kubeconfig (NetNamespaces, HostSubnets, ClusterNetwork) instead of etcd"),
		inCluster:      fs.Bool("in-cluster", false, "Kubernetes mode with the pod's ServiceAccount (in a Deployment)"),
		leaseNamespace: fs.String("lease-namespace", ns, "Kubernetes mode: namespace of the leader-election Lease "+kube.DefaultLeaseName+" ($POD_NAMESPACE)"),
		identity:       fs.String("identity", "", "Kubernetes mode: this replica's name in the Lease (default: host name and a random suffix)"),
		mtu:            fs.Uint("mtu", 0, "Kubernetes mode: overlay MTU published in the ClusterNetwork (default: unset)"),
	}
}

func (k *kubeFlags) enabled() bool { return *k.kubeconfig != "" || *k.inCluster }

// runKube runs gvs-master in Kubernetes mode until ctx is done.
func runKube(ctx context.Context, log *slog.Logger, c registry.Config, k *kubeFlags) error {
	svc, err := netip.ParsePrefix(c.ServiceNetwork)
	if err != nil {
		return fmt.Errorf("service network: %w", err)
	}
	mode, err := sdn.ParseMode(c.Mode)
	if err != nil {
		return err
	}
	rc, err := kube.RESTConfig(*k.kubeconfig)
	if err != nil {
		return err
	}
	m, err := kube.NewMaster(kube.MasterConfig{
		Network: kube.Network{ClusterNetworks: c.ClusterNetworks, ServiceNetwork: svc, Mode: mode,
			VXLANPort: c.VXLANPort, MTU: uint32(*k.mtu), GlobalProjects: c.GlobalProjects},
		REST:           rc,
		LeaseNamespace: *k.leaseNamespace,
		Identity:       *k.identity,
		Log:            log,
	})
	if err != nil {
		return err
	}
	log.Info("gvs-master running in Kubernetes mode", "api", rc.Host, "identity", m.Identity(), "networks", c.ClusterNetworks, "mode", mode.Short())
	return m.Run(ctx)
}
