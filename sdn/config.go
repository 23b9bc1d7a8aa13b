package sdn

import (
	"github.com/gvswitch/gvs/packet"

	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Port numbers of the two fixed ports of the switch (docs/openshift-rules.md
// "Ports and registers"). Pods take numbers from FirstPodPort up.
const (
	PortVXLAN    uint32 = 1 // vxlan0, the VXLAN tunnel port
	PortTun0     uint32 = 2 // tun0, the gateway port into the host stack
	FirstPodPort uint32 = 3 // the first port number given to a pod
)

// DefaultMTU is the overlay MTU used when NodeConfig.MTU is zero: 1500 minus
// the 50 bytes of VXLAN encapsulation.
const DefaultMTU = 1450

// VXLANPort is the UDP port of VXLAN (RFC 7348); pods may not send to it.
const VXLANPort = 4789

// Sentinel errors returned (wrapped) by the validation functions.
var (
	// ErrInvalidConfig means a NodeConfig, Pod or RemoteNode is unusable.
	ErrInvalidConfig = errors.New("sdn: invalid configuration")
	// ErrUnsupportedMode means the mode is known but what was asked of it
	// is not implemented (gvs-switchd's networkpolicy mode, for now).
	ErrUnsupportedMode = errors.New("sdn: unsupported network plugin mode")
)

// Mode is the network plugin mode (OpenShift's networkPluginName). Both the
// long OpenShift names ("redhat/openshift-ovs-subnet") and the short ones
// ("subnet") are accepted everywhere; the empty Mode means ModeSubnet. Use
// ParseMode or Canonical before comparing modes.
type Mode string

// The network plugin modes.
const (
	ModeSubnet        Mode = "redhat/openshift-ovs-subnet"        // flat: every pod has VNID 0
	ModeMultitenant   Mode = "redhat/openshift-ovs-multitenant"   // per-project VNIDs, VNID 0 global
	ModeNetworkPolicy Mode = "redhat/openshift-ovs-networkpolicy" // per-namespace VNIDs, Kubernetes NetworkPolicy (sdn/netpol)
)

// ParseMode returns the canonical Mode for a long or short mode name ("" is
// ModeSubnet). Unknown names give an error wrapping ErrInvalidConfig.
func ParseMode(s string) (Mode, error) {
	switch strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "redhat/openshift-ovs-") {
	case "", "subnet":
		return ModeSubnet, nil
	case "multitenant":
		return ModeMultitenant, nil
	case "networkpolicy":
		return ModeNetworkPolicy, nil
	}
	return "", fmt.Errorf("%w: unknown mode %q (want subnet, multitenant or networkpolicy)", ErrInvalidConfig, s)
}

// Canonical returns the long name of m, or m itself if it is unknown.
func (m Mode) Canonical() Mode {
	c, err := ParseMode(string(m))
	if err != nil {
		return m
	}
	return c
}

// Short returns the short name of m ("subnet", "multitenant",
// "networkpolicy"), or m itself if it is unknown.
func (m Mode) Short() string {
	return strings.TrimPrefix(string(m.Canonical()), "redhat/openshift-ovs-")
}

// pluginID is the mode byte of the version note, as OpenShift numbers them.
func (m Mode) pluginID() uint8 {
	switch m.Canonical() {
	case ModeMultitenant:
		return 1
	case ModeNetworkPolicy:
		return 2
	}
	return 0
}

// NodeConfig is what the rule program needs to know about the local node.
// The zero MTU means DefaultMTU and the zero Mode means ModeSubnet.
type NodeConfig struct {
	NodeName        string
	NodeIP          netip.Addr     // underlay address: VXLAN source, DNS target
	Subnet          netip.Prefix   // this node's pod subnet
	ClusterNetworks []netip.Prefix // all pod subnets; Subnet lies in one of them
	ServiceNetwork  netip.Prefix   // service (ClusterIP) network, routed to tun0
	Mode            Mode
	MTU             int
	// Accounting commits every pod connection to the connection tracker
	// in subnet and multitenant modes too, for flow export only (IPFIX):
	// no rule of theirs looks at the state, so no verdict changes
	// (docs/openshift-rules.md, table 81). networkpolicy mode commits
	// them whatever it says.
	Accounting bool
}

// Validate reports whether the configuration can produce a rule program.
// Errors wrap ErrInvalidConfig.
func (c NodeConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		errs = append(errs, err)
	}
	if !c.NodeIP.Is4() || c.NodeIP.IsUnspecified() {
		bad("node IP %v is not a usable IPv4 address", c.NodeIP)
	}
	if err := checkPrefix("subnet", c.Subnet); err != nil {
		errs = append(errs, err)
	} else if c.Subnet.Bits() > 30 {
		bad("subnet %v is too small (need at most /30)", c.Subnet)
	}
	if len(c.ClusterNetworks) == 0 {
		bad("no cluster network")
	}
	inCluster := false
	for i, cn := range c.ClusterNetworks {
		if err := checkPrefix("cluster network", cn); err != nil {
			errs = append(errs, err)
			continue
		}
		if cn.Overlaps(multicastNet) {
			bad("cluster network %v overlaps multicast %v", cn, multicastNet)
		}
		for _, other := range c.ClusterNetworks[:i] {
			if cn.Overlaps(other) {
				bad("cluster networks %v and %v overlap", other, cn)
			}
		}
		if c.Subnet.IsValid() && cn.Bits() <= c.Subnet.Bits() && cn.Contains(c.Subnet.Addr()) {
			inCluster = true
		}
	}
	if c.Subnet.IsValid() && len(c.ClusterNetworks) > 0 && !inCluster {
		bad("subnet %v is not inside any cluster network", c.Subnet)
	}
	if err := checkPrefix("service network", c.ServiceNetwork); err != nil {
		errs = append(errs, err)
	} else {
		for _, cn := range c.ClusterNetworks {
			if cn.IsValid() && cn.Overlaps(c.ServiceNetwork) {
				bad("service network %v overlaps cluster network %v", c.ServiceNetwork, cn)
			}
		}
		if c.ServiceNetwork.Overlaps(multicastNet) {
			bad("service network %v overlaps multicast %v", c.ServiceNetwork, multicastNet)
		}
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65000) {
		bad("MTU %d out of range 576..65000", c.MTU)
	}
	return errors.Join(errs...)
}

func checkPrefix(what string, p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("%w: %s is not set", ErrInvalidConfig, what)
	case !p.Addr().Is4():
		return fmt.Errorf("%w: %s %v is not IPv4", ErrInvalidConfig, what, p)
	case p.Masked() != p:
		return fmt.Errorf("%w: %s %v has host bits set (want %v)", ErrInvalidConfig, what, p, p.Masked())
	case p.Bits() == 0:
		return fmt.Errorf("%w: %s %v covers everything", ErrInvalidConfig, what, p)
	}
	return nil
}

// EffectiveMTU returns c.MTU, or DefaultMTU when it is zero.
func (c NodeConfig) EffectiveMTU() int {
	if c.MTU == 0 {
		return DefaultMTU
	}
	return c.MTU
}

// Gateway returns the node's gateway address, held by tun0: the subnet's
// base address + 1.
func (c NodeConfig) Gateway() netip.Addr {
	return c.Subnet.Masked().Addr().Next()
}

// InCluster reports whether ip lies in one of the cluster networks.
func (c NodeConfig) InCluster(ip netip.Addr) bool {
	for _, cn := range c.ClusterNetworks {
		if cn.Contains(ip) {
			return true
		}
	}
	return false
}

// Pod is a pod attached to the local switch.
type Pod struct {
	Name      string
	Namespace string     // project
	IP        netip.Addr // in the node's subnet
	Port      uint32     // switch port, FirstPodPort or above
	VNID      uint32     // project VNID; ignored (0) in subnet mode
}

// MaxVNID is the largest VNID (24 bits, the size of a VXLAN VNI).
const MaxVNID = 1<<24 - 1

// CheckPod reports whether p can be attached to this node: its IP is a host
// address of the subnet other than the gateway, its port is a pod port and
// its VNID fits in 24 bits. Errors wrap ErrInvalidConfig.
func (c NodeConfig) CheckPod(p Pod) error {
	switch {
	case !p.IP.Is4() || !c.Subnet.Contains(p.IP):
		return fmt.Errorf("%w: pod %s IP %v is not in subnet %v", ErrInvalidConfig, p.Name, p.IP, c.Subnet)
	case p.IP == c.Subnet.Addr() || p.IP == c.Gateway() || p.IP == lastAddr(c.Subnet):
		return fmt.Errorf("%w: pod %s IP %v is reserved in subnet %v", ErrInvalidConfig, p.Name, p.IP, c.Subnet)
	case p.Port < FirstPodPort:
		return fmt.Errorf("%w: pod %s port %d is reserved (pods start at %d)", ErrInvalidConfig, p.Name, p.Port, FirstPodPort)
	case p.VNID > MaxVNID:
		return fmt.Errorf("%w: pod %s VNID %d exceeds %d", ErrInvalidConfig, p.Name, p.VNID, MaxVNID)
	}
	return nil
}

// RemoteNode is another node of the cluster: its underlay IP and pod subnet.
// It may also be a host that is not a node (OpenShift's F5 BIG-IP "ramp",
// sdn/ramp.go): a subnet tunnelled to an external VTEP.
type RemoteNode struct {
	Name   string
	IP     netip.Addr
	Subnet netip.Prefix
	// FixedVNID, when HasFixedVNID is set, is the one VNID traffic to and
	// from this host carries (the HostSubnet annotation
	// pod.network.openshift.io/fixed-vnid-host): nodes send to it with
	// that VNI instead of the source VNID, and accept from it only that
	// VNI (RampRules). Without it the host is treated as a node.
	FixedVNID    uint32
	HasFixedVNID bool
}

// CheckRemote reports whether n can be added as a peer of this node: IPv4
// underlay address other than ours, subnet inside a cluster network and not
// overlapping ours. Errors wrap ErrInvalidConfig.
func (c NodeConfig) CheckRemote(n RemoteNode) error {
	if !n.IP.Is4() || n.IP == c.NodeIP {
		return fmt.Errorf("%w: node %s IP %v is not a remote IPv4 address", ErrInvalidConfig, n.Name, n.IP)
	}
	if err := checkPrefix("node "+n.Name+" subnet", n.Subnet); err != nil {
		return err
	}
	if n.Subnet.Overlaps(c.Subnet) {
		return fmt.Errorf("%w: node %s subnet %v overlaps the local subnet %v", ErrInvalidConfig, n.Name, n.Subnet, c.Subnet)
	}
	if !c.InCluster(n.Subnet.Addr()) || !c.InCluster(lastAddr(n.Subnet)) {
		return fmt.Errorf("%w: node %s subnet %v is not inside a cluster network", ErrInvalidConfig, n.Name, n.Subnet)
	}
	if n.HasFixedVNID && n.FixedVNID > MaxVNID {
		return fmt.Errorf("%w: host %s fixed VNID %d exceeds %d", ErrInvalidConfig, n.Name, n.FixedVNID, MaxVNID)
	}
	return nil
}

// PodMAC returns the MAC address of the pod with IPv4 address ip:
// 0a:58 followed by the four address bytes (docs/openshift-rules.md).
func PodMAC(ip netip.Addr) [6]byte { return packet.PodMAC(as4(ip)) }

// FormatMAC formats a MAC address as ovs-ofctl and ip(8) print it.
func FormatMAC(m [6]byte) string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

var multicastNet = netip.MustParsePrefix("224.0.0.0/4")

// lastAddr returns the last (broadcast) address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	v := ipUint(p.Masked().Addr())
	v |= uint32(1)<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
