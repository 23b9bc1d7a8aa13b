package kube

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// Automatic egress IPs in Kubernetes mode, as OpenShift's master does them
// (openshift/sdn pkg/network/master/egressip.go):
//
//  1. A HostSubnet with egressCIDRs lets gvs-master place egress IPs on its
//     node; its egressIPs are then gvs-master's to write (and it records
//     them in AssignedEgressIPsAnnotation). A HostSubnet without
//     egressCIDRs keeps the egressIPs an administrator gives it (manual),
//     and those are never placed elsewhere; what gvs-master had placed on
//     it before its egressCIDRs were removed is taken off.
//  2. Every EgressCheckInterval the leader probes each such node's SDN
//     address (its tun0, the gateway of its subnet) over the pod network
//     (master.ProbeNode: a TCP connection to port 9, refused = live).
//  3. syncEgress assigns every NetNamespace egress IP no manual HostSubnet
//     names with master.PlanEgressIPs (the etcd registry's AssignEgress
//     uses the same plan): kept on its node while that node is live and
//     its CIDRs contain it, otherwise moved to the live node with the
//     fewest; none live: on no node, so the nodes drop the project's
//     outbound traffic (fail closed).
//  4. The HostSubnets are written, removals first, so that two nodes never
//     name one egress IP (which the nodes would also refuse).
//
// Only gvs-master's account may write HostSubnets (deploy/rbac.yaml): a
// node's credentials cannot move an egress IP to their node.

// AssignedEgressIPsAnnotation, on a HostSubnet, lists (comma-separated)
// the egressIPs gvs-master placed there from its egressCIDRs. When the
// HostSubnet loses its egressCIDRs those are taken off it (and placed
// elsewhere); the other egressIPs stay, as manual ones.
const AssignedEgressIPsAnnotation = "network.gvs.io/assigned-egress-ips"

// egressState is the reachability the prober found, shared between the
// prober goroutine and the worker.
type egressState struct {
	mu     sync.Mutex
	probed bool            // one round is done: syncEgress may move IPs
	down   map[string]bool // HostSubnet name → did not answer the last round
}

// egressTargets returns the HostSubnets with egress CIDRs and the address
// each is probed at (invalid: it has no usable subnet, so it is down).
func (c *controller) egressTargets() map[string]netip.Addr {
	out := map[string]netip.Addr{}
	for _, o := range c.hsInf.GetStore().List() {
		hs, ok := o.(*networkv1.HostSubnet)
		if !ok || len(master.ParsePrefixes(hs.EgressCIDRs)) == 0 {
			continue
		}
		var gw netip.Addr
		if p, err := netip.ParsePrefix(hs.Subnet); err == nil {
			gw = p.Masked().Addr().Next()
		}
		out[hs.Name] = gw
	}
	return out
}

// checkEgressNodes probes the egress nodes every interval until ctx is
// done, and queues the assignment when the set of unreachable nodes
// changes (and after the first round).
func (c *controller) checkEgressNodes(ctx context.Context, interval time.Duration) {
	for first := true; ; first = false {
		targets := c.egressTargets()
		down := map[string]bool{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for name, ip := range targets {
			wg.Go(func() {
				up := ip.IsValid() && master.ProbeNode(ctx, ip)
				mu.Lock()
				defer mu.Unlock()
				if !up {
					down[name] = true
				}
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		c.egress.mu.Lock()
		changed := first || !maps.Equal(down, c.egress.down)
		for n := range targets {
			if down[n] != c.egress.down[n] {
				if down[n] {
					c.log.Warn("egress node unreachable; moving its egress IPs", "node", n, "probed", targets[n])
				} else {
					c.log.Info("egress node reachable", "node", n, "probed", targets[n])
				}
			}
		}
		c.egress.down, c.egress.probed = down, true
		c.egress.mu.Unlock()
		if changed {
			c.queue.Add(key{egressKey, ""})
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// handleEgress queues the assignment when inf reports an object whose
// egress fields changed (or that came or went).
func (c *controller) handleEgress(inf cache.SharedIndexInformer) {
	add := func(any) { c.queue.Add(key{egressKey, ""}) }
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		DeleteFunc: add,
		UpdateFunc: func(old, new any) {
			if egressFields(old) != egressFields(new) {
				add(new)
			}
		},
	})
}

// egressFields returns what of a NetNamespace or HostSubnet the assignment
// reads, as one comparable value.
func egressFields(o any) [3]string {
	join := func(ss []string) string { return strings.Join(ss, ",") }
	switch v := o.(type) {
	case *networkv1.NetNamespace:
		return [3]string{join(v.EgressIPs)}
	case *networkv1.HostSubnet:
		return [3]string{join(v.EgressIPs), join(v.EgressCIDRs), v.Subnet}
	}
	return [3]string{}
}

// syncEgress assigns the projects' egress IPs to the egress nodes and
// writes the HostSubnets that change. Before the first probe round it does
// nothing (a new leader does not move IPs it has not checked).
func (c *controller) syncEgress(ctx context.Context) error {
	c.egress.mu.Lock()
	probed, down := c.egress.probed, maps.Clone(c.egress.down)
	c.egress.mu.Unlock()
	if !probed {
		return nil
	}
	projects := map[string][]netip.Addr{}
	for _, o := range c.netnsInf.GetStore().List() {
		if nn, ok := o.(*networkv1.NetNamespace); ok {
			projects[nn.Name] = master.ParseAddrs(nn.EgressIPs)
		}
	}
	var manual []netip.Addr
	nodes := map[string]master.EgressNode{}
	prev := map[netip.Addr]string{}
	hss := map[string]*networkv1.HostSubnet{} // the HostSubnets gvs-master writes
	leftover := map[string][]string{}         // a former egress node's egressIPs without gvs-master's
	for _, o := range c.hsInf.GetStore().List() {
		hs, ok := o.(*networkv1.HostSubnet)
		if !ok {
			continue
		}
		cidrs := master.ParsePrefixes(hs.EgressCIDRs)
		placed := splitList(hs.Annotations[AssignedEgressIPsAnnotation])
		if len(cidrs) == 0 {
			// Manual, except what gvs-master placed while it had CIDRs.
			kept := slices.DeleteFunc(slices.Clone(hs.EgressIPs), func(ip string) bool { return slices.Contains(placed, ip) })
			manual = append(manual, master.ParseAddrs(kept)...)
			if len(placed) > 0 {
				hss[hs.Name], leftover[hs.Name] = hs, kept
			}
			continue
		}
		hss[hs.Name] = hs
		nodes[hs.Name] = master.EgressNode{CIDRs: cidrs, Live: !down[hs.Name]}
		for _, ip := range master.ParseAddrs(hs.EgressIPs) {
			prev[ip] = hs.Name
		}
	}
	plan := master.PlanEgressIPs(projects, manual, nodes, prev)
	var errs []error
	// Removals first: an IP leaves its old node before its new one names it.
	for _, adding := range []bool{false, true} {
		for _, name := range slices.Sorted(maps.Keys(hss)) {
			hs, want := hss[name], master.FormatAddrs(plan[name])
			mark := strings.Join(want, ",")
			if kept, ok := leftover[name]; ok {
				want, mark = kept, ""
			}
			if slices.Equal(hs.EgressIPs, want) && hs.Annotations[AssignedEgressIPsAnnotation] == mark ||
				adding != hasNew(hs.EgressIPs, want) {
				continue
			}
			upd := hs.DeepCopy()
			upd.EgressIPs = nil
			if len(want) > 0 {
				upd.EgressIPs = want
			}
			if mark == "" {
				delete(upd.Annotations, AssignedEgressIPsAnnotation)
			} else {
				if upd.Annotations == nil {
					upd.Annotations = map[string]string{}
				}
				upd.Annotations[AssignedEgressIPsAnnotation] = mark
			}
			if _, err := c.m.net.HostSubnets().Update(ctx, upd); err != nil {
				errs = append(errs, err)
				continue
			}
			c.log.Info("egress IPs assigned", "node", name, "egressIPs", want, "was", hs.EgressIPs)
		}
	}
	return errors.Join(errs...)
}

// splitList reads a comma-separated annotation value.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// hasNew reports whether want names an address have does not.
func hasNew(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return true
		}
	}
	return false
}
