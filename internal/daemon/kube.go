package daemon

import (
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/kube"
)

// kubeSource is a Kubernetes API server as the node follows it
// (internal/daemon/kubesource). In this mode gvs-master gives every
// Namespace its NetNamespace; a pod of a Namespace without one waits for
// it (vnidWait) and fails closed.
func (f *follower) kubeSource() (source.ControlPlane, error) {
	rc, err := f.cfg.restConfig()
	if err != nil {
		return nil, err
	}
	return kubesource.New(kubesource.Config{REST: rc, Node: f.cfg.NodeName,
		Logger: f.log.With("component", "kubernetes")}), nil
}

// restConfig reaches the API server of Kubeconfig.
func (c *Config) restConfig() (*rest.Config, error) {
	path := c.Kubeconfig
	if path == InCluster {
		path = ""
	}
	rc, err := kube.RESTConfig(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}
