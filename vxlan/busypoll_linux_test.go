package vxlan

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/port/busypoll"
)

// TestBusyPoll: readers that poll (Config.BusyPoll) get datagrams sent
// one by one with short gaps in order, none lost or repeated, some of them
// by polling (a sleep saved), and Close still ends a Read.
func TestBusyPoll(t *testing.T) {
	requireRoot(t)
	bp, err := busypoll.New(busypoll.Config{Max: busypoll.MaxWindow, Pollers: 1})
	if err != nil {
		t.Fatal(err)
	}
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, BusyPoll: bp})
	known := udpIn(t, tn.b, "192.0.2.2:0")
	dst := netip.AddrPortFrom(addrA, UDPPort)
	const total = 300
	sent := make(chan error, 1)
	var read atomic.Int64 // frames the reader has taken
	go func() {
		payload := make([]byte, HeaderLen+64)
		PutHeader(payload, 1)
		for i := range total {
			binary.BigEndian.PutUint32(payload[HeaderLen+14:], uint32(i))
			if _, err := known.WriteToUDPAddrPort(payload, dst); err != nil {
				sent <- err
				return
			}
			// Once the reader has the datagram its queue is dry, and a
			// gap well within the bound follows: the reader's window
			// grows to cover it. (Without the wait a reader slower than
			// the sender, as under -race, always finds the next one
			// queued and never waits at all.)
			for deadline := time.Now().Add(5 * time.Second); read.Load() <= int64(i); {
				if time.Now().After(deadline) {
					sent <- fmt.Errorf("datagram %d not read within 5 s", i)
					return
				}
			}
			for start := time.Now(); time.Since(start) < 20*time.Microsecond; {
			}
		}
		sent <- nil
	}()
	if err := p.setReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b := newBatch(16)
	for got := 0; got < total; {
		n, err := p.Read(b.bufs, b.meta, headroom)
		if err != nil {
			t.Fatalf("Read after %d of %d frames: %v (stats %+v)", got, total, err, p.Stats())
		}
		for i := range n {
			if seq := binary.BigEndian.Uint32(b.frame(i)[14:]); seq != uint32(got) {
				t.Fatalf("frame %d has sequence %d", got, seq)
			}
			got++
		}
		read.Store(int64(got))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	st := bp.Stats()
	if st.Polls == 0 || st.Found == 0 || st.Time <= 0 {
		t.Errorf("%d datagrams with 20 µs gaps and a 1 ms bound: stats %+v, want polls that found datagrams", total, st)
	}
	t.Logf("busy polling: %+v", st)

	// Close still ends a Read whose window is open.
	closeEndsRead(t, p, b)
}
