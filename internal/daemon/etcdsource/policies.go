package etcdsource

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn/registry"
)

// The networkpolicy mode's state in the registry (sdn/registry
// policies.go): NetworkPolicies, namespace and pod labels written by an
// administrator, and pod addresses each node publishes for its own pods.
// The agent joins a pod's labels record with its address records into a
// source.Pod for the daemon's LabelSink, and hands policies to its
// PolicySink.
//
// A node's address record is believed only inside that node's subnet
// (gvs-master's allocation, which no node can write): a stolen node
// credential can claim any pod name for addresses of its own subnet, which
// it controls anyway, and for no other. When one pod has records on
// several nodes (it moved, and the old node's lease has not expired yet)
// the newest record wins.

// polState is the agent's copy of the policy state; a.fmu guards it.
type polState struct {
	policies  map[string]bool              // namespace/name
	egress    map[string]bool              // egress firewalls, namespace/name
	nsLabels  map[string]map[string]string // namespace → labels record
	podLabels map[string]registry.PodLabels
	addrs     map[string]map[string]addrRecord // namespace/name → node → record
	sentNS    map[string]string                // namespace → labels last sent (as text)
	sentPods  map[string]string                // namespace/name → pod last sent (as text)
}

type addrRecord struct {
	ip  netip.Addr
	rev int64
}

func newPolState() polState {
	return polState{policies: map[string]bool{}, egress: map[string]bool{}, nsLabels: map[string]map[string]string{},
		podLabels: map[string]registry.PodLabels{}, addrs: map[string]map[string]addrRecord{},
		sentNS: map[string]string{}, sentPods: map[string]string{}}
}

// knownPolicyKeys lists the keys of the policy state the agent mirrors,
// for resync to find what was deleted meanwhile.
func (a *agent) knownPolicyKeys() []string {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	p := &a.pol
	var out []string
	for k := range p.policies {
		ns, name, _ := strings.Cut(k, "/")
		out = append(out, registry.PolicyKey(ns, name))
	}
	for k := range p.egress {
		ns, name, _ := strings.Cut(k, "/")
		out = append(out, registry.EgressFirewallKey(ns, name))
	}
	for ns := range p.nsLabels {
		out = append(out, registry.NamespaceLabelsKey(ns))
	}
	for k := range p.podLabels {
		ns, name, _ := strings.Cut(k, "/")
		out = append(out, registry.PodLabelsKey(ns, name))
	}
	for k, byNode := range p.addrs {
		ns, name, _ := strings.Cut(k, "/")
		for node := range byNode {
			out = append(out, registry.PodKey(node, ns, name))
		}
	}
	return out
}

// applyPolicyState mirrors one key of the policy state; a.fmu is held. It
// reports whether key was one.
func (a *agent) applyPolicyState(deleted bool, key string, val []byte, rev int64) bool {
	p := &a.pol
	switch {
	case strings.HasPrefix(key, registry.PoliciesPrefix):
		ps, ok := a.d.(source.PolicySink)
		ns, name, valid := registry.ParseNamespacedKey(registry.PoliciesPrefix, key)
		if !ok || !valid {
			return true
		}
		if deleted {
			delete(p.policies, ns+"/"+name)
			if err := ps.DeletePolicy(ns, name); err != nil {
				a.log.Error("remove NetworkPolicy", "policy", ns+"/"+name, "err", err)
			}
			return true
		}
		np, err := registry.DecodePolicy(key, val)
		if err == nil {
			err = ps.SetPolicy(np)
		}
		if err != nil {
			// The node's rules for it stay as they were: the older
			// version, or none. gvsctl validates before it writes, so
			// only a hand-written record gets here.
			a.log.Error("NetworkPolicy refused", "policy", ns+"/"+name, "err", err)
			return true
		}
		p.policies[ns+"/"+name] = true
	case strings.HasPrefix(key, registry.EgressFirewallsPrefix):
		a.applyEgressFirewall(deleted, key, val)
	case strings.HasPrefix(key, registry.NamespaceLabelsPrefix):
		ns := strings.TrimPrefix(key, registry.NamespaceLabelsPrefix)
		if deleted {
			delete(p.nsLabels, ns)
		} else {
			var l registry.Labels
			if err := json.Unmarshal(val, &l); err != nil || registry.ValidateLabels(l.Labels) != nil {
				a.log.Warn("bad namespace labels record", "key", key, "err", err)
				return true
			}
			p.nsLabels[ns] = l.Labels
		}
		a.sendNamespace(ns)
	case strings.HasPrefix(key, registry.PodLabelsPrefix):
		ns, name, ok := registry.ParseNamespacedKey(registry.PodLabelsPrefix, key)
		if !ok {
			return true
		}
		k := ns + "/" + name
		if deleted {
			delete(p.podLabels, k)
		} else {
			var l registry.PodLabels
			if err := json.Unmarshal(val, &l); err != nil {
				a.log.Warn("bad pod labels record", "key", key, "err", err)
				return true
			}
			p.podLabels[k] = l
		}
		a.sendPod(k)
	case strings.HasPrefix(key, registry.PodsPrefix):
		node, ns, name, ok := registry.ParsePodKey(key)
		if !ok {
			return true
		}
		k := ns + "/" + name
		if deleted {
			delete(p.addrs[k], node)
			if len(p.addrs[k]) == 0 {
				delete(p.addrs, k)
			}
		} else {
			var r registry.PodAddress
			if err := json.Unmarshal(val, &r); err != nil {
				a.log.Warn("bad pod address record", "key", key, "err", err)
				return true
			}
			if p.addrs[k] == nil {
				p.addrs[k] = map[string]addrRecord{}
			}
			p.addrs[k][node] = addrRecord{ip: r.IP, rev: rev}
		}
		a.sendPod(k)
	default:
		return false
	}
	return true
}

// applyEgressFirewall mirrors an egress firewall into the daemon, if it
// takes them (source.EgressFirewallSink); a.fmu is held. One the node
// cannot read denies its project's egress until it is fixed, as in the
// Kubernetes mode.
func (a *agent) applyEgressFirewall(deleted bool, key string, val []byte) {
	es, ok := a.d.(source.EgressFirewallSink)
	ns, name, valid := registry.ParseNamespacedKey(registry.EgressFirewallsPrefix, key)
	if !ok || !valid {
		return
	}
	k := ns + "/" + name
	if deleted {
		delete(a.pol.egress, k)
		if err := es.DeleteEgressFirewall(ns, name); err != nil {
			a.log.Error("remove egress firewall", "firewall", k, "err", err)
		}
		return
	}
	a.pol.egress[k] = true
	np, err := registry.DecodeEgressFirewall(key, val)
	var rules []source.EgressRule
	if err == nil {
		rules, err = source.EgressRulesOf(np)
	}
	if err != nil {
		a.log.Error("egress firewall refused: the project's egress is denied until it is fixed", "firewall", k, "err", err)
		rules = source.DenyAllEgress()
	}
	if err := es.SetEgressFirewall(ns, name, rules); err != nil {
		a.log.Error("egress firewall", "firewall", k, "err", err)
	}
}

// nodeSubnet returns node's subnet as the agent knows it; a.fmu is held.
func (a *agent) nodeSubnet(node string) netip.Prefix {
	if node == a.node.Name {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.subnet
	}
	if s, ok := a.remotes[node]; ok {
		return s.Subnet
	}
	return netip.Prefix{}
}

// podAddress is the address of pod k: its newest record whose address is
// inside its node's subnet; a.fmu is held.
func (a *agent) podAddress(k string) netip.Addr {
	var best addrRecord
	for _, node := range slices.Sorted(maps.Keys(a.pol.addrs[k])) {
		r := a.pol.addrs[k][node]
		if !a.nodeSubnet(node).Contains(r.ip) {
			a.log.Warn("pod address outside its node's subnet ignored", "pod", k, "node", node, "ip", r.ip)
			continue
		}
		if r.rev > best.rev {
			best = r
		}
	}
	return best.ip
}

// sendPod hands pod k, as labels and address records make it now, to the
// daemon if it changed; a.fmu is held.
func (a *agent) sendPod(k string) {
	ls, ok := a.d.(source.LabelSink)
	if !ok {
		return
	}
	ns, name, _ := strings.Cut(k, "/")
	l, labelled := a.pol.podLabels[k]
	ip := a.podAddress(k)
	if !labelled && !ip.IsValid() {
		if _, sent := a.pol.sentPods[k]; sent {
			delete(a.pol.sentPods, k)
			if err := ls.DeletePod(ns, name); err != nil {
				a.log.Error("forget pod", "pod", k, "err", err)
			}
		}
		return
	}
	pod := source.Pod{Namespace: ns, Name: name, IP: ip, Labels: l.Labels}
	ports, err := l.NetpolPorts()
	if err != nil {
		a.log.Warn("pod's named ports ignored", "pod", k, "err", err)
	}
	pod.Ports = ports
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	text := podText(pod)
	if a.pol.sentPods[k] == text {
		return
	}
	if err := ls.SetPod(pod); err != nil {
		a.log.Error("pod labels", "pod", k, "err", err)
		return
	}
	a.pol.sentPods[k] = text
}

func podText(p source.Pod) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// resendPods re-evaluates every pod's address (a node's subnet changed);
// a.fmu is held.
func (a *agent) resendPods() {
	for _, k := range slices.Sorted(maps.Keys(a.pol.addrs)) {
		a.sendPod(k)
	}
}

// sendNamespace hands namespace ns's labels to the daemon if they changed:
// a project, or a namespace with a labels record, has its record's labels
// and MetadataNameLabel; any other is forgotten. a.fmu is held.
func (a *agent) sendNamespace(ns string) {
	ls, ok := a.d.(source.LabelSink)
	if !ok {
		return
	}
	l, labelled := a.pol.nsLabels[ns]
	_, project := a.projects[ns]
	if !labelled && !project {
		if _, sent := a.pol.sentNS[ns]; sent {
			delete(a.pol.sentNS, ns)
			if err := ls.SetNamespaceLabels(ns, nil); err != nil {
				a.log.Error("forget namespace", "namespace", ns, "err", err)
			}
		}
		return
	}
	l = maps.Clone(l)
	if l == nil {
		l = map[string]string{}
	}
	l[registry.MetadataNameLabel] = ns
	b, _ := json.Marshal(l)
	if a.pol.sentNS[ns] == string(b) {
		return
	}
	if err := ls.SetNamespaceLabels(ns, l); err != nil {
		a.log.Error("namespace labels", "namespace", ns, "err", err)
		return
	}
	a.pol.sentNS[ns] = string(b)
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
