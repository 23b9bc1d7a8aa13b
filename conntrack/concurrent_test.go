package conntrack

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrent runs workers that open, use and close connections (some
// translated) in overlapping flows while a maintenance goroutine sweeps,
// evicts by pressure, dumps, saves and flushes; run it with -race. The
// table must come out consistent (checkInvariants) and every packet's
// ct_state must be one a single-threaded tracker could give.
func TestConcurrent(t *testing.T) {
	tr, c := newTracker(t, Config{MaxEntries: 256, ZoneLimits: map[uint16]int{1: 64}})
	var now atomic.Int64
	now.Store(int64(c.Now()))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			acts := []Action{commit, snat, {Zone: 1, Commit: true}, {Zone: 1, Commit: true, NAT: NAT{Kind: NATDst, MinAddr: ip4(bknd)}}}
			for i := range 3000 {
				src := addrStr([]byte{10, 128, byte(w), byte(i % 97)})
				a := acts[i%len(acts)]
				out := udp4(src, uint16(1000+i%13), far, 53, 16)
				var m Meta
				tr.Process(Time(now.Load()), out, 0, &a, &m)
				if m.State&StateTrk == 0 || m.State&StateInv != 0 {
					t.Errorf("worker %d: %v", w, m.State)
					return
				}
				// The answer, translated back when the flow was.
				back := udp4(addrStr(out[16:20]), get16(out, 22), addrStr(out[12:16]), get16(out, 20), 16)
				m = Meta{}
				tr.Process(Time(now.Load()), back, 0, &Action{Zone: a.Zone, NAT: NAT{Kind: NATBare}}, &m)
				tcp := tcp4(src, uint16(2000+i%7), far, 80, tcpSYN, uint32(i), 0, 0)
				m = Meta{}
				tr.Process(Time(now.Load()), tcp, CsumVerified, &a, &m)
			}
		})
	}
	var maint sync.WaitGroup
	maint.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			now.Add(int64(time.Second))
			tr.Sweep(Time(now.Load()), 32)
			switch i % 50 {
			case 10:
				for e := range tr.All(Time(now.Load())) {
					_ = e.String()
				}
			case 20:
				if _, err := tr.Save(io.Discard); err != nil {
					t.Error(err)
				}
			case 30:
				tr.FlushZone(1)
			case 40:
				tr.Stats()
			}
		}
	})
	wg.Wait()
	close(stop)
	maint.Wait()
	c.now = Time(now.Load())
	checkInvariants(t, tr, c)
	var buf bytes.Buffer
	if _, err := tr.Save(&buf); err != nil {
		t.Fatal(err)
	}
	tr2, c2 := newTracker(t, Config{MaxEntries: 256})
	c2.now = c.now
	if _, err := tr2.Load(&buf); err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, tr2, c2)
}
