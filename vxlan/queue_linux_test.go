package vxlan

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

// TestQueues: a port with two receive sockets gets a peer's flows spread
// over both queues, each read by its own goroutine, with nothing lost or
// changed; Close ends both reads.
func TestQueues(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peersA, _ := NewPeers(addrB)
	peersB, _ := NewPeers(addrA)
	a := listenIn(t, tn.a, Config{Local: addrA, Peers: peersA, Readers: 2, Offload: true})
	b := listenIn(t, tn.b, Config{Local: addrB, Peers: peersB})
	qs := a.Queues()
	if len(qs) != 2 || qs[0].Port() != a {
		t.Fatalf("Queues = %v", qs)
	}
	// A second port on the same address fails as with one reader, instead
	// of joining the first one's SO_REUSEPORT group.
	inNS(t, tn.a, func() error {
		if p2, err := Listen(Config{Local: addrA, Peers: peersA, Readers: 2}); err == nil {
			p2.Close()
			return errors.New("a second port with two readers bound the address in use")
		}
		return nil
	})

	const flows, rounds = 64, 4
	want := map[string]bool{}
	var bufs [][]byte
	for r := range rounds {
		for f := range flows {
			fr := udpFrame(vx0MAC, gvsMAC, overlayB, overlayA, uint16(40000+f), 53, []byte{byte(r), byte(f)})
			want[string(fr)] = true
			bufs = append(bufs, withFrame(fr))
		}
	}
	if n, err := b.Write(bufs, metas(bufs, port.Endpoint{Addr: addrA.As4(), VNI: 7}), headroom); n != len(bufs) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}

	var mu sync.Mutex
	got := map[string]bool{}
	perQueue := make([]int, len(qs))
	var wg sync.WaitGroup
	errs := make([]error, len(qs))
	for i, q := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bt := newBatch(16)
			for {
				n, err := q.Read(bt.bufs, bt.meta, headroom)
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				for k := range n {
					if addrVNI(bt.meta[k].Tunnel) != (port.Endpoint{Addr: addrB.As4(), VNI: 7}) {
						t.Errorf("queue %d: endpoint %+v", i, bt.meta[k].Tunnel)
					}
					got[string(bytes.Clone(bt.frame(k)))] = true
				}
				perQueue[i] += n
				mu.Unlock()
			}
		}()
	}
	testutil.Eventually(5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("queue %d: read after Close: %v", i, err)
		}
	}
	for f := range want {
		if !got[f] {
			t.Fatalf("%d of %d frames arrived (per queue %v); missing %x", len(got), len(want), perQueue, f)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct frames arrived, %d sent", len(got), len(want))
	}
	if perQueue[0] == 0 || perQueue[1] == 0 {
		t.Errorf("frames per queue %v: want both queues used by %d flows", perQueue, flows)
	}
	if s := a.Stats(); s.RxPackets != uint64(len(want)) {
		t.Errorf("RxPackets %d, want %d", s.RxPackets, len(want))
	}
}
