package etcdsource

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"strings"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/registry"
)

// The networkpolicy mode's state in the registry (sdn/registry
// policies.go): NetworkPolicies, namespace and pod labels written by an
// administrator, and pod addresses each node publishes for its own pods.
// The agent hands a pod's labels record and its nodes' address records to
// the Mirror, which joins them into a source.Pod for the daemon's
// LabelSink: it believes a node's address record only inside that node's
// subnet (gvs-master's allocation, which no node can write), so a stolen
// node credential can claim any pod name for addresses of its own subnet,
// which it controls anyway, and for no other. When one pod has records on
// several nodes (it moved, and the old node's lease has not expired yet)
// the newest record (by revision) wins.

// applyPolicyState hands one key of the policy state to the Mirror;
// a.fmu is held.
func (a *agent) applyPolicyState(m *source.Mirror, deleted bool, key string, val []byte, rev int64) {
	switch {
	case strings.HasPrefix(key, registry.PoliciesPrefix):
		ns, name, valid := registry.ParseNamespacedKey(registry.PoliciesPrefix, key)
		if !valid {
			return
		}
		if deleted {
			m.DeletePolicy(ns, name)
			return
		}
		np, err := registry.DecodePolicy(key, val)
		if err != nil {
			// gvsctl validates before it writes, so only a hand-written
			// record gets here.
			m.RefusePolicy(ns, name, err)
			return
		}
		m.SetPolicy(np)
	case strings.HasPrefix(key, registry.EgressFirewallsPrefix):
		ns, name, valid := registry.ParseNamespacedKey(registry.EgressFirewallsPrefix, key)
		if !valid {
			return
		}
		if deleted {
			m.DeleteEgressFirewall(ns, name)
			return
		}
		np, err := registry.DecodeEgressFirewall(key, val)
		if err != nil {
			m.RefuseEgressFirewall(ns, name, err)
			return
		}
		m.SetEgressFirewall(np)
	case strings.HasPrefix(key, registry.NamespaceLabelsPrefix):
		ns := strings.TrimPrefix(key, registry.NamespaceLabelsPrefix)
		if deleted {
			delete(a.nsLabels, ns)
		} else {
			var l registry.Labels
			if err := json.Unmarshal(val, &l); err != nil || registry.ValidateLabels(l.Labels) != nil {
				a.log.Warn("bad namespace labels record", "key", key, "err", err)
				return
			}
			a.nsLabels[ns] = l.Labels
		}
		a.sendNamespace(ns)
	case strings.HasPrefix(key, registry.PodLabelsPrefix):
		ns, name, ok := registry.ParseNamespacedKey(registry.PodLabelsPrefix, key)
		if !ok {
			return
		}
		if deleted {
			m.ForgetPodLabels(ns, name)
			return
		}
		var l registry.PodLabels
		if err := json.Unmarshal(val, &l); err != nil {
			a.log.Warn("bad pod labels record", "key", key, "err", err)
			return
		}
		ports, err := l.NetpolPorts()
		if err != nil {
			a.log.Warn("pod's named ports ignored", "pod", ns+"/"+name, "err", err)
		}
		m.SetPodLabels(ns, name, l.Labels, ports)
	case strings.HasPrefix(key, registry.PodsPrefix):
		node, ns, name, ok := registry.ParsePodKey(key)
		if !ok {
			return
		}
		if deleted {
			m.ForgetPodAddress(ns, name, node)
			return
		}
		var r registry.PodAddress
		if err := json.Unmarshal(val, &r); err != nil {
			a.log.Warn("bad pod address record", "key", key, "err", err)
			return
		}
		m.SetPodAddress(ns, name, node, r.IP, rev)
	}
}

// sendNamespace hands namespace ns's labels to the Mirror: a project, or
// a namespace with a labels record, has its record's labels and
// MetadataNameLabel; any other is forgotten. a.fmu is held.
func (a *agent) sendNamespace(ns string) {
	m := a.mirror()
	l, labelled := a.nsLabels[ns]
	if !labelled && !m.HasProject(ns) {
		m.SetNamespaceLabels(ns, nil)
		return
	}
	l = maps.Clone(l)
	if l == nil {
		l = map[string]string{}
	}
	l[registry.MetadataNameLabel] = ns
	m.SetNamespaceLabels(ns, l)
}

// WaitForSync waits until the agent has listed the registry once (every
// policy, label and pod address) after Follow, so that no pod is attached
// before the policies that select it are known. It reports false if ctx
// ended first.
func (f *Follower) WaitForSync(ctx context.Context) bool {
	select {
	case <-f.a.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

// PublishPods starts publishing this node's pods' addresses (what local
// returns, by namespace/name) on the node's lease: at once, whenever
// PodsChanged is called, after the lease changed, and every 10 seconds
// (to repair what an etcd outage left undone). Call it once, after Follow.
func (f *Follower) PublishPods(local func() map[string]netip.Addr) {
	a := f.a
	a.mu.Lock()
	ctx := a.ctx
	a.mu.Unlock()
	if ctx == nil {
		return
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		var failing bool
		for {
			a.mu.Lock()
			lease := a.lease
			a.mu.Unlock()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := a.reg.PublishPods(pctx, a.node.Name, lease, local())
			cancel()
			switch {
			case err != nil && !failing && ctx.Err() == nil:
				a.log.Warn("publishing the pods' addresses failed; retrying", "err", err)
				failing = true
			case err == nil && failing:
				a.log.Info("pods' addresses published again")
				failing = false
			}
			select {
			case <-ctx.Done():
				return
			case <-a.podsChanged:
			case <-tick.C:
			}
		}
	}()
}

// PodsChanged tells PublishPods that the local pods changed.
func (f *Follower) PodsChanged() {
	select {
	case f.a.podsChanged <- struct{}{}:
	default:
	}
}
