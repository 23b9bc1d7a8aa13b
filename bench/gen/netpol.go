package gen

import (
	"fmt"
	"net/netip"
	"strings"
)

// NetpolTarget is one probe: an address and port, and a protocol (tcp,
// udp or sctp).
type NetpolTarget struct {
	Addr  netip.AddrPort
	Proto string
}

// String is "PROTO/IP:PORT".
func (t NetpolTarget) String() string { return t.Proto + "/" + t.Addr.String() }

// ParseNetpolTarget reads "PROTO/IP:PORT".
func ParseNetpolTarget(s string) (NetpolTarget, error) {
	proto, addr, ok := strings.Cut(s, "/")
	ap, err := netip.ParseAddrPort(addr)
	if !ok || err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
		return NetpolTarget{}, fmt.Errorf("gen: probe target %q: want PROTO/IPv4:PORT", s)
	}
	switch proto {
	case "tcp", "udp", "sctp":
	default:
		return NetpolTarget{}, fmt.Errorf("gen: probe target %q: protocol must be tcp, udp or sctp", s)
	}
	return NetpolTarget{Addr: ap, Proto: proto}, nil
}
