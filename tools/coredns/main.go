// Command coredns is CoreDNS (github.com/coredns/coredns) with only the
// plugins the real-node lab's Corefile uses: the kubernetes plugin for
// cluster.local, and errors, health, ready, cache, loop, loadbalance, reload
// and log around it. Upstream's own main (github.com/coredns/coredns) links
// every plugin, with the cloud SDKs of route53, azure and clouddns; linking
// this subset builds in a fraction of the time on the lab's machines.
// forward is left out on purpose: the lab's DNS answers cluster.local and
// nothing else, and never sends a query outside the lab.
package main

import (
	_ "github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
