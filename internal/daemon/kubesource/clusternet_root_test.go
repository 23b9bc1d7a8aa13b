package kubesource_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// startClusterNetwork returns the admin's clients of srv after creating
// the default ClusterNetwork (10.128.0.0/14 in /23s, services in
// 172.30.0.0/16) with plugin and, when vxlanPort is not nil, that port.
func startClusterNetwork(t *testing.T, ctx context.Context, srv *kubetest.Server, plugin string, vxlanPort *uint32) (*networkv1.Client, *kubernetes.Clientset) {
	t.Helper()
	nc, err := networkv1.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.ClusterNetworks().Create(ctx, &networkv1.ClusterNetwork{
		ObjectMeta:     metav1.ObjectMeta{Name: networkv1.ClusterNetworkDefault},
		ServiceNetwork: "172.30.0.0/16", PluginName: plugin, VXLANPort: vxlanPort,
		ClusterNetworks: []networkv1.ClusterNetworkEntry{{CIDR: "10.128.0.0/14", HostSubnetLength: 9}},
	}); err != nil {
		t.Fatal(err)
	}
	return nc, kc
}
