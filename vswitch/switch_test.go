package vswitch

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

// memFrame is a frame with its metadata, as a port reads or writes it.
type memFrame struct {
	frame []byte
	meta  port.Meta
}

// memPort is an in-memory Port with the Caps it is given: frames pushed
// with send are read by the switch; frames the switch writes are
// collected with their metadata.
type memPort struct {
	name   string
	caps   port.Caps
	in     chan memFrame
	mu     sync.Mutex
	out    []memFrame
	closed chan struct{}
	once   sync.Once
	// wake, if not nil, makes a blocked Read return port.ErrWoken
	// (wakePort, trim_test.go).
	wake chan struct{}
}

func newMemPort(name string) *memPort {
	return &memPort{name: name, in: make(chan memFrame, 64), closed: make(chan struct{})}
}

// newMemTunnel is a memPort that is a tunnel.
func newMemTunnel() *memPort {
	p := newMemPort("vxlan0")
	p.caps.Tunnel = true
	return p
}

// newMemOffloadPort is a memPort that takes super-frames.
func newMemOffloadPort(name string) *memPort {
	p := newMemPort(name)
	p.caps.Offload = true
	return p
}

func (p *memPort) Name() string    { return p.name }
func (p *memPort) Caps() port.Caps { return p.caps }
func (p *memPort) BatchSize() int  { return 8 }
func (p *memPort) Close() error {
	p.once.Do(func() { close(p.closed) })
	return nil
}

// send has the switch read frame, a complete frame.
func (p *memPort) send(frame []byte) { p.in <- memFrame{frame: frame} }

// sendMeta has the switch read frame with m (its Size is set here).
func (p *memPort) sendMeta(frame []byte, m port.Meta) { p.in <- memFrame{frame, m} }

func (p *memPort) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	n := 0
	take := func(f memFrame) {
		meta[n] = f.meta
		meta[n].Size = copy(bufs[n][offset:], f.frame)
		n++
	}
	select {
	case f := <-p.in:
		take(f)
	case <-p.wake:
		return 0, port.ErrWoken
	case <-p.closed:
		return 0, errors.New("closed")
	}
	for n < len(bufs) {
		select {
		case f := <-p.in:
			take(f)
		default:
			return n, nil
		}
	}
	return n, nil
}

func (p *memPort) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range bufs {
		p.out = append(p.out, memFrame{bytes.Clone(b[offset : offset+meta[i].Size]), meta[i]})
	}
	return len(bufs), nil
}

// written returns the frames written so far.
func (p *memPort) written() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out [][]byte
	for _, f := range p.out {
		out = append(out, f.frame)
	}
	return out
}

// take returns the frames written so far and forgets them.
func (p *memPort) take() [][]byte {
	out := p.written()
	p.mu.Lock()
	p.out = nil
	p.mu.Unlock()
	return out
}

// writtenMeta returns the metadata of the frames written so far.
func (p *memPort) writtenMeta() []port.Meta {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []port.Meta
	for _, f := range p.out {
		out = append(out, f.meta)
	}
	return out
}

// udpFrame builds an Ethernet/IPv4/UDP frame from 10.0.0.src to 10.0.0.dst.
func udpFrame(src, dst byte) []byte {
	f := make([]byte, 14+20+8+4)
	copy(f[0:6], []byte{0x0a, 0x58, 10, 0, 0, dst})
	copy(f[6:12], []byte{0x0a, 0x58, 10, 0, 0, src})
	f[12], f[13] = 0x08, 0x00
	ip := f[14:]
	ip[0] = 0x45
	ip[3] = 32
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:16], []byte{10, 0, 0, src})
	copy(ip[16:20], []byte{10, 0, 0, dst})
	udp := ip[20:]
	udp[0], udp[1], udp[2], udp[3] = 0x30, 0x39, 0x00, 0x35
	udp[5] = 12
	return f
}

func newTestSwitch(t *testing.T, rules string) (*Switch, *flowtable.Table) {
	t.Helper()
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
	sw, err := New(Config{Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	return sw, tbl
}

func TestSwitchForwardsByRules(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.4, actions=load:0x4->NXM_NX_REG2[], goto_table:10
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.9, actions=set_field:192.0.2.2->tun_dst, load:0x2a->NXM_NX_TUN_ID[0..31], output:1
table=10, priority=100, actions=output:NXM_NX_REG2[]
`)
	a, b, vx := newMemPort("a"), newMemPort("b"), newMemTunnel()
	for no, p := range map[uint32]Port{3: a, 4: b, 1: vx} {
		if err := sw.AddPort(no, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.AddPort(3, newMemPort("dup")); !errors.Is(err, ErrPortExists) {
		t.Fatalf("adding port 3 twice: got %v, want ErrPortExists", err)
	}

	a.send(udpFrame(3, 4))
	a.send(udpFrame(3, 9))
	a.send(udpFrame(3, 7)) // no rule: table miss in table 0
	a.send([]byte{1, 2, 3})
	testutil.WaitFor(t, 5*time.Second, "b and the tunnel to receive", func() (bool, error) { return len(b.written()) == 1 && len(vx.written()) == 1, nil })
	if got := b.written()[0]; string(got) != string(udpFrame(3, 4)) {
		t.Errorf("port 4 got %x", got)
	}
	m := vx.writtenMeta()[0]
	if ep := m.Tunnel; ep.Addr != [4]byte{192, 0, 2, 2} || ep.VNI != 42 {
		t.Errorf("tunnel endpoint = %+v, want 192.0.2.2 VNI 42", ep)
	}
	// The tunnel gets the switch's flow hash of the frame.
	var f flowtable.Fields
	flowtable.Extract(udpFrame(3, 9), &f)
	if m.Hash != FlowHash(&f) || m.Size != len(udpFrame(3, 9)) {
		t.Errorf("tunnel frame meta %+v, want hash %#x", m, FlowHash(&f))
	}
	testutil.WaitFor(t, 5*time.Second, "drops to be counted", func() (bool, error) {
		st := sw.Stats()
		return st.Drops[DropTableMiss] == 1 && st.Drops[DropMalformed] == 1, nil
	})
	if st := sw.Stats(); st.TableDrops[0] != 1 {
		t.Errorf("table 0 drops = %d, want 1", st.TableDrops[0])
	}
	for _, p := range sw.Ports() {
		if p.No == 3 && (p.Stats.RxPackets != 4 || p.Stats.RxDrops != 2) {
			t.Errorf("port 3 stats = %+v, want 4 rx, 2 rx drops", p.Stats)
		}
		if p.No == 4 && p.Stats.TxPackets != 1 {
			t.Errorf("port 4 stats = %+v, want 1 tx", p.Stats)
		}
	}
}

func TestSwitchTunnelInputAndRemovePort(t *testing.T) {
	sw, tbl := newTestSwitch(t, `
table=0, priority=100, in_port=1, tun_src=192.0.2.7, tun_id=0x2a, actions=output:3
`)
	vx, a := newMemTunnel(), newMemPort("a")
	if err := sw.AddPort(1, vx); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	vx.sendMeta(udpFrame(9, 3), port.Meta{Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 7}, VNI: 42}})
	vx.sendMeta(udpFrame(9, 3), port.Meta{Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 8}, VNI: 42}}) // unknown source: miss
	testutil.WaitFor(t, 5*time.Second, "one frame through the tunnel rule", func() (bool, error) { return len(a.written()) == 1, nil })
	testutil.WaitFor(t, 5*time.Second, "one table miss", func() (bool, error) { return sw.Stats().Drops[DropTableMiss] == 1, nil })

	// Output to a port that went away is counted, not a crash.
	if err := sw.RemovePort(3); err != nil {
		t.Fatal(err)
	}
	vx.sendMeta(udpFrame(9, 3), port.Meta{Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 7}, VNI: 42}})
	testutil.WaitFor(t, 5*time.Second, "a no_port drop", func() (bool, error) { return sw.Stats().Drops[DropNoPort] == 1, nil })
	if err := sw.RemovePort(3); !errors.Is(err, ErrNoSuchPort) {
		t.Fatalf("removing port 3 twice: %v", err)
	}
	// Rule counters follow the traffic.
	for _, r := range tbl.Rules() {
		if p, _ := r.Stats(); p != 2 {
			t.Errorf("rule %s: %d packets, want 2", r, p)
		}
	}
}
