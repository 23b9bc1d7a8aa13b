package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply applies the YAML manifests in files (several documents each) with
// server-side apply as the admin, in order, with strict field validation
// (an unknown field is refused). An object whose kind is not
// served yet (a custom resource right after its CRD) is retried until ctx
// is done.
func (s *Server) Apply(ctx context.Context, files ...string) error {
	cfg := s.Admin()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				f.Close()
				return fmt.Errorf("kubetest: %s: %w", file, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if err := applyOne(ctx, mapper, dyn, &u); err != nil {
				f.Close()
				return fmt.Errorf("kubetest: %s: %s %s: %w", file, u.GetKind(), u.GetName(), err)
			}
		}
		f.Close()
	}
	return nil
}

func applyOne(ctx context.Context, mapper *restmapper.DeferredDiscoveryRESTMapper, dyn dynamic.Interface, u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	for {
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				r = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
			}
			// Strict: an unknown or duplicate field is an error, as
			// kubectl apply makes it, not a warning.
			var data []byte
			if data, err = u.MarshalJSON(); err != nil {
				return err
			}
			force := true
			_, err = r.Patch(ctx, u.GetName(), types.ApplyPatchType, data,
				metav1.PatchOptions{FieldManager: "kubetest", Force: &force, FieldValidation: "Strict"})
			if err == nil || !apierrors.IsNotFound(err) {
				return err
			}
		} else if !meta.IsNoMatchError(err) {
			return err
		}
		mapper.Reset() // not served yet: discover again
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ServiceAccountConfig returns a client configuration that authenticates
// as the ServiceAccount namespace/name (created if missing) with a token
// from the TokenRequest API, valid for an hour.
func (s *Server) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	kc, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := kc.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	hour := int64(3600)
	tr, err := kc.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("kubetest: token for %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(s.Admin())
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}
