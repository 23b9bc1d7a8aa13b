package vxlan

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestFlowQueuesFair: a peer's bulk flow has a deep backlog in one
// receive socket when a few datagrams of sparse flows (other outer source
// ports) arrive; with flow queues the reader hands a sparse datagram over
// within its first reads, with one socket only after the whole backlog.
// Reading allocates nothing either way.
func TestFlowQueuesFair(t *testing.T) {
	requireRoot(t)
	const bulk, sparse, batch = 1000, 8, 16
	for _, tc := range []struct {
		flowQueues int
		fair       bool
	}{{0, true}, {1, false}} {
		tn := newTestNet(t, false)
		peers, _ := NewPeers(addrB)
		p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: batch, FlowQueues: tc.flowQueues})
		dst := netip.AddrPortFrom(addrA, UDPPort)
		heavy := udpIn(t, tn.b, "192.0.2.2:0")
		bulkDG := vxUDP(1000, 2000, []byte("bulk"))
		from := ipDelivered(t, tn.a)
		for range bulk {
			if _, err := heavy.WriteToUDPAddrPort(bulkDG, dst); err != nil {
				t.Fatal(err)
			}
		}
		// Sparse flows, each from an outer source port of its own: with 8
		// sockets at least one lands beside the bulk one's but for a chance
		// of 1 in 8^8.
		sendSparse(t, tn, dst, sparse)
		waitQueued(t, tn.a, from, bulk+sparse)
		if err := p.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		b := newBatch(batch)
		firstSparse, frames, reads := -1, 0, 0
		read := func() {
			n, err := p.Read(b.bufs, b.meta, headroom)
			if err != nil {
				t.Fatalf("flowQueues %d: Read after %d of %d frames: %v (stats %+v)", tc.flowQueues, frames, bulk+sparse, err, p.Stats())
			}
			for k := range n {
				f := b.frame(k)
				if firstSparse < 0 && string(f[len(f)-4:]) == "ping" {
					firstSparse = frames + k
				}
			}
			frames += n
			reads++
		}
		if !raceEnabled {
			// Reads of queued datagrams, from one socket or several,
			// allocate nothing (the first frames are counted as well).
			if allocs := testing.AllocsPerRun(10, read); allocs != 0 {
				t.Errorf("flowQueues %d: Read: %v allocs per call, want 0", tc.flowQueues, allocs)
			}
		}
		for frames < bulk+sparse {
			read()
		}
		t.Logf("flowQueues %d: first sparse datagram was frame %d of %d (%d reads)", tc.flowQueues, firstSparse, frames, reads)
		if tc.fair && (firstSparse < 0 || firstSparse >= 4*batch) {
			t.Errorf("flowQueues %d: the first sparse datagram came as frame %d, want within the first %d", tc.flowQueues, firstSparse, 4*batch)
		}
		if !tc.fair && firstSparse < bulk {
			t.Errorf("one socket: a sparse datagram came as frame %d, before the bulk backlog of %d (is the test still sound?)", firstSparse, bulk)
		}
		if s := p.Stats(); s.RxPackets != bulk+sparse {
			t.Errorf("flowQueues %d: RxPackets %d, want %d", tc.flowQueues, s.RxPackets, bulk+sparse)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Read(b.bufs, b.meta, headroom); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close: %v, want net.ErrClosed", err)
		}
	}
}

// TestFlowQueuesNewcomer: a bulk socket is read a share at a time also
// while it is the only one ready, so that a datagram arriving in another
// socket meanwhile waits behind one share of the bulk backlog, not behind
// the rest of a whole batch. The reader takes 4 frames per Read (a worker
// busy with each batch), the port reads 16 messages per recvmmsg: a share
// is 16/fairShare = 4.
func TestFlowQueuesNewcomer(t *testing.T) {
	requireRoot(t)
	const bulk, batch, take = 300, 16, 4
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: batch})
	dst := netip.AddrPortFrom(addrA, UDPPort)
	// Datagrams of 5 000 B: a batch of them is bulk (at least 64 KiB).
	heavy := udpIn(t, tn.b, "192.0.2.2:0")
	bulkDG := vxUDP(1000, 2000, make([]byte, 5000))
	from := ipDelivered(t, tn.a)
	for range bulk {
		if _, err := heavy.WriteToUDPAddrPort(bulkDG, dst); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, tn.a, from, bulk)
	if err := p.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := newBatch(batch)
	for i := range b.bufs {
		b.bufs[i] = make([]byte, headroom+len(bulkDG))
	}
	frames, sent, firstSparse := 0, -1, -1
	read := func() {
		n, err := p.Read(b.bufs[:take], b.meta[:take], headroom)
		if err != nil {
			t.Fatalf("Read after %d frames: %v (stats %+v)", frames, err, p.Stats())
		}
		for k := range n {
			if f := b.frame(k); firstSparse < 0 && string(f[len(f)-4:]) == "ping" {
				firstSparse = frames + k
			}
		}
		frames += n
	}
	// A batch, which finds the socket bulk, and one Read more, the first
	// of the next recvmmsg (a whole batch before, a share now); then
	// sparse flows arrive, each from an outer source port of its own
	// (with 8 sockets at least one lands beside the bulk one's but for a
	// chance of 1 in 8^8).
	for frames < batch+take {
		read()
	}
	from = ipDelivered(t, tn.a)
	sendSparse(t, tn, dst, 8)
	waitQueued(t, tn.a, from, 8)
	sent = frames
	for firstSparse < 0 && frames < bulk+8 {
		read()
	}
	t.Logf("sparse datagrams sent after %d frames; the first came as frame %d", sent, firstSparse)
	if firstSparse < 0 || firstSparse-sent > batch/fairShare {
		t.Errorf("the first sparse datagram came as frame %d, %d frames after it arrived; want at most one share (%d) of the bulk backlog before it",
			firstSparse, firstSparse-sent, batch/fairShare)
	}
}

// vxUDP is a VXLAN datagram (VNI 5) of a UDP frame from overlayB to
// overlayA with the given ports and payload.
func vxUDP(sport, dport uint16, payload []byte) []byte {
	frame := udpFrame(gvsMAC, vx0MAC, overlayB, overlayA, sport, dport, payload)
	b := make([]byte, HeaderLen+len(frame))
	PutHeader(b, 5)
	copy(b[HeaderLen:], frame)
	return b
}

// sendSparse sends n datagrams of sparse flows ("ping" payloads) to dst
// from tn.b, each from an outer source port of its own.
func sendSparse(t *testing.T, tn *testNet, dst netip.AddrPort, n int) {
	t.Helper()
	for i := range n {
		c := udpIn(t, tn.b, "192.0.2.2:0")
		if _, err := c.WriteToUDPAddrPort(vxUDP(uint16(3000+i), 53, []byte("ping")), dst); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFlowQueuesConfig: FlowQueues out of range is refused.
func TestFlowQueuesConfig(t *testing.T) {
	peers, _ := NewPeers(addrB)
	for _, n := range []int{-1, MaxFlowQueues + 1} {
		c := Config{Local: addrA, Peers: peers, FlowQueues: n}
		if err := c.Validate(); err == nil {
			t.Errorf("FlowQueues %d accepted", n)
		}
	}
}
