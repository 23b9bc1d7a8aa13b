// Command coredns is CoreDNS (github.com/coredns/coredns) with only the
// plugins the real-node lab uses: the kubernetes plugin for cluster.local,
// and errors, health, ready, cache, loop, loadbalance, reload and log
// around it; hosts and forward for upstream's DNS suite, which runs this
// binary in agnhost as a test name server (hosts) and points the cluster
// DNS at it (forward to that pod's address). Upstream's own main
// (github.com/coredns/coredns) links every plugin, with the cloud SDKs of
// route53, azure and clouddns; linking this subset builds in a fraction
// of the time on the lab's machines. The lab's own Corefile
// (internal/kubetest/coredns.yaml) has no forward: it never sends a query
// outside the lab.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
