package vswitch

import (
	"errors"
	"sync"
	"testing"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/vxlan"
)

// gsoFrame is a frame with its offload metadata, as an OffloadPort reads
// or writes it.
type gsoFrame struct {
	frame []byte
	gso   packet.GSO
}

// memOffloadPort is a memPort that also implements OffloadPort: frames
// injected with their metadata come out of ReadGSO, and WriteGSO records
// the metadata it was given.
type memOffloadPort struct {
	memPort
	inG  chan gsoFrame
	gmu  sync.Mutex
	outG []gsoFrame
}

func newMemOffloadPort(name string) *memOffloadPort {
	return &memOffloadPort{memPort: *newMemPort(name), inG: make(chan gsoFrame, 64)}
}

func (p *memOffloadPort) ReadGSO(bufs [][]byte, sizes []int, gso []packet.GSO, offset int) (int, error) {
	select {
	case f := <-p.inG:
		sizes[0] = copy(bufs[0][offset:], f.frame)
		gso[0] = f.gso
		return 1, nil
	case <-p.closed:
		return 0, errors.New("closed")
	}
}

func (p *memOffloadPort) WriteGSO(bufs [][]byte, gso []packet.GSO, offset int) (int, error) {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	for i, b := range bufs {
		p.outG = append(p.outG, gsoFrame{append([]byte(nil), b[offset:]...), gso[i]})
	}
	return len(bufs), nil
}

func (p *memOffloadPort) writtenGSO() []gsoFrame {
	p.gmu.Lock()
	defer p.gmu.Unlock()
	return append([]gsoFrame(nil), p.outG...)
}

// TestSwitchCarriesGSO: a super-frame read from an offload port reaches
// another offload port with its metadata; a plain port never sees it (the
// switch drops it as DropGSO); a complete frame from the offload port
// still reaches the plain port; NoOffload makes offload ports plain.
func TestSwitchCarriesGSO(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.4, actions=output:4
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.5, actions=output:5
`)
	a, b, c := newMemOffloadPort("a"), newMemOffloadPort("b"), newMemPort("c")
	for no, p := range map[uint32]Port{3: a, 4: b, 5: c} {
		if err := sw.AddPort(no, p); err != nil {
			t.Fatal(err)
		}
	}
	g := packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: 1448, CsumStart: 34, CsumOffset: 16}
	a.inG <- gsoFrame{udpFrame(3, 4), g}
	a.inG <- gsoFrame{udpFrame(3, 5), g}
	a.inG <- gsoFrame{udpFrame(3, 5), packet.GSO{}}
	waitFor(t, "the frames", func() bool { return len(b.writtenGSO()) == 1 && len(c.written()) == 1 })
	if got := b.writtenGSO()[0]; got.gso != g || string(got.frame) != string(udpFrame(3, 4)) {
		t.Errorf("offload port got %+v", got)
	}
	waitFor(t, "a gso drop", func() bool { return sw.Stats().Drops[DropGSO] == 1 })
}

// memOffloadTunnel is a memTunnel that implements OffloadTunnelPort.
type memOffloadTunnel struct {
	memTunnel
	mu2  sync.Mutex
	outG []packet.GSO
}

func (p *memOffloadTunnel) ReadTunnelGSO(bufs [][]byte, sizes []int, gso []packet.GSO, eps []vxlan.Endpoint, offset int) (int, error) {
	n, err := p.ReadTunnel(bufs, sizes, eps, offset)
	for i := range n {
		gso[i] = packet.GSO{}
	}
	return n, err
}

func (p *memOffloadTunnel) WriteTunnelGSO(bufs [][]byte, gso []packet.GSO, eps []vxlan.Endpoint, offset int) (int, error) {
	p.mu2.Lock()
	p.outG = append(p.outG, gso...)
	p.mu2.Unlock()
	return p.WriteTunnel(bufs, eps, offset)
}

func TestSwitchGSOToTunnel(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, actions=set_field:192.0.2.2->tun_dst, load:0x2a->NXM_NX_TUN_ID[0..31], output:1
`)
	a := newMemOffloadPort("a")
	vx := &memOffloadTunnel{memTunnel: *newMemTunnel()}
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddTunnel(1, vx); err != nil {
		t.Fatal(err)
	}
	g := packet.GSO{Type: packet.GSOTCPv4, Size: 1000, HdrLen: 54}
	a.inG <- gsoFrame{udpFrame(3, 9), g}
	waitFor(t, "the tunnel write", func() bool { return len(vx.written()) == 1 })
	vx.mu2.Lock()
	defer vx.mu2.Unlock()
	if len(vx.outG) != 1 || vx.outG[0] != g {
		t.Errorf("tunnel got metadata %+v", vx.outG)
	}
}

// The test ports implement the offload interfaces.
var (
	_ OffloadPort       = (*memOffloadPort)(nil)
	_ OffloadTunnelPort = (*memOffloadTunnel)(nil)
)
