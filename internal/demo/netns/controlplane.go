package netns

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// kubeRBAC shows what a stolen node credential can do in Kubernetes mode:
// with gvs-switchd's ServiceAccount token (gvs-node, deploy/rbac.yaml) it
// reads the NetNamespaces but cannot make project beta global.
func (r *run) kubeRBAC(ctx context.Context) {
	r.step("control plane: with a node's ServiceAccount token (gvs-node), make project beta global (netid 0)")
	cfg, err := r.c.Kube.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		r.fail(err.Error())
		return
	}
	net, err := networkv1.NewForConfig(cfg)
	if err != nil {
		r.fail(err.Error())
		return
	}
	nn, err := net.NetNamespaces().Get(ctx, "beta")
	if err != nil {
		r.fail("the node's token cannot read NetNamespaces: " + err.Error())
		return
	}
	r.printf("    read: NetNamespace beta has netid %d\n", nn.NetID)
	nn.NetID = 0
	_, err = net.NetNamespaces().Update(ctx, nn)
	switch {
	case err == nil:
		r.fail("a node's token made project beta global")
	case apierrors.IsForbidden(err):
		r.res.ControlPlaneRefused = true
		r.printf("    refused (403): gvs-node may only read network objects; only gvs-master and admins change netids\n")
	default:
		r.fail("changing a NetNamespace failed, but not as forbidden: " + err.Error())
	}
}
