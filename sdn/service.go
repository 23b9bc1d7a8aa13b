package sdn

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/gvswitch/gvs/flowtable"
)

// viaHostMark is the ct_mark bit of connections that came in from tun0
// with a pod's source address: requests the host DNATed (a service), whose
// replies table 31 sends back to tun0 for the host to undo the DNAT.
const viaHostMark = 0x1

// Service is a Kubernetes Service as table 60 sees it: the project it
// belongs to (its VNID) and the ClusterIP ports its clients may use.
type Service struct {
	Namespace string
	Name      string
	ClusterIP netip.Addr // IPv4, in the service network
	VNID      uint32     // the VNID of Namespace
	Ports     []ServicePort
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Protocol uint8 // 6 (TCP), 17 (UDP) or 132 (SCTP)
	Port     uint16
}

// Service protocols, as IP protocol numbers.
const (
	ProtoTCP  = 6
	ProtoUDP  = 17
	ProtoSCTP = 132
)

// CheckService reports whether svc can be given rules on this node: its
// ClusterIP is an IPv4 address of the service network and every port has a
// protocol table 60 can match and a non-zero number.
func (c NodeConfig) CheckService(svc Service) error {
	ip := svc.ClusterIP.Unmap()
	if !ip.Is4() || !c.ServiceNetwork.Contains(ip) {
		return fmt.Errorf("%w: service %s/%s: ClusterIP %v is not in the service network %v",
			ErrInvalidConfig, svc.Namespace, svc.Name, svc.ClusterIP, c.ServiceNetwork)
	}
	if svc.VNID > MaxVNID {
		return fmt.Errorf("%w: service %s/%s: VNID %d is out of range", ErrInvalidConfig, svc.Namespace, svc.Name, svc.VNID)
	}
	for _, p := range svc.Ports {
		switch p.Protocol {
		case ProtoTCP, ProtoUDP, ProtoSCTP:
		default:
			return fmt.Errorf("%w: service %s/%s: protocol %d (want TCP, UDP or SCTP)", ErrInvalidConfig, svc.Namespace, svc.Name, p.Protocol)
		}
		if p.Port == 0 {
			return fmt.Errorf("%w: service %s/%s: port 0", ErrInvalidConfig, svc.Namespace, svc.Name)
		}
	}
	return nil
}

// ServiceCookie returns the cookie of the table 60 rules of the service
// with ClusterIP ip.
func ServiceCookie(ip netip.Addr) uint64 { return cookieClassService | uint64(ipUint(ip)) }

// ServiceFilter returns the del-flows filter that removes the rules of the
// service with ClusterIP ip.
func ServiceFilter(ip netip.Addr) string { return CookieFilter(ServiceCookie(ip)) }

// ServiceRules returns the table 60 rules of one service, tagged with
// ServiceCookie(svc.ClusterIP): in multitenant mode, one rule per port that
// lets the pods of the service's project (reg0 = its VNID) reach it through
// the host; a service of a global project (VNID 0) is open to every pod.
// Pods of VNID 0 reach every service without rules of their own (table 60,
// priority 200), and anything else is dropped there. In the other modes
// table 60 sends every service packet to the host and ServiceRules returns
// nil (networkpolicy mode enforces policy on the backend's side, where the
// host's DNAT has kept the client's address).
func ServiceRules(cfg NodeConfig, svc Service) ([]*flowtable.Rule, error) {
	if cfg.Mode.Canonical() != ModeMultitenant {
		return nil, nil
	}
	if err := cfg.CheckService(svc); err != nil {
		return nil, err
	}
	ports := slices.Clone(svc.Ports)
	slices.SortFunc(ports, func(a, b ServicePort) int {
		if a.Protocol != b.Protocol {
			return int(a.Protocol) - int(b.Protocol)
		}
		return int(a.Port) - int(b.Port)
	})
	ports = slices.Compact(ports)
	c := ServiceCookie(svc.ClusterIP)
	dst := flowtable.NwDst(svc.ClusterIP.Unmap())
	var b flowtable.Builder
	for _, p := range ports {
		var proto flowtable.Cond
		switch p.Protocol {
		case ProtoTCP:
			proto = flowtable.TCP()
		case ProtoUDP:
			proto = flowtable.UDP()
		default:
			proto = flowtable.SCTP()
		}
		m := match{proto, dst, flowtable.TpDst(p.Port)}
		if svc.VNID != 0 {
			m = append(match{flowtable.Reg(0, svc.VNID)}, m...)
		}
		b.Add(TableService, 100, c, m, outputTun0())
	}
	return b.Rules()
}
