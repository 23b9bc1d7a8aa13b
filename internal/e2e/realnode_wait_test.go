package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
)

// waitRealPod waits until pod ns/name on the real-node cluster c runs, is
// ready and has its address, polling the API server (testutil.Poll) until
// ctx's deadline (5 minutes without one), and returns it. If the pod does
// not get there it fails the test with `kubectl describe pod`.
func waitRealPod(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	timeout := 5 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	var pod *corev1.Pod
	err := testutil.Poll(timeout, fmt.Sprintf("pod %s/%s running and ready", ns, name), func() (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning && podReady(p) && p.Status.PodIP != "",
			fmt.Errorf("phase %s, ready %v, address %q", p.Status.Phase, podReady(p), p.Status.PodIP)
	})
	if err != nil {
		out, _ := c.Kubectl(context.Background(), "describe", "pod", "-n", ns, name)
		t.Fatalf("%v\n%s", err, out)
	}
	return pod
}
