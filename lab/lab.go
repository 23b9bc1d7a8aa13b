package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// StateRoot holds one state directory per lab prefix.
const StateRoot = "/run/gvs-lab"

// BridgeName is the name of the underlay bridge in "<prefix>-ul".
const BridgeName = "br0"

// Sentinel errors.
var (
	// ErrExists means a lab with the same prefix (or one of its
	// namespaces) already exists; DestroyPrefix removes it.
	ErrExists = errors.New("lab: already exists")
	// ErrNotFound means Load found no lab with that prefix.
	ErrNotFound = errors.New("lab: not found")
	// ErrUnknownNS means a namespace name does not belong to the lab.
	ErrUnknownNS = errors.New("lab: namespace not in this lab")
)

// Lab is a created (or loaded) topology. Its exported fields are its JSON
// description, saved as lab.json in StateDir. Methods are safe for
// concurrent use.
type Lab struct {
	Spec
	// Nodes are the node namespaces, in order n1..nN.
	Nodes []Node
	// External is the external host, nil unless Spec.External.
	External *Host

	mu    sync.Mutex
	procs []*Proc
}

// Node is one node namespace.
type Node struct {
	// Name is the node's short name, "n1".."nN"; unique in the lab.
	Name string
	// NS is the namespace name, "<prefix>-n1"; NSPath its bind mount.
	NS     string
	NSPath string
	// IP is the address of eth0 on the underlay.
	IP netip.Addr
	// Pods are the pod namespaces of this node.
	Pods []Pod
}

// Pod is one (empty) pod namespace.
type Pod struct {
	// Name is "n1-p1" etc.; unique in the lab.
	Name string
	// NS is the namespace name, "<prefix>-n1-p1"; NSPath its bind mount.
	NS     string
	NSPath string
	// Project is the project the pod belongs to.
	Project string
	// Node is the index of the pod's node in Lab.Nodes (0-based).
	Node int
}

// Host is a namespace with one address on the underlay.
type Host struct {
	NS     string
	NSPath string
	IP     netip.Addr
}

// StateDir returns the lab's state directory, /run/gvs-lab/<prefix>. It
// holds lab.json, the pids file, and is a good place for logs; Destroy
// removes it.
func (l *Lab) StateDir() string { return stateDir(l.Prefix) }

func stateDir(prefix string) string { return filepath.Join(StateRoot, prefix) }

// UnderlayNS returns the name of the underlay namespace, which holds the
// bridge BridgeName.
func (l *Lab) UnderlayNS() string { return underlayNS(l.Prefix) }

// Pods returns every pod of the lab, node by node.
func (l *Lab) Pods() []Pod {
	var out []Pod
	for _, n := range l.Nodes {
		out = append(out, n.Pods...)
	}
	return out
}

// Namespaces returns the names of all the lab's namespaces: pods, nodes,
// the external host, and the underlay last.
func (l *Lab) Namespaces() []string {
	var out []string
	for _, n := range l.Nodes {
		for _, p := range n.Pods {
			out = append(out, p.NS)
		}
	}
	for _, n := range l.Nodes {
		out = append(out, n.NS)
	}
	if l.External != nil {
		out = append(out, l.External.NS)
	}
	return append(out, l.UnderlayNS())
}

func (l *Lab) hasNS(name string) bool {
	if name == "" {
		return false
	}
	for _, n := range l.Namespaces() {
		if n == name {
			return true
		}
	}
	return false
}

// describe fills in the lab description for a defaulted, valid spec.
func describe(s Spec) *Lab {
	l := &Lab{Spec: s}
	for i := 1; i <= s.Nodes; i++ {
		n := Node{Name: nodeName(i), NS: nodeNS(s.Prefix, i), IP: s.hostAddr(NodeHostOffset + i)}
		n.NSPath = NSPath(n.NS)
		for j := 1; j <= s.PodsPerNode; j++ {
			p := Pod{Name: podName(i, j), NS: podNS(s.Prefix, i, j), Project: s.Projects[(j-1)%len(s.Projects)], Node: i - 1}
			p.NSPath = NSPath(p.NS)
			n.Pods = append(n.Pods, p)
		}
		l.Nodes = append(l.Nodes, n)
	}
	if s.External {
		ns := externalNS(s.Prefix)
		l.External = &Host{NS: ns, NSPath: NSPath(ns), IP: s.hostAddr(ExternalHostOffset)}
	}
	return l
}

// Create builds the topology described by spec. It fails with ErrExists if
// any of its namespaces or its state directory's lab.json already exist,
// and on any failure removes whatever it created. Needs root.
func Create(ctx context.Context, spec Spec) (*Lab, error) {
	return create(ctx, nil, spec)
}

// create is Create; afterNS, if not nil, is called after each namespace is
// made (tests use it to fail midway).
func create(ctx context.Context, afterNS func(name string), spec Spec) (_ *Lab, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	l := describe(spec.WithDefaults())
	names := l.Namespaces()
	for _, n := range names {
		if exists(n) {
			return nil, fmt.Errorf("%w: namespace %s", ErrExists, n)
		}
	}
	if _, err := os.Stat(filepath.Join(l.StateDir(), labFile)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExists, filepath.Join(l.StateDir(), labFile))
	}
	if err := ensureNetnsDir(); err != nil {
		return nil, err
	}

	var created []string
	defer func() {
		if err == nil {
			return
		}
		var errs []error
		for i := len(created) - 1; i >= 0; i-- {
			errs = append(errs, deleteNamed(created[i]))
		}
		errs = append(errs, os.RemoveAll(l.StateDir()))
		if cerr := errors.Join(errs...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("lab: cleanup after failed create: %w", cerr))
		}
	}()
	mk := func(name string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := createNamed(name); err != nil {
			return err
		}
		created = append(created, name)
		if afterNS != nil {
			afterNS(name)
		}
		return nil
	}

	// The underlay: bridge br0, up.
	ul := l.UnderlayNS()
	if err := mk(ul); err != nil {
		return nil, err
	}
	ulh, err := openHandle(ul)
	if err != nil {
		return nil, err
	}
	defer ulh.close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
	if err := ulh.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("lab: %s: add bridge: %w", ul, err)
	}
	if err := ulh.up("lo", BridgeName); err != nil {
		return nil, fmt.Errorf("lab: %s: %w", ul, err)
	}

	for _, n := range l.Nodes {
		if err := mk(n.NS); err != nil {
			return nil, err
		}
		if err := attach(ulh, n.Name, n.NS, netip.PrefixFrom(n.IP, l.Underlay.Bits())); err != nil {
			return nil, err
		}
		for _, p := range n.Pods {
			if err := mk(p.NS); err != nil {
				return nil, err
			}
			if err := loUp(p.NS); err != nil {
				return nil, err
			}
		}
	}
	if x := l.External; x != nil {
		if err := mk(x.NS); err != nil {
			return nil, err
		}
		if err := attach(ulh, "ext", x.NS, netip.PrefixFrom(x.IP, l.Underlay.Bits())); err != nil {
			return nil, err
		}
	}
	if err := l.save(); err != nil {
		return nil, err
	}
	return l, nil
}

// handle is a netlink handle bound to a namespace.
type handle struct {
	*netlink.Handle
	ns   netns.NsHandle
	name string
}

func openHandle(name string) (*handle, error) {
	ns, err := netns.GetFromPath(NSPath(name))
	if err != nil {
		return nil, fmt.Errorf("lab: open netns %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("lab: netlink in %s: %w", name, err)
	}
	return &handle{Handle: h, ns: ns, name: name}, nil
}

// close releases the handle; the namespace must not stay referenced by us.
func (h *handle) close() {
	h.Handle.Close()
	h.ns.Close()
}

func (h *handle) up(links ...string) error {
	for _, name := range links {
		link, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("set %s up: %w", name, err)
		}
	}
	return nil
}

func loUp(name string) error {
	h, err := openHandle(name)
	if err != nil {
		return err
	}
	defer h.close()
	if err := h.up("lo"); err != nil {
		return fmt.Errorf("lab: %s: %w", name, err)
	}
	return nil
}

// attach connects namespace ns to the underlay bridge: a veth whose end
// "eth0" (address addr, up) is in ns and whose end port is a port of br0.
func attach(ulh *handle, port, ns string, addr netip.Prefix) error {
	h, err := openHandle(ns)
	if err != nil {
		return err
	}
	defer h.close()
	br, err := ulh.LinkByName(BridgeName)
	if err != nil {
		return fmt.Errorf("lab: %s: %w", ulh.name, err)
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: port},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(h.ns)),
	}
	if err := ulh.LinkAdd(veth); err != nil {
		return fmt.Errorf("lab: veth %s/%s - %s/eth0: %w", ulh.name, port, ns, err)
	}
	p, err := ulh.LinkByName(port)
	if err != nil {
		return fmt.Errorf("lab: %s: %w", ulh.name, err)
	}
	if err := ulh.LinkSetMaster(p, br); err != nil {
		return fmt.Errorf("lab: %s: attach %s to %s: %w", ulh.name, port, BridgeName, err)
	}
	if err := ulh.LinkSetUp(p); err != nil {
		return fmt.Errorf("lab: %s: set %s up: %w", ulh.name, port, err)
	}
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("lab: %s: %w", ns, err)
	}
	ipnet := &net.IPNet{IP: net.IP(addr.Addr().AsSlice()), Mask: net.CIDRMask(addr.Bits(), 32)}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("lab: %s: address %s on eth0: %w", ns, addr, err)
	}
	if err := h.up("lo", "eth0"); err != nil {
		return fmt.Errorf("lab: %s: %w", ns, err)
	}
	return nil
}

// labJSON is the form of lab.json. Lab cannot be marshalled as it is: its
// Nodes and External fields hide those of the embedded Spec.
type labJSON struct {
	Spec     Spec
	Nodes    []Node
	External *Host `json:",omitempty"`
}

// MarshalJSON encodes the lab's description, the Spec as a field of its own.
func (l *Lab) MarshalJSON() ([]byte, error) {
	return json.Marshal(labJSON{Spec: l.Spec, Nodes: l.Nodes, External: l.External})
}

// UnmarshalJSON decodes what MarshalJSON encodes.
func (l *Lab) UnmarshalJSON(b []byte) error {
	var j labJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	l.Spec, l.Nodes, l.External = j.Spec, j.Nodes, j.External
	return nil
}

const (
	labFile  = "lab.json"
	pidsFile = "pids"
)

func (l *Lab) save() error {
	if err := os.MkdirAll(l.StateDir(), 0o755); err != nil {
		return fmt.Errorf("lab: state dir: %w", err)
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	tmp := filepath.Join(l.StateDir(), labFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("lab: save: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(l.StateDir(), labFile)); err != nil {
		return fmt.Errorf("lab: save: %w", err)
	}
	return nil
}

// Load reopens the running lab with this prefix from its lab.json. It fails
// with ErrNotFound if there is none. Processes started by another Lab value
// are not Procs of the loaded one, but its Destroy still ends them (from
// the pids file).
func Load(prefix string) (*Lab, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(stateDir(prefix), labFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("lab: load: %w", err)
	}
	l := new(Lab)
	if err := json.Unmarshal(b, l); err != nil {
		return nil, fmt.Errorf("lab: load %s: %w", prefix, err)
	}
	if l.Prefix != prefix {
		return nil, fmt.Errorf("lab: load %s: lab.json has prefix %q", prefix, l.Prefix)
	}
	return l, nil
}

// Destroy stops every process started in the lab (its own Procs and those
// in the pids file), deletes every namespace of the lab (which removes its
// links) and the state directory. It is idempotent; errors are joined.
func (l *Lab) Destroy() error {
	var errs []error
	l.mu.Lock()
	procs := l.procs
	l.procs = nil
	l.mu.Unlock()
	errs = append(errs, stopAll(procs))
	errs = append(errs, killRecorded(l.StateDir()))
	for _, ns := range l.Namespaces() {
		errs = append(errs, deleteNamed(ns))
	}
	if err := os.RemoveAll(l.StateDir()); err != nil {
		errs = append(errs, fmt.Errorf("lab: %w", err))
	}
	return errors.Join(errs...)
}

// DestroyPrefix removes a lab by prefix, whether or not its lab.json is
// still there: it ends the processes recorded in its pids file (by process
// id, after checking their start time), deletes every namespace in
// /run/netns named "<prefix>-ul", "<prefix>-ext", "<prefix>-nI" or
// "<prefix>-nI-pJ" (never another name, even if it starts with prefix+"-"),
// and removes the state directory. Nothing to remove is not an error.
func DestroyPrefix(prefix string) error {
	if err := validPrefix(prefix); err != nil {
		return err
	}
	var errs []error
	if l, err := Load(prefix); err == nil {
		errs = append(errs, l.Destroy())
	} else if !errors.Is(err, ErrNotFound) {
		errs = append(errs, err)
	}
	errs = append(errs, killRecorded(stateDir(prefix)))
	ents, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("lab: %w", err))
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix+"-")
		if ok && nameRE.MatchString(rest) {
			errs = append(errs, deleteNamed(e.Name()))
		}
	}
	if err := os.RemoveAll(stateDir(prefix)); err != nil {
		errs = append(errs, fmt.Errorf("lab: %w", err))
	}
	return errors.Join(errs...)
}
