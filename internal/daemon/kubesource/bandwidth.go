package kubesource

import (
	"context"
	"fmt"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/cniplugin"
)

// The pod bandwidth annotations (the kubelet's and OpenShift SDN's): rates
// in bits per second as resource quantities ("10M"), no burst.
const (
	IngressBandwidthAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressBandwidthAnnotation  = "kubernetes.io/egress-bandwidth"
)

// The range the kubelet accepts for a bandwidth annotation (1 kbit/s to
// 1 Pbit/s); a value outside it is refused, not clamped.
var (
	minBandwidth = resource.MustParse("1k")
	maxBandwidth = resource.MustParse("1P")
)

// podLookupTimeout bounds the API request for a pod the informer does not
// hold yet.
const podLookupTimeout = 5 * time.Second

// PodBandwidth returns the limit of a pod's bandwidth annotations
// (cniplugin.ServerConfig.PodBandwidth): from the node's pod informer, or
// from the API server when the informer does not hold the pod (or holds
// an older pod of the name: uid, when given, must match). A pod that does
// not exist, or has no annotations, has no limit (nil). An annotation that
// is not a quantity between 1k and 1P fails ADD with code 7, as the
// kubelet and OpenShift SDN refuse it; a failed lookup with code 11 (the
// kubelet retries).
func (f *Follower) PodBandwidth(ctx context.Context, namespace, name, uid string) (*cniplugin.Bandwidth, error) {
	var pod *corev1.Pod
	if f.pods != nil {
		if o, ok, err := f.pods.GetIndexer().GetByKey(namespace + "/" + name); err == nil && ok {
			pod, _ = o.(*corev1.Pod)
		}
	}
	if pod == nil || uid != "" && string(pod.UID) != uid {
		if f.kc == nil {
			return nil, nil
		}
		gctx, cancel := context.WithTimeout(ctx, podLookupTimeout)
		defer cancel()
		p, err := f.kc.CoreV1().Pods(namespace).Get(gctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, nil
		case err != nil:
			return nil, types.NewError(types.ErrTryAgainLater, "cannot read the pod's bandwidth annotations", err.Error())
		case uid != "" && string(p.UID) != uid:
			return nil, nil // the pod of the ADD is gone already
		}
		pod = p
	}
	bw, err := BandwidthOf(pod.Annotations)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "invalid pod bandwidth annotation",
			fmt.Sprintf("pod %s/%s: %v", namespace, name, err))
	}
	return bw, nil
}

// BandwidthOf reads the bandwidth annotations of a pod: nil when it has
// neither.
func BandwidthOf(annotations map[string]string) (*cniplugin.Bandwidth, error) {
	var bw cniplugin.Bandwidth
	for _, a := range []struct {
		key  string
		rate *uint64
	}{{IngressBandwidthAnnotation, &bw.IngressRate}, {EgressBandwidthAnnotation, &bw.EgressRate}} {
		s, ok := annotations[a.key]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", a.key, s, err)
		}
		if q.Cmp(minBandwidth) < 0 || q.Cmp(maxBandwidth) > 0 {
			return nil, fmt.Errorf("%s=%q: not between 1k and 1P bit/s", a.key, s)
		}
		*a.rate = uint64(q.Value())
	}
	if bw.IsZero() {
		return nil, nil
	}
	return &bw, nil
}
