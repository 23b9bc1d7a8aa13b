package kubesource_test

import (
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/internal/daemon/source"
)

// recorder records the cluster's shape and services; the rest of
// source.Sink it takes and forgets (labelRecorder and policyRecorder record
// labels and policies).

func (r *recorder) SetNamespaceLabels(string, map[string]string) error          { return nil }
func (r *recorder) SetPod(source.Pod) error                                     { return nil }
func (r *recorder) DeletePod(string, string) error                              { return nil }
func (r *recorder) SetPolicy(*networkingv1.NetworkPolicy) error                 { return nil }
func (r *recorder) DeletePolicy(string, string) error                           { return nil }
func (r *recorder) SetEgressFirewall(string, string, []source.EgressRule) error { return nil }
func (r *recorder) DeleteEgressFirewall(string, string) error                   { return nil }
func (r *recorder) SetMulticast(string, bool) error                             { return nil }
