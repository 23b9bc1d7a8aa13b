package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
)

// Limits on a Spec. They keep a lab within one /24 underlay and within what
// a small machine creates in a few seconds.
const (
	MaxNodes       = 180
	MaxPodsPerNode = 250
)

// Host offsets inside Spec.Underlay: node i (1-based) is at
// Underlay.Addr()+NodeHostOffset+i, the external host at ExternalHostOffset.
const (
	NodeHostOffset     = 10
	ExternalHostOffset = 200
)

// DefaultUnderlay is the underlay network used when Spec.Underlay is the
// zero value. It exists only inside the lab's namespaces.
var DefaultUnderlay = netip.MustParsePrefix("172.30.0.0/24")

// DefaultProject is the single project used when Spec.Projects is empty.
const DefaultProject = "default"

// ErrInvalidSpec is returned (wrapped) by Spec.Validate and Create when a
// spec is unusable.
var ErrInvalidSpec = errors.New("lab: invalid spec")

var prefixRE = regexp.MustCompile(`^[a-z0-9-]{1,12}$`)

// Spec describes a lab topology. Its zero values are useful: Nodes 0 means
// 2 nodes, empty Projects means one project "default", a zero Underlay means
// DefaultUnderlay. PodsPerNode 0 means nodes without pods.
type Spec struct {
	// Prefix starts every namespace name, e.g. "gvs-demo"; required,
	// 1 to 12 characters of [a-z0-9-].
	Prefix string
	// Nodes is the number of node namespaces (default 2).
	Nodes int
	// PodsPerNode is the number of (empty) pod namespaces per node.
	PodsPerNode int
	// Projects are assigned to pods round-robin: pod i (0-based) on every
	// node belongs to Projects[i%len(Projects)].
	Projects []string
	// Underlay is the IPv4 network of the nodes (and the external host);
	// at most a /24. Default DefaultUnderlay.
	Underlay netip.Prefix
	// External adds the host "<prefix>-ext" on the underlay, standing for
	// the world beyond the nodes.
	External bool
}

// WithDefaults returns s with its zero values replaced by the defaults.
func (s Spec) WithDefaults() Spec {
	if s.Nodes == 0 {
		s.Nodes = 2
	}
	if len(s.Projects) == 0 {
		s.Projects = []string{DefaultProject}
	}
	if !s.Underlay.IsValid() {
		s.Underlay = DefaultUnderlay
	}
	s.Underlay = s.Underlay.Masked()
	return s
}

// Validate reports whether s, with defaults applied, describes a lab that
// can be built. Errors wrap ErrInvalidSpec.
func (s Spec) Validate() error {
	if err := validPrefix(s.Prefix); err != nil {
		return err
	}
	d := s.WithDefaults()
	switch {
	case d.Nodes < 1 || d.Nodes > MaxNodes:
		return fmt.Errorf("%w: Nodes %d not in 1..%d", ErrInvalidSpec, s.Nodes, MaxNodes)
	case d.PodsPerNode < 0 || d.PodsPerNode > MaxPodsPerNode:
		return fmt.Errorf("%w: PodsPerNode %d not in 0..%d", ErrInvalidSpec, s.PodsPerNode, MaxPodsPerNode)
	case !d.Underlay.Addr().Is4():
		return fmt.Errorf("%w: Underlay %s is not IPv4", ErrInvalidSpec, s.Underlay)
	case d.Underlay.Bits() > 24:
		return fmt.Errorf("%w: Underlay %s is smaller than a /24", ErrInvalidSpec, s.Underlay)
	case d.External && NodeHostOffset+d.Nodes >= ExternalHostOffset:
		return fmt.Errorf("%w: %d nodes collide with the external host address", ErrInvalidSpec, d.Nodes)
	}
	for i, p := range d.Projects {
		if p == "" {
			return fmt.Errorf("%w: Projects[%d] is empty", ErrInvalidSpec, i)
		}
	}
	return nil
}

func validPrefix(p string) error {
	if !prefixRE.MatchString(p) {
		return fmt.Errorf("%w: Prefix %q must be 1-12 characters of [a-z0-9-]", ErrInvalidSpec, p)
	}
	return nil
}

// hostAddr returns the underlay address at offset off.
func (s Spec) hostAddr(off int) netip.Addr {
	b := s.Underlay.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(off)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Namespace names. i and j are 1-based.
func underlayNS(prefix string) string    { return prefix + "-ul" }
func externalNS(prefix string) string    { return prefix + "-ext" }
func nodeName(i int) string              { return "n" + strconv.Itoa(i) }
func podName(i, j int) string            { return nodeName(i) + "-p" + strconv.Itoa(j) }
func nodeNS(prefix string, i int) string { return prefix + "-" + nodeName(i) }
func podNS(prefix string, i, j int) string {
	return prefix + "-" + podName(i, j)
}

// nameRE matches the part of a namespace name after "<prefix>-" for every
// namespace a lab creates.
var nameRE = regexp.MustCompile(`^(ul|ext|n[0-9]+(-p[0-9]+)?)$`)
