package kubetest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestServer starts the API server and checks the admin's and a
// ServiceAccount's access: the admin lists Nodes; the ServiceAccount,
// with no role bound, is refused (403) by RBAC; after a restart of the
// API server the data is still there.
func TestServer(t *testing.T) {
	s := New(t, "srv")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, nsObj("kept"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.ServiceAccountConfig(ctx, "default", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("ServiceAccount without a role listing nodes: %v, want 403 Forbidden", err)
	}
	if err := s.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := s.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace lost across an API server restart: %v", err)
	}
}

func nsObj(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
