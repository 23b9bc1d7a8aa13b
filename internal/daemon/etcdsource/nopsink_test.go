package etcdsource

import (
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// countSink counts only the cluster's shape; the rest of source.Sink it
// takes and forgets (policySink, which embeds it, records labels, policies
// and egress firewalls).

func (s *countSink) SetNamespaceLabels(string, map[string]string) error          { return nil }
func (s *countSink) SetPod(source.Pod) error                                     { return nil }
func (s *countSink) DeletePod(string, string) error                              { return nil }
func (s *countSink) SetPolicy(*networkingv1.NetworkPolicy) error                 { return nil }
func (s *countSink) DeletePolicy(string, string) error                           { return nil }
func (s *countSink) SetService(sdn.Service) error                                { return nil }
func (s *countSink) DeleteService(string, string) error                          { return nil }
func (s *countSink) SetEgressFirewall(string, string, []source.EgressRule) error { return nil }
func (s *countSink) DeleteEgressFirewall(string, string) error                   { return nil }
func (s *countSink) SetMulticast(string, bool) error                             { return nil }
