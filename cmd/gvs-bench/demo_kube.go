package main

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// demoKubeRBAC shows what a stolen node credential can do in Kubernetes
// mode: with gvs-switchd's ServiceAccount token (gvs-node, deploy/rbac.yaml)
// it reads the NetNamespaces but cannot make project beta global. It
// returns what went wrong.
func demoKubeRBAC(ctx context.Context, c *cluster.Cluster, step func(string)) []string {
	step("control plane: with a node's ServiceAccount token (gvs-node), make project beta global (netid 0)")
	cfg, err := c.Kube.ServiceAccountConfig(ctx, "gvs", "gvs-node")
	if err != nil {
		return []string{err.Error()}
	}
	net, err := networkv1.NewForConfig(cfg)
	if err != nil {
		return []string{err.Error()}
	}
	nn, err := net.NetNamespaces().Get(ctx, "beta")
	if err != nil {
		return []string{"the node's token cannot read NetNamespaces: " + err.Error()}
	}
	fmt.Printf("    read: NetNamespace beta has netid %d\n", nn.NetID)
	nn.NetID = 0
	_, err = net.NetNamespaces().Update(ctx, nn)
	switch {
	case err == nil:
		return []string{"a node's token made project beta global"}
	case apierrors.IsForbidden(err):
		fmt.Println("    refused (403): gvs-node may only read network objects; only gvs-master and admins change netids")
		return nil
	default:
		return []string{"changing a NetNamespace failed, but not as forbidden: " + err.Error()}
	}
}
