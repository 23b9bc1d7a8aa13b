package source

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// Mirror is the control plane's state as a node takes it, shared by the
// followers: a follower translates its wire objects (etcd keys, informer
// events) into calls of the Mirror, which keeps what it was told, works out
// the difference and drives the node's Sink.
//
//   - Remote nodes are diffed by name: a new one is added, one whose
//     address or subnet changed is moved, a deleted one removed.
//   - A remote node whose subnet overlaps this node's or an accepted
//     remote's is refused and remembered (and so is one the sink refuses):
//     it is tried again whenever a subnet is freed — a remote removed or
//     moved, this node moved (MoveSubnet).
//   - A pod's address is believed only inside the subnet of the node that
//     claims it (a node's credentials may write its own pods' addresses,
//     and with another node's pod's address a compromised node could lend
//     that pod the labels its policies admit); when several nodes claim one
//     pod the newest claim wins. A node's pods are checked again when its
//     subnet changes, it comes or it goes.
//   - A service the node refuses has its old rules removed (in multitenant
//     mode it is then unreachable, not open); an egress firewall it cannot
//     read denies its project's egress; a policy it refuses leaves the
//     previous version in force.
//
// A Mirror is safe for concurrent use; it calls the sink one call at a
// time. It logs what it refuses; it returns no errors, as a follower has
// nobody to return them to.
type Mirror struct {
	sink Sink
	node string
	log  *slog.Logger

	mu       sync.Mutex
	subnet   netip.Prefix
	remotes  map[string]sdn.RemoteNode // accepted, by name
	refused  map[string]sdn.RemoteNode // refused, by name (tried again when a subnet is freed)
	projects map[string]uint32
	mcast    map[string]bool            // projects opted in to multicast
	pods     map[string]*podState       // by namespace/name
	byNode   map[string]map[string]bool // node → keys of the pods it claims an address for
	sentPods map[string]string          // namespace/name → pod last sent (as text)
	sentNS   map[string]string          // namespace → labels last sent (as text)

	projEgress map[string][]netip.Addr       // project → its egress IPs (egressip.go)
	nodeEgress map[string][]netip.Addr       // node → the egress IPs it hosts
	sentEgress map[string][]sdn.EgressIPHost // project → egress IPs last sent
}

// MirrorConfig says whose state a Mirror keeps.
type MirrorConfig struct {
	// Node is this node's name; a remote node of that name is ignored.
	Node string
	// Subnet is this node's subnet at start (MoveSubnet changes it).
	Subnet netip.Prefix
	Logger *slog.Logger
}

// podState is what the Mirror knows of a pod: its labels record (labelled)
// and the address each node claims for it.
type podState struct {
	labelled bool
	labels   map[string]string
	ports    []netpol.NamedPort
	addrs    map[string]podAddr // by node
}

// podAddr is a node's claim of a pod's address; rev orders the claims
// (the newest, highest, wins).
type podAddr struct {
	ip  netip.Addr
	rev int64
}

// NewMirror returns a Mirror that drives sink.
func NewMirror(sink Sink, cfg MirrorConfig) *Mirror {
	m := &Mirror{sink: sink, node: cfg.Node, log: cfg.Logger, subnet: cfg.Subnet,
		remotes: map[string]sdn.RemoteNode{}, refused: map[string]sdn.RemoteNode{}, projects: map[string]uint32{},
		mcast: map[string]bool{}, pods: map[string]*podState{}, byNode: map[string]map[string]bool{},
		sentPods: map[string]string{}, sentNS: map[string]string{},
		projEgress: map[string][]netip.Addr{}, nodeEgress: map[string][]netip.Addr{}, sentEgress: map[string][]sdn.EgressIPHost{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// Subnet returns this node's subnet as the Mirror has it.
func (m *Mirror) Subnet() netip.Prefix {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.subnet
}

// MoveSubnet moves this node to subnet to (invalid: none) through
// Sink.ChangeSubnet. The old subnet may be another node's by now, so the
// move is not optional: ChangeSubnet changes nothing when it fails, and
// MoveSubnet tries again, with backoff, until it succeeds or ctx ends,
// logging every failure. The control plane's word stands, so the Mirror
// takes the new subnet either way: remotes that overlap it are refused,
// the ones refused for the old subnet are tried again, and this node's
// pods' addresses are checked against the new subnet.
func (m *Mirror) MoveSubnet(ctx context.Context, to netip.Prefix) {
	m.mu.Lock()
	defer m.mu.Unlock()
	from := m.subnet
	if to == from {
		return
	}
	backoff := 100 * time.Millisecond
	for {
		err := m.sink.ChangeSubnet(to)
		if err == nil {
			break
		}
		m.log.Error("reconfiguring the node for its new subnet; retrying", "old", subnetString(from), "new", subnetString(to), "in", backoff, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		break
	}
	m.subnet = to
	m.log.Warn("this node's subnet changed", "old", subnetString(from), "new", subnetString(to))
	for _, name := range slices.Sorted(maps.Keys(m.remotes)) {
		if rn := m.remotes[name]; rn.Subnet.Overlaps(to) {
			m.dropRemote(rn)
			m.refuse(rn, fmt.Errorf("its subnet overlaps this node's new subnet %v", to))
			m.recheckNode(name)
		}
	}
	m.recheckNode(m.node)
	m.retryRefused()
	m.syncEgress()
}

// SetRemote adds a remote node, or updates it (a new address or subnet).
func (m *Mirror) SetRemote(rn sdn.RemoteNode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setRemote(rn)
	m.syncEgress()
}

// RemoveRemote removes a remote node by name; an unknown one is no error.
func (m *Mirror) RemoveRemote(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.refused, name)
	old, had := m.remotes[name]
	if !had {
		return
	}
	m.dropRemote(old)
	m.log.Info("remote node removed", "node", name, "ip", old.IP, "subnet", old.Subnet)
	m.recheckNode(name)
	m.retryRefused()
	m.syncEgress()
}

// setRemote is SetRemote; m.mu is held.
func (m *Mirror) setRemote(rn sdn.RemoteNode) {
	if rn.Name == m.node {
		return
	}
	old, had := m.remotes[rn.Name]
	if had && old == rn {
		return
	}
	delete(m.refused, rn.Name)
	err := m.overlap(rn)
	if had && (old.IP != rn.IP || err != nil) {
		m.dropRemote(old)
	}
	if err == nil {
		err = m.sink.AddRemote(rn)
	}
	if err != nil {
		if _, still := m.remotes[rn.Name]; still { // its old rules must not stay
			m.dropRemote(old)
		}
		m.refuse(rn, err)
		if had {
			m.recheckNode(rn.Name)
			m.retryRefused()
		}
		return
	}
	m.remotes[rn.Name] = rn
	m.log.Info("remote node added", "node", rn.Name, "ip", rn.IP, "subnet", rn.Subnet)
	if !had || old.Subnet != rn.Subnet {
		m.recheckNode(rn.Name) // its pods' addresses are checked against its subnet
	}
	if had && old.Subnet != rn.Subnet {
		m.retryRefused()
	}
}

// overlap says why rn's subnet cannot be routed to it: it overlaps this
// node's or an accepted remote's; m.mu is held.
func (m *Mirror) overlap(rn sdn.RemoteNode) error {
	if m.subnet.IsValid() && rn.Subnet.Overlaps(m.subnet) {
		return fmt.Errorf("its subnet %v overlaps this node's %v", rn.Subnet, m.subnet)
	}
	for name, o := range m.remotes { // any one will do: no sort on this path
		if name != rn.Name && o.Subnet.Overlaps(rn.Subnet) {
			return fmt.Errorf("its subnet %v overlaps node %s's %v", rn.Subnet, name, o.Subnet)
		}
	}
	return nil
}

// refuse remembers a refused remote node; m.mu is held.
func (m *Mirror) refuse(rn sdn.RemoteNode, err error) {
	m.refused[rn.Name] = rn
	m.log.Error("remote node refused until a subnet is freed or its record changes", "node", rn.Name, "ip", rn.IP, "subnet", rn.Subnet, "err", err)
}

// dropRemote removes an accepted remote node's rules; m.mu is held.
func (m *Mirror) dropRemote(rn sdn.RemoteNode) {
	delete(m.remotes, rn.Name)
	if err := m.sink.RemoveRemote(rn.IP); err != nil {
		m.log.Error("remove remote node", "node", rn.Name, "ip", rn.IP, "err", err)
	}
}

// retryRefused tries the refused remote nodes again (a subnet was freed);
// m.mu is held. Trying one frees no subnet, so this does not recurse.
func (m *Mirror) retryRefused() {
	for _, name := range slices.Sorted(maps.Keys(m.refused)) {
		rn := m.refused[name]
		delete(m.refused, name)
		m.setRemote(rn)
	}
}

// Refused lists the remote nodes the Mirror refused, by name.
func (m *Mirror) Refused() []sdn.RemoteNode {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []sdn.RemoteNode
	for _, name := range slices.Sorted(maps.Keys(m.refused)) {
		out = append(out, m.refused[name])
	}
	return out
}

// SetProjectVNID records a project's VNID; the sink hears of changes only.
func (m *Mirror) SetProjectVNID(project string, vnid uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.projects[project]; ok && old == vnid {
		return
	}
	m.projects[project] = vnid
	if err := m.sink.SetProjectVNID(project, vnid); err != nil {
		m.log.Error("project VNID", "project", project, "vnid", vnid, "err", err)
	}
}

// ForgetProject forgets a deleted project (its pods go with it; the node
// keeps its VNID until then) and opts it out of multicast.
func (m *Mirror) ForgetProject(project string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.projects, project)
	m.setMulticast(project, false)
}

// SetProjectMulticast records whether a project opted in to multicast; the
// sink hears of changes only.
func (m *Mirror) SetProjectMulticast(project string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setMulticast(project, on)
}

func (m *Mirror) setMulticast(project string, on bool) {
	if m.mcast[project] == on {
		return
	}
	if err := m.sink.SetMulticast(project, on); err != nil {
		// Not recorded: the next report tries again.
		m.log.Error("project multicast", "project", project, "enabled", on, "err", err)
		return
	}
	if on {
		m.mcast[project] = true
	} else {
		delete(m.mcast, project)
	}
}

// HasProject reports whether the Mirror knows project.
func (m *Mirror) HasProject(project string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.projects[project]
	return ok
}

// SetNamespaceLabels hands a namespace's labels to the LabelSink if they
// changed; nil forgets a namespace it was given.
func (m *Mirror) SetNamespaceLabels(ns string, labels map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if labels == nil {
		if _, sent := m.sentNS[ns]; sent {
			delete(m.sentNS, ns)
			if err := m.sink.SetNamespaceLabels(ns, nil); err != nil {
				m.log.Error("forget namespace", "namespace", ns, "err", err)
			}
		}
		return
	}
	text := asText(labels)
	if m.sentNS[ns] == text {
		return
	}
	if err := m.sink.SetNamespaceLabels(ns, labels); err != nil {
		m.log.Error("namespace labels", "namespace", ns, "err", err)
		return
	}
	m.sentNS[ns] = text
}

// SetPod records a pod's labels and named ports, and p.IP as the only
// address claimed for it, by node (an invalid p.IP or an empty node: none).
// A Kubernetes Pod carries all of it.
func (m *Mirror) SetPod(p Pod, node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := p.Namespace + "/" + p.Name
	m.unclaim(k)
	st := &podState{labelled: true, labels: p.Labels, ports: p.Ports, addrs: map[string]podAddr{}}
	m.pods[k] = st
	if p.IP.IsValid() && node != "" {
		m.claim(k, node, podAddr{ip: p.IP, rev: 1})
	}
	m.sendPod(k)
}

// DeletePod forgets a pod: its labels and every address claimed for it.
func (m *Mirror) DeletePod(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := namespace + "/" + name
	m.unclaim(k)
	delete(m.pods, k)
	m.sendPod(k)
}

// SetPodLabels records a pod's labels record: labels and named ports.
func (m *Mirror) SetPodLabels(namespace, name string, labels map[string]string, ports []netpol.NamedPort) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := namespace + "/" + name
	st := m.pod(k)
	st.labelled, st.labels, st.ports = true, labels, ports
	m.sendPod(k)
}

// ForgetPodLabels forgets a pod's labels record; its addresses stay.
func (m *Mirror) ForgetPodLabels(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := namespace + "/" + name
	if st, ok := m.pods[k]; ok {
		st.labelled, st.labels, st.ports = false, nil, nil
		m.gc(k)
	}
	m.sendPod(k)
}

// SetPodAddress records node's claim of a pod's address; rev orders the
// claims of several nodes (the newest, highest, wins).
func (m *Mirror) SetPodAddress(namespace, name, node string, ip netip.Addr, rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := namespace + "/" + name
	m.pod(k)
	m.claim(k, node, podAddr{ip: ip, rev: rev})
	m.sendPod(k)
}

// ForgetPodAddress forgets node's claim of a pod's address.
func (m *Mirror) ForgetPodAddress(namespace, name, node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := namespace + "/" + name
	if st, ok := m.pods[k]; ok {
		delete(st.addrs, node)
		m.unindex(k, node)
		m.gc(k)
	}
	m.sendPod(k)
}

// pod returns pod k's state, made if new; m.mu is held.
func (m *Mirror) pod(k string) *podState {
	st, ok := m.pods[k]
	if !ok {
		st = &podState{addrs: map[string]podAddr{}}
		m.pods[k] = st
	}
	return st
}

// gc forgets pod k if nothing is known of it any more; m.mu is held.
func (m *Mirror) gc(k string) {
	if st := m.pods[k]; st != nil && !st.labelled && len(st.addrs) == 0 {
		delete(m.pods, k)
	}
}

// claim records node's claim for pod k; m.mu is held.
func (m *Mirror) claim(k, node string, a podAddr) {
	m.pods[k].addrs[node] = a
	if m.byNode[node] == nil {
		m.byNode[node] = map[string]bool{}
	}
	m.byNode[node][k] = true
}

// unclaim drops every claim for pod k; m.mu is held.
func (m *Mirror) unclaim(k string) {
	if st, ok := m.pods[k]; ok {
		for node := range st.addrs {
			m.unindex(k, node)
		}
		st.addrs = map[string]podAddr{}
	}
}

func (m *Mirror) unindex(k, node string) {
	delete(m.byNode[node], k)
	if len(m.byNode[node]) == 0 {
		delete(m.byNode, node)
	}
}

// nodeSubnet returns node's subnet as the Mirror knows it (invalid: not
// known, or refused); m.mu is held.
func (m *Mirror) nodeSubnet(node string) netip.Prefix {
	if node == m.node {
		return m.subnet
	}
	return m.remotes[node].Subnet
}

// podAddress is pod k's address: the newest claim inside its node's
// subnet; m.mu is held.
func (m *Mirror) podAddress(k string, st *podState) netip.Addr {
	var best podAddr
	found := false
	for _, node := range slices.Sorted(maps.Keys(st.addrs)) {
		a := st.addrs[node]
		switch sub := m.nodeSubnet(node); {
		case !sub.IsValid():
			m.log.Debug("pod address withheld until its node's subnet is known", "pod", k, "node", node, "ip", a.ip)
			continue
		case !sub.Contains(a.ip):
			m.log.Warn("pod address outside its node's subnet ignored", "pod", k, "node", node, "ip", a.ip, "subnet", sub)
			continue
		}
		if !found || a.rev > best.rev {
			best, found = a, true
		}
	}
	return best.ip
}

// sendPod hands pod k, as the Mirror knows it now, to the LabelSink if it
// changed: a pod with neither a labels record nor a believed address is
// forgotten. m.mu is held.
func (m *Mirror) sendPod(k string) {
	ns, name, _ := strings.Cut(k, "/")
	st, known := m.pods[k]
	var ip netip.Addr
	if known {
		ip = m.podAddress(k, st)
	}
	if !known || !st.labelled && !ip.IsValid() {
		if _, sent := m.sentPods[k]; sent {
			delete(m.sentPods, k)
			if err := m.sink.DeletePod(ns, name); err != nil {
				m.log.Error("forget pod", "pod", k, "err", err)
			}
		}
		return
	}
	pod := Pod{Namespace: ns, Name: name, IP: ip, Labels: st.labels, Ports: st.ports}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	text := asText(pod)
	if m.sentPods[k] == text {
		return
	}
	if err := m.sink.SetPod(pod); err != nil {
		m.log.Error("pod", "pod", k, "err", err)
		return
	}
	m.sentPods[k] = text
}

// recheckNode hands node's pods to the LabelSink again (its subnet
// changed); m.mu is held.
func (m *Mirror) recheckNode(node string) {
	for _, k := range slices.Sorted(maps.Keys(m.byNode[node])) {
		m.sendPod(k)
	}
}

// SetService installs or replaces a service in the ServiceSink; one the
// node refuses has its old rules removed.
func (m *Mirror) SetService(svc sdn.Service) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.SetService(svc); err != nil {
		m.refuseService(svc.Namespace, svc.Name, err)
	}
}

// RefuseService removes a service the follower cannot read: in
// multitenant mode it is then unreachable, not open.
func (m *Mirror) RefuseService(namespace, name string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refuseService(namespace, name, err)
}

func (m *Mirror) refuseService(namespace, name string, err error) {
	m.log.Error("service refused", "service", namespace+"/"+name, "err", err)
	_ = m.sink.DeleteService(namespace, name)
}

// DeleteService removes a service.
func (m *Mirror) DeleteService(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.DeleteService(namespace, name); err != nil {
		m.log.Error("remove service", "service", namespace+"/"+name, "err", err)
	}
}

// SetPolicy installs or replaces a NetworkPolicy in the PolicySink; one
// it refuses leaves its previous version in force.
func (m *Mirror) SetPolicy(np *networkingv1.NetworkPolicy) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.SetPolicy(np); err != nil {
		m.log.Error("NetworkPolicy refused", "policy", np.Namespace+"/"+np.Name, "err", err)
	}
}

// RefusePolicy logs a NetworkPolicy the follower cannot read; its
// previous version stays in force.
func (m *Mirror) RefusePolicy(namespace, name string, err error) {
	m.log.Error("NetworkPolicy refused", "policy", namespace+"/"+name, "err", err)
}

// DeletePolicy removes a NetworkPolicy.
func (m *Mirror) DeletePolicy(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.DeletePolicy(namespace, name); err != nil {
		m.log.Error("remove NetworkPolicy", "policy", namespace+"/"+name, "err", err)
	}
}

// SetEgressFirewall installs or replaces an egress firewall in the
// EgressFirewallSink. One whose rules cannot be read (EgressRulesOf)
// denies its project's egress until it is fixed (fail closed).
func (m *Mirror) SetEgressFirewall(np *networkv1.EgressNetworkPolicy) {
	rules, err := EgressRulesOf(np)
	if err != nil {
		m.RefuseEgressFirewall(np.Namespace, np.Name, err)
		return
	}
	m.setEgressFirewall(np.Namespace, np.Name, rules)
}

// RefuseEgressFirewall denies the egress of the project of an egress
// firewall the follower cannot read, until it is fixed.
func (m *Mirror) RefuseEgressFirewall(namespace, name string, err error) {
	m.log.Error("egress firewall refused: the project's egress is denied until it is fixed", "firewall", namespace+"/"+name, "err", err)
	m.setEgressFirewall(namespace, name, DenyAllEgress())
}

func (m *Mirror) setEgressFirewall(namespace, name string, rules []EgressRule) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.SetEgressFirewall(namespace, name, rules); err != nil {
		m.log.Error("egress firewall", "firewall", namespace+"/"+name, "err", err)
	}
}

// DeleteEgressFirewall removes an egress firewall.
func (m *Mirror) DeleteEgressFirewall(namespace, name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.sink.DeleteEgressFirewall(namespace, name); err != nil {
		m.log.Error("remove egress firewall", "firewall", namespace+"/"+name, "err", err)
	}
}

func asText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func subnetString(p netip.Prefix) string {
	if !p.IsValid() {
		return "(none)"
	}
	return p.String()
}
