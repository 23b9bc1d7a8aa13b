// Package node keeps one node's OpenShift rule program live in a flow
// table: the setup rules of the node's subnet, the rules of every remote
// node, of every local pod with its project's VNID, and the per-VNID
// isolation rules that follow a VNID's first and last local pod. Every
// change is one atomic table update (flowtable.Table.Apply), computed from
// the generators in package sdn; nothing is parsed.
//
// A Program knows rules, not devices: the daemon's pod lifecycle creates
// TAPs and switch ports and tells the Program which pods have rules; a
// source of cluster state (the etcd registry, Kubernetes) tells it about
// remote nodes, project VNIDs and subnet changes. A policy engine sits
// beside it, in tables of its own.
package node

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/sdn"
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/netpol"
)

// ErrNoVNID is returned for a pod whose project has no VNID (in the modes
// with tenant isolation): a pod is never given VNID 0 by default.
var ErrNoVNID = errors.New("the pod's project has no VNID")

// ErrUnknownPod is returned by RemovePod for an address with no pod.
var ErrUnknownPod = errors.New("no pod with that address")

// Peers is the set of underlay addresses whose VXLAN the node accepts
// (vxlan.Peers); the Program keeps it equal to its remote nodes.
type Peers interface {
	Add(ip netip.Addr) error
	Remove(ip netip.Addr)
}

// Config configures a Program.
type Config struct {
	// Table receives the rules. Required.
	Table *flowtable.Table
	// Node is the node's configuration; Subnet may be invalid (no subnet
	// yet). Required to validate otherwise.
	Node sdn.NodeConfig
	// Peers, if set, follows the remote nodes.
	Peers Peers
	// Projects are the project VNIDs known at start. Without a control
	// plane, set ImplicitDefault: project default is then VNID 0 unless
	// listed (as gvs-master makes it).
	Projects        map[string]uint32
	ImplicitDefault bool
}

// Program is one node's live rule program. Its methods are safe for
// concurrent use; each holds the Program's lock only for its table update,
// never across a system call other than the table's.
type Program struct {
	table *flowtable.Table
	peers Peers

	mu       sync.Mutex
	node     sdn.NodeConfig
	remotes  map[netip.Addr]sdn.RemoteNode
	pods     map[netip.Addr]sdn.Pod
	vnids    map[uint32]int // VNID → local pods using it
	projects map[string]uint32
	services map[string]sdn.Service                 // by namespace/name (services.go)
	pol      *netpol.Cluster                        // networkpolicy mode only (policy.go)
	polText  map[netip.Addr]string                  // a local pod's installed policy rules, as text
	fw       map[string]map[string][]sdn.EgressRule // egress firewalls by namespace and object (egressfw.go)
	mcast    map[string]bool                        // projects opted in to multicast (multicast.go)
	eip      map[string][]sdn.EgressIPHost          // egress IPs by project (egressip.go)
	changed  chan struct{}                          // closed and replaced when projects change
}

// New returns a Program; it installs nothing (see Setup).
func New(cfg Config) (*Program, error) {
	if cfg.Table == nil {
		return nil, errors.New("node: Config.Table is required")
	}
	p := &Program{table: cfg.Table, peers: cfg.Peers, node: cfg.Node,
		remotes: map[netip.Addr]sdn.RemoteNode{}, pods: map[netip.Addr]sdn.Pod{}, vnids: map[uint32]int{},
		projects: map[string]uint32{}, services: map[string]sdn.Service{}, changed: make(chan struct{}),
		polText: map[netip.Addr]string{}, fw: map[string]map[string][]sdn.EgressRule{}, mcast: map[string]bool{},
		eip: map[string][]sdn.EgressIPHost{}}
	if cfg.Node.Mode.Canonical() == sdn.ModeNetworkPolicy {
		p.pol = netpol.NewCluster()
		for name, v := range cfg.Projects {
			p.pol.SetNamespace(netpol.Namespace{Name: name, VNID: v})
		}
	}
	if cfg.ImplicitDefault {
		p.projects[master.DefaultProject] = master.GlobalVNID
	}
	maps.Copy(p.projects, cfg.Projects)
	return p, nil
}

func cookieFilter(c uint64) flowtable.Filter {
	return flowtable.Filter{Table: -1, Cookie: c, CookieMask: ^uint64(0)}
}

// Setup installs the setup rules of the node's configuration (once, at
// start).
func (p *Program) Setup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	rules, err := sdn.SetupRules(p.node)
	if err != nil {
		return fmt.Errorf("setup rules: %w", err)
	}
	if err := p.table.Add(rules...); err != nil {
		return fmt.Errorf("setup rules: %w", err)
	}
	return nil
}

// Node returns the node's configuration (ChangeSubnet replaces it).
func (p *Program) Node() sdn.NodeConfig {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

// isolated reports whether pods carry their project's VNID: in
// multitenant mode, and in networkpolicy mode, where it names their
// namespace for namespace selectors.
func (p *Program) isolated() bool {
	m := p.node.Mode.Canonical()
	return m == sdn.ModeMultitenant || m == sdn.ModeNetworkPolicy
}

// AddRemote installs (or replaces) a remote node's rules and accepts its
// VXLAN.
func (p *Program) AddRemote(rn sdn.RemoteNode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.node.CheckRemote(rn); err != nil {
		return err
	}
	rules, err := sdn.NodeRules(p.node, rn)
	var dels []flowtable.Filter
	var fan []*flowtable.Rule
	if err == nil {
		add, drop := rn.IP, netip.Addr{}
		if rn.HasFixedVNID { // a host that is not a node gets no multicast (sdn/ramp.go)
			add, drop = drop, add
		}
		dels, fan, err = p.fanoutUpdate(p.remoteIPs(add, drop))
	}
	if err == nil {
		dels = append(dels, cookieFilter(sdn.NodeCookie(rn.IP)))
		err = p.table.Apply(dels, append(rules, fan...))
	}
	if err != nil {
		return fmt.Errorf("remote node %s: %w", rn.Name, err)
	}
	p.remotes[rn.IP] = rn
	if p.peers != nil {
		if err := p.peers.Add(rn.IP); err != nil {
			return fmt.Errorf("remote node %s: %w", rn.Name, err)
		}
	}
	return nil
}

// RemoveRemote removes a remote node's rules and stops accepting its
// VXLAN. An unknown node is not an error.
func (p *Program) RemoveRemote(ip netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	dels, fan, err := p.fanoutUpdate(p.remoteIPs(netip.Addr{}, ip))
	if err == nil {
		err = p.table.Apply(append(dels, cookieFilter(sdn.NodeCookie(ip))), fan)
	}
	if err != nil {
		return fmt.Errorf("remove remote %s: %w", ip, err)
	}
	delete(p.remotes, ip)
	if p.peers != nil {
		p.peers.Remove(ip)
	}
	return nil
}

// Remotes lists the remote nodes by name.
func (p *Program) Remotes() []sdn.RemoteNode {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Collect(maps.Values(p.remotes))
	slices.SortFunc(out, func(a, b sdn.RemoteNode) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Remote returns the remote node with underlay address ip.
func (p *Program) Remote(ip netip.Addr) (sdn.RemoteNode, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	rn, ok := p.remotes[ip]
	return rn, ok
}

// ProjectVNID returns a project's VNID; in the modes without tenant
// isolation every project is VNID 0.
func (p *Program) ProjectVNID(project string) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.projectVNID(project)
}

func (p *Program) projectVNID(project string) (uint32, bool) {
	if !p.isolated() {
		return 0, true
	}
	v, ok := p.projects[project]
	return v, ok
}

// ProjectsChanged returns a channel closed at the next change of a
// project's VNID (for waiting on a new project).
func (p *Program) ProjectsChanged() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// SetProjectVNID records a project's VNID and re-tags the project's local
// pods that have another one: each pod's rules are replaced by rules with
// the new VNID, and the VNID isolation rules follow the first and last
// local pod of each VNID, all in one atomic table update. It returns the
// pods re-tagged, with their old VNIDs.
func (p *Program) SetProjectVNID(project string, vnid uint32) ([]sdn.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old, known := p.projects[project]
	moved, err := p.setProjectVNID(project, vnid)
	if _, has := p.fw[project]; has && p.isolated() && (!known || old != vnid) {
		// The firewall moves with the project: the old VNID's is what its
		// other projects leave, the new one's gains it.
		if known && old != 0 {
			err = errors.Join(err, p.renderEgressVNID(old))
		}
		if vnid != 0 {
			err = errors.Join(err, p.renderEgressVNID(vnid))
		}
	}
	err = errors.Join(err, p.rerenderEgressIP(project, known, old, vnid))
	if p.policyMode() && (!known || old != vnid) {
		// Namespace selectors name VNIDs: every local pod's rules may
		// change (a VNID changes rarely: at creation).
		ns, _ := p.pol.Namespace(project)
		ns.Name, ns.VNID = project, vnid
		p.pol.SetNamespace(ns)
		err = errors.Join(err, p.syncPolicy(slices.Collect(maps.Keys(p.pods))))
	}
	return moved, err
}

func (p *Program) setProjectVNID(project string, vnid uint32) ([]sdn.Pod, error) {
	oldVNID, known := p.projects[project]
	if old, ok := p.projects[project]; !ok || old != vnid {
		p.projects[project] = vnid
		close(p.changed)
		p.changed = make(chan struct{})
	}
	if !p.isolated() {
		return nil, nil
	}
	dels, rules, commitServices, err := p.retagServices(project)
	errs := []error{err}
	add := func(rs []*flowtable.Rule, err error) {
		rules = append(rules, rs...)
		errs = append(errs, err)
	}
	var moved []sdn.Pod
	counts := maps.Clone(p.vnids)
	for _, pod := range p.pods {
		if pod.Namespace != project || pod.VNID == vnid {
			continue
		}
		dels = append(dels, cookieFilter(sdn.PodCookie(pod.IP)))
		np := pod
		np.VNID = vnid
		add(sdn.PodRules(p.node, np))
		if counts[pod.VNID]--; counts[pod.VNID] == 0 && pod.VNID != 0 {
			dels = append(dels, cookieFilter(sdn.VNIDCookie(pod.VNID)))
		}
		if counts[vnid] == 0 && vnid != 0 {
			add(sdn.VNIDRules(p.node, vnid))
		}
		counts[vnid]++
		moved = append(moved, pod)
	}
	if known && oldVNID != vnid || !known && p.mcast[project] {
		// The VNIDs' multicast rules follow the pods and the opt-in.
		change := map[netip.Addr]*sdn.Pod{}
		for _, pod := range moved {
			np := pod
			np.VNID = vnid
			change[pod.IP] = &np
		}
		md, ma, err := p.multicastUpdate(change, oldVNID, vnid)
		dels, rules, errs = append(dels, md...), append(rules, ma...), append(errs, err)
	}
	if len(dels) == 0 {
		return nil, nil
	}
	err = errors.Join(errs...)
	if err == nil {
		err = p.table.Apply(dels, rules)
	}
	if err != nil {
		return nil, fmt.Errorf("re-tag project %s: %w", project, err)
	}
	commitServices()
	for v, n := range counts {
		if n <= 0 {
			delete(counts, v)
		}
	}
	p.vnids = counts
	for _, pod := range moved {
		np := pod
		np.VNID = vnid
		p.pods[pod.IP] = np
	}
	return moved, nil
}

// AddPod installs a pod's rules with its project's VNID (pod.VNID is
// ignored: the Program's project map decides, under its lock, so that a
// concurrent re-tag cannot be missed), with the VNID's isolation rules if
// it is the VNID's first local pod, in one table update. It returns the
// pod as installed.
func (p *Program) AddPod(pod sdn.Pod) (sdn.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, dup := p.pods[pod.IP]; dup {
		return pod, fmt.Errorf("%w: address %v has a pod already", sdn.ErrInvalidConfig, pod.IP)
	}
	v, ok := p.projectVNID(pod.Namespace)
	if !ok {
		return pod, fmt.Errorf("%w: project %q", ErrNoVNID, pod.Namespace)
	}
	pod.VNID = v
	if err := p.node.CheckPod(pod); err != nil {
		return pod, err
	}
	rules, err := sdn.PodRules(p.node, pod)
	if err != nil {
		return pod, err
	}
	if p.isolated() && pod.VNID != 0 && p.vnids[pod.VNID] == 0 {
		vr, err := sdn.VNIDRules(p.node, pod.VNID)
		if err != nil {
			return pod, err
		}
		rules = append(rules, vr...)
	}
	var polText string
	if p.policyMode() {
		pr, t, err := p.policyRules(pod)
		if err != nil {
			return pod, err
		}
		rules, polText = append(rules, pr...), t
	}
	var dels []flowtable.Filter
	if p.multicastOn(pod.VNID) {
		md, ma, err := p.multicastUpdate(map[netip.Addr]*sdn.Pod{pod.IP: &pod}, pod.VNID)
		if err != nil {
			return pod, err
		}
		dels, rules = md, append(rules, ma...)
	}
	if err := p.table.Apply(dels, rules); err != nil {
		return pod, err
	}
	p.vnids[pod.VNID]++
	p.pods[pod.IP] = pod
	if polText != "" {
		p.polText[pod.IP] = polText
	}
	return pod, nil
}

// RemovePod removes a pod's rules (and its VNID's, if it was the VNID's
// last local pod). A pod the Program does not know is not an error.
func (p *Program) RemovePod(ip netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[ip]
	if !ok {
		return nil
	}
	dels := []flowtable.Filter{cookieFilter(sdn.PodCookie(ip))}
	if p.policyMode() {
		dels = append(dels, cookieFilter(sdn.IngressCookie(ip)), cookieFilter(sdn.EgressCookie(ip)))
	}
	last := p.vnids[pod.VNID] <= 1
	if p.isolated() && pod.VNID != 0 && last {
		dels = append(dels, cookieFilter(sdn.VNIDCookie(pod.VNID)))
	}
	var adds []*flowtable.Rule
	if p.multicastOn(pod.VNID) {
		md, ma, err := p.multicastUpdate(map[netip.Addr]*sdn.Pod{ip: nil}, pod.VNID)
		if err != nil {
			return fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		dels, adds = append(dels, md...), ma
	}
	if err := p.table.Apply(dels, adds); err != nil {
		return fmt.Errorf("pod %s: remove rules: %w", pod.Name, err)
	}
	if last {
		delete(p.vnids, pod.VNID)
	} else {
		p.vnids[pod.VNID]--
	}
	delete(p.pods, ip)
	delete(p.polText, ip)
	return nil
}

// Pod returns the pod with address ip as its rules have it.
func (p *Program) Pod(ip netip.Addr) (sdn.Pod, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pod, ok := p.pods[ip]
	return pod, ok
}

// PodRules reports how many of the pod's rules are in the table and how
// many it should have (CNI CHECK).
func (p *Program) PodRules(ip netip.Addr) (got, want int) {
	cookie := sdn.PodCookie(ip)
	for _, r := range p.table.Rules() {
		if r.Cookie == cookie {
			got++
		}
	}
	return got, sdn.PodRuleCount
}

// Withdrawal is what ChangeSubnet took away.
type Withdrawal struct {
	// Old is the node's configuration before.
	Old sdn.NodeConfig
	// Pods had addresses of the old subnet: their rules are gone, and
	// their ports must go too (the caller's part).
	Pods []sdn.Pod
	// Remotes held records overlapping the new subnet (older than the
	// registry's claim): their rules are gone.
	Remotes []netip.Addr
}

// ChangeSubnet moves the node from its current subnet to sub; an invalid
// sub withdraws the current subnet (the node then has none). In one table
// update: the old setup rules (exactly those: rules added by hand stay),
// every local pod's rules, every VNID rule, and remote nodes whose subnet
// overlaps sub are deleted, and the setup rules of sub are installed. On
// failure nothing changed.
func (p *Program) ChangeSubnet(sub netip.Prefix) (Withdrawal, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.node
	w := Withdrawal{Old: old}
	if old.Subnet == sub {
		return w, nil
	}
	nn := old
	nn.Subnet = sub
	if sub.IsValid() {
		if err := nn.Validate(); err != nil {
			return w, fmt.Errorf("new subnet: %w", err)
		}
	}
	var dels []flowtable.Filter
	var adds []*flowtable.Rule
	if old.Subnet.IsValid() {
		prev, err := sdn.SetupRules(old)
		if err != nil {
			return w, fmt.Errorf("old setup rules: %w", err)
		}
		for _, r := range prev {
			dels = append(dels, flowtable.Filter{Table: int(r.Table), Match: r.Match, Strict: true,
				Priority: r.Priority, CookieMask: ^uint64(0)})
		}
	}
	if sub.IsValid() {
		var err error
		if adds, err = sdn.SetupRules(nn); err != nil {
			return w, fmt.Errorf("new setup rules: %w", err)
		}
	}
	for ip, pod := range p.pods {
		dels = append(dels, cookieFilter(sdn.PodCookie(ip)))
		w.Pods = append(w.Pods, pod)
	}
	for v := range p.vnids {
		if v != 0 {
			dels = append(dels, cookieFilter(sdn.VNIDCookie(v)))
		}
		dels = append(dels, cookieFilter(sdn.MulticastCookie(v)))
	}
	var kept []netip.Addr
	for ip, rn := range p.remotes {
		if sub.IsValid() && rn.Subnet.Overlaps(sub) {
			dels = append(dels, cookieFilter(sdn.NodeCookie(ip)))
			w.Remotes = append(w.Remotes, ip)
		} else if !rn.HasFixedVNID { // a host that is not a node gets no multicast
			kept = append(kept, ip)
		}
	}
	// Table 111 follows the remote nodes that stay (the new setup rules
	// hold only its default); without a subnet it goes with the rest.
	fd, fa, err := p.fanoutUpdate(kept)
	if err != nil {
		return w, fmt.Errorf("subnet %v → %v: %w", old.Subnet, sub, err)
	}
	dels = append(dels, fd...)
	if sub.IsValid() {
		adds = append(adds, fa...)
	}
	if err := p.table.Apply(dels, adds); err != nil {
		return Withdrawal{Old: old}, fmt.Errorf("subnet %v → %v: rules: %w", old.Subnet, sub, err)
	}
	p.pods = map[netip.Addr]sdn.Pod{}
	p.vnids = map[uint32]int{}
	for _, ip := range w.Remotes {
		delete(p.remotes, ip)
		if p.peers != nil {
			p.peers.Remove(ip)
		}
	}
	p.node = nn
	return w, nil
}
