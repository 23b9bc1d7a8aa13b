package vswitch

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

// udpFlowFrame is udpFrame with the given UDP ports.
func udpFlowFrame(src, dst byte, sport, dport uint16) []byte {
	f := udpFrame(src, dst)
	binary.BigEndian.PutUint16(f[34:], sport)
	binary.BigEndian.PutUint16(f[36:], dport)
	return f
}

// TestSwitchMultiQueue: every queue of a multi-queue port is read; frames
// toward it are spread over its queues by flow, the same flow always on one
// queue and its replies on the queue its requests took; removing the port
// closes every queue.
func TestSwitchMultiQueue(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=3, ip, nw_dst=10.0.0.4, actions=output:4
table=0, priority=100, in_port=4, ip, nw_dst=10.0.0.3, actions=output:3
`)
	a := newMemPort("a")
	b := []*memPort{newMemPort("b0"), newMemPort("b1"), newMemPort("b2")}
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPortQueues(4, []Port{b[0], b[1], b[2]}); err != nil {
		t.Fatal(err)
	}

	// 64 flows from a toward b, each sent twice.
	const flows = 64
	for round := 0; round < 2; round++ {
		for i := range flows {
			a.send(udpFlowFrame(3, 4, uint16(1000+i), 53))
		}
	}
	queueOf := map[uint16]int{} // source port → queue
	testutil.WaitFor(t, 5*time.Second, "b's queues to receive every frame", func() (bool, error) {
		return len(b[0].written())+len(b[1].written())+len(b[2].written()) == 2*flows, nil
	})
	for qi, q := range b {
		if len(q.written()) == 0 {
			t.Errorf("queue %d took no frames of %d flows", qi, flows)
		}
		for _, f := range q.written() {
			sport := binary.BigEndian.Uint16(f[34:])
			if prev, ok := queueOf[sport]; ok && prev != qi {
				t.Errorf("flow %d on queues %d and %d", sport, prev, qi)
			}
			queueOf[sport] = qi
		}
	}

	// Replies come in on every queue (a worker per queue reads them) and
	// reach a; a reply of flow i, written to b, would take flow i's queue.
	for i := range flows {
		b[i%3].send(udpFlowFrame(4, 3, 53, uint16(1000+i)))
	}
	testutil.WaitFor(t, 5*time.Second, "a to receive every reply", func() (bool, error) { return len(a.written()) == flows, nil })
	for i := range flows {
		var req, rep flowtable.Fields
		if !flowtable.Extract(udpFlowFrame(3, 4, uint16(1000+i), 53), &req) ||
			!flowtable.Extract(udpFlowFrame(4, 3, 53, uint16(1000+i)), &rep) {
			t.Fatal("test frames do not parse")
		}
		if FlowHash(&req) != FlowHash(&rep) {
			t.Errorf("flow %d: request and reply hash differently", i)
		}
		if q := int(FlowHash(&rep) % 3); q != queueOf[uint16(1000+i)] {
			t.Errorf("flow %d: requests on queue %d, a reply would take %d", i, queueOf[uint16(1000+i)], q)
		}
	}

	if err := sw.RemovePort(4); err != nil {
		t.Fatal(err)
	}
	for qi, q := range b {
		select {
		case <-q.closed:
		default:
			t.Errorf("queue %d not closed by RemovePort", qi)
		}
	}
}

func TestSwitchMultiQueueInvalid(t *testing.T) {
	sw, _ := newTestSwitch(t, "table=0, priority=0, actions=drop\n")
	if err := sw.AddPortQueues(3, nil); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("no queues: got %v, want ErrInvalidPort", err)
	}
	if err := sw.AddPortQueues(3, []Port{newMemPort("a"), nil}); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("a nil queue: got %v, want ErrInvalidPort", err)
	}
	// Queues must agree on their Caps.
	if err := sw.AddPortQueues(3, []Port{newMemOffloadPort("a"), newMemPort("b")}); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("mixed offloads: got %v, want ErrInvalidPort", err)
	}
	if err := sw.AddPortQueues(3, []Port{newMemPort("a"), newMemTunnel()}); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("a tunnel queue on a plain port: got %v, want ErrInvalidPort", err)
	}
	// A Framer must fit the worker's scratch space.
	if err := sw.AddPort(3, &bigFramer{memPort: newMemTunnel()}); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("outer headers of %d bytes: got %v, want ErrInvalidPort", MaxWireHeader+1, err)
	}
	if len(sw.Ports()) != 0 {
		t.Errorf("ports after failed adds: %v", sw.Ports())
	}
}

// bigFramer claims outer headers longer than MaxWireHeader.
type bigFramer struct{ *memPort }

func (bigFramer) WireHeaderLen() int                           { return MaxWireHeader + 1 }
func (bigFramer) PutWireHeader(b []byte, m *port.Meta, _ bool) {}

// TestSwitchTunnelQueues: every queue of a tunnel port is read, frames
// from each carry their endpoint into the pipeline, and frames toward the
// tunnel are spread over its queues by flow, like those toward any
// multi-queue port (a tunnel's queues share one send side, so any queue
// may send any frame).
func TestSwitchTunnelQueues(t *testing.T) {
	sw, _ := newTestSwitch(t, `
table=0, priority=100, in_port=1, tun_src=192.0.2.2, actions=output:3
table=0, priority=100, in_port=3, ip, actions=set_field:192.0.2.2->tun_dst, output:1
`)
	a := newMemPort("a")
	vx := []*memPort{newMemTunnel(), newMemTunnel()}
	if err := sw.AddPort(3, a); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPortQueues(1, []Port{vx[0], vx[1]}); err != nil {
		t.Fatal(err)
	}
	for i, q := range vx {
		q.sendMeta(udpFlowFrame(9, 3, uint16(i), 4), port.Meta{Tunnel: port.Endpoint{Addr: [4]byte{192, 0, 2, 2}}})
	}
	testutil.WaitFor(t, 5*time.Second, "a to receive from both tunnel queues", func() (bool, error) { return len(a.written()) == 2, nil })
	for i := range 32 {
		a.send(udpFlowFrame(3, 9, uint16(1000+i), 53))
	}
	testutil.WaitFor(t, 5*time.Second, "the tunnel to take 32 frames", func() (bool, error) { return len(vx[0].written())+len(vx[1].written()) == 32, nil })
	for qi, q := range vx {
		if len(q.written()) == 0 {
			t.Errorf("no frame of 32 flows written to tunnel queue %d", qi)
		}
		for _, m := range q.writtenMeta() {
			if int(m.Hash%2) != qi || m.Tunnel.Addr != [4]byte{192, 0, 2, 2} {
				t.Errorf("queue %d got a frame of hash %#x to %v", qi, m.Hash, m.Tunnel.Addr)
			}
		}
	}
	if err := sw.AddPortQueues(2, []Port{vx[0], vx[0]}); !errors.Is(err, ErrInvalidPort) {
		t.Errorf("the same queue twice: got %v, want ErrInvalidPort", err)
	}
	for _, pi := range sw.Ports() {
		if pi.No == 1 && (!pi.Tunnel || pi.Queues != 2) {
			t.Errorf("tunnel port info %+v", pi)
		}
	}
}
