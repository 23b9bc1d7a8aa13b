package kubesource

import (
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// podSink records pods and remotes; the rest of source.Sink it takes and
// forgets.

func (s *podSink) SetPolicy(*networkingv1.NetworkPolicy) error                 { return nil }
func (s *podSink) DeletePolicy(string, string) error                           { return nil }
func (s *podSink) SetService(sdn.Service) error                                { return nil }
func (s *podSink) DeleteService(string, string) error                          { return nil }
func (s *podSink) SetEgressFirewall(string, string, []source.EgressRule) error { return nil }
func (s *podSink) DeleteEgressFirewall(string, string) error                   { return nil }
func (s *podSink) SetMulticast(string, bool) error                             { return nil }
