package vxlan

import (
	"net/netip"
	"testing"
	"time"
)

// TestReadGathersSmallFlows: small datagrams of several flows, each in a
// receive socket of its own (its own outer source port), come back in one
// Read, not in a Read per socket: one batch of the switch, one write per
// destination. A bulk socket's datagrams are not gathered behind them
// (TestFlowQueuesFair, TestFlowQueuesNewcomer).
func TestReadGathersSmallFlows(t *testing.T) {
	requireRoot(t)
	const flows, batch = 8, 32
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: batch})
	dst := netip.AddrPortFrom(addrA, UDPPort)
	b := newBatch(batch)
	if err := p.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		from := ipDelivered(t, tn.a)
		sendSparse(t, tn, dst, flows)
		waitQueued(t, tn.a, from, flows)
		n, err := p.Read(b.bufs, b.meta, headroom)
		if err != nil {
			t.Fatal(err)
		}
		// Two flows may share a socket (outer source port mod 16); each
		// socket is one recvmmsg either way.
		if n != flows {
			t.Errorf("round %d: one Read returned %d of the %d small datagrams queued", round, n, flows)
		}
		for got := n; got < flows; {
			m, err := p.Read(b.bufs, b.meta, headroom)
			if err != nil {
				t.Fatal(err)
			}
			got += m
		}
	}
	if s := p.Stats(); s.RxPackets != 3*flows {
		t.Errorf("RxPackets %d, want %d", s.RxPackets, 3*flows)
	}
	if raceEnabled {
		return
	}
	// Gathering allocates nothing: 3 Reads of 8 from 32 queued flows.
	from := ipDelivered(t, tn.a)
	for range 4 {
		sendSparse(t, tn, dst, flows)
	}
	waitQueued(t, tn.a, from, 4*flows)
	allocs := testing.AllocsPerRun(2, func() {
		if n, err := p.Read(b.bufs[:flows], b.meta[:flows], headroom); err != nil || n != flows {
			t.Fatalf("Read: %d frames, %v; want %d", n, err, flows)
		}
	})
	if allocs != 0 {
		t.Errorf("Read gathering from several sockets: %v allocs per call, want 0", allocs)
	}
}
