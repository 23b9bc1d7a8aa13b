package e2e

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/daemon/kubesource"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestBandwidthAnnotationsKube: in Kubernetes mode a pod whose runtime
// passes no bandwidth arguments gets its limit from its Pod object's
// kubernetes.io/egress-bandwidth and ingress-bandwidth annotations, as
// OpenShift SDN reads them (iperf3, ±10 %); when the runtime passes
// arguments too, the arguments win; an annotation that is not a rate fails
// ADD with code 7 and leaves nothing.
func TestBandwidthAnnotationsKube(t *testing.T) {
	kubetest.Require(t)
	c := up(t, "e5xb", cluster.Spec{
		Lab:          lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default"}},
		Mode:         "multitenant",
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true,
	})
	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	// pod creates the Pod object a scheduler would have bound to node 0.
	pod := func(name string, annotations map[string]string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: c.Nodes[0].Name, Containers: []corev1.Container{{Name: "main", Image: "none"}}}}
		if _, err := kc.CoreV1().Pods("default").Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
	}
	rate := fmt.Sprintf("%dM", int(bwLimit/1e6))
	pod("an-eg", map[string]string{kubesource.EgressBandwidthAnnotation: rate})
	pod("an-in", map[string]string{kubesource.IngressBandwidthAnnotation: rate})
	pod("an-both", map[string]string{kubesource.EgressBandwidthAnnotation: "10M"})
	pod("an-bad", map[string]string{kubesource.EgressBandwidthAnnotation: "fast"})

	list, cni := bandwidthCNI(t, c)
	add := bandwidthAdd(t, c, list, cni)
	egNS, _, err := add("an-eg", nil)
	if err != nil {
		t.Fatalf("ADD of a pod with an egress annotation: %v", err)
	}
	inNS, _, err := add("an-in", nil)
	if err != nil {
		t.Fatalf("ADD of a pod with an ingress annotation: %v", err)
	}
	bothNS, _, err := add("an-both", map[string]any{"egressRate": bwLimit})
	if err != nil {
		t.Fatalf("ADD of a pod with an annotation and arguments: %v", err)
	}
	before, leases := show(t, c), leaseFiles(t, c)
	if _, _, err := add("an-bad", nil); cniCode(err) != 7 || !strings.Contains(err.Error(), "bandwidth") {
		t.Errorf("ADD of a pod with egress-bandwidth=fast: %v, want code 7 naming the bandwidth", err)
	}
	if s := show(t, c); s != before || leaseFiles(t, c) != leases {
		t.Errorf("a refused ADD left something: %+v, %d leases (before %+v, %d)", s, leaseFiles(t, c), before, leases)
	}

	measure, within := bandwidthMeter(t, c, c.Nodes[0].Pods[1])
	within("egress annotation: pod sending", measure(egNS, false))
	within("ingress annotation: pod receiving", measure(inNS, true))
	within("annotation 10M, arguments "+rate+": pod sending (the arguments win)", measure(bothNS, false))
}
