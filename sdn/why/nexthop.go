package why

import (
	"net/netip"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/sdn"
)

// NextHops returns, for each output of trace tr (of every pass, the
// recirculations' included) into the tunnel, the node it reaches and the
// packet to trace there: f (the traced packet) as it arrives on vxlan0,
// with the output's VNI as tun_id and nodeIP as tun_src. remote names the
// node of an underlay address (false: the address is used as the name).
// gvs-switchd's trace uses it to fill control.TraceResult.Next.
func NextHops(tr flowtable.Trace, f flowtable.Fields, nodeIP netip.Addr, remote func(netip.Addr) (string, bool)) []control.NextHop {
	outs := append([]flowtable.Output(nil), tr.Out...)
	for _, r := range tr.Recirc {
		outs = append(outs, r.Out...)
	}
	var hops []control.NextHop
	for _, o := range outs {
		if o.Port != sdn.PortVXLAN || o.TunDst == ([4]byte{}) {
			continue
		}
		dst := netip.AddrFrom4(o.TunDst)
		name, ok := remote(dst)
		if !ok {
			name = dst.String()
		}
		next := f
		next.InPort = sdn.PortVXLAN
		next.TunID = o.TunID
		next.TunSrc = nodeIP.As4()
		next.TunDst = [4]byte{}
		next.Regs = [8]uint32{}
		hops = append(hops, control.NextHop{Node: name, NodeIP: dst.String(), Packet: flowtable.FormatFields(next)})
	}
	return hops
}
