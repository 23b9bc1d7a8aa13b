package kubesource

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// FollowConfigMap calls fn with the data of the ConfigMap namespace/name
// each time it is created or changed, and with nil when it is deleted,
// until ctx ends; it returns once the watch is started. It asks for that
// one object (a field selector on metadata.name), so the node's account
// needs get, list and watch on that resource name only (deploy/rbac.yaml,
// Role gvs-node-ipfix). fn runs on the informer's goroutine, one call at
// a time; while the API server is unreachable the informer retries and fn
// is not called.
func FollowConfigMap(ctx context.Context, rc *rest.Config, namespace, name string, fn func(data map[string]string)) error {
	if namespace == "" || name == "" {
		return fmt.Errorf("kubesource: ConfigMap %q/%q: namespace and name are required", namespace, name)
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	fac := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "metadata.name=" + name }))
	inf := fac.Core().V1().ConfigMaps().Informer()
	if _, err := inf.AddEventHandler(events(func(o any, deleted bool) {
		cm, ok := unwrap(o).(*corev1.ConfigMap)
		if !ok || cm.Name != name {
			return
		}
		if deleted {
			fn(nil)
			return
		}
		data := cm.Data
		if data == nil {
			data = map[string]string{} // present, but empty: not the same as deleted
		}
		fn(data)
	})); err != nil {
		return err
	}
	fac.Start(ctx.Done())
	return nil
}
