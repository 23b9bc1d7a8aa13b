package daemon

import (
	"fmt"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/kube"
)

// kubeSource is a Kubernetes API server as the node follows it
// (internal/daemon/kubesource). In this mode gvs-master gives every
// Namespace its NetNamespace; a pod of a Namespace without one waits for
// it (vnidWait) and fails closed.
func (f *follower) kubeSource() (source.ControlPlane, error) {
	path := f.cfg.Kubeconfig
	if path == InCluster {
		path = ""
	}
	rc, err := kube.RESTConfig(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return kubesource.New(kubesource.Config{REST: rc, Node: f.cfg.NodeName,
		Logger: f.log.With("component", "kubernetes")}), nil
}
