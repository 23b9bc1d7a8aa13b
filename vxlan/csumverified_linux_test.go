package vxlan

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// TestReadCsumVerified: Read says CsumVerified for a datagram whose
// checksums its coalescer checked and found valid, and not for one with a
// bad UDP checksum, nor when it does not check (UDP coalescing off): the
// switch's connection tracker skips its own check on the port's word.
func TestReadCsumVerified(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name         string
		coalesceUDP  bool
		bad          bool
		wantVerified bool
	}{
		{"coalescing, good sum", true, false, true},
		{"coalescing, bad sum", true, true, false},
		{"not coalescing, good sum", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tn := newTestNet(t, false)
			pa, _ := NewPeers(addrB)
			pb, _ := NewPeers(addrA)
			a := listenIn(t, tn.a, Config{Local: addrA, Peers: pa, Offload: true})
			b := listenIn(t, tn.b, Config{Local: addrB, Peers: pb, Offload: true, CoalesceUDP: tc.coalesceUDP})
			ep := port.Endpoint{Addr: addrB.As4(), VNI: 7}
			f := udpSuperFrame(100) // one datagram: complete its checksum
			udp := f[packet.EthernetLen+20:]
			binary.BigEndian.PutUint16(udp[6:], ^packet.Checksum(udp, 0))
			if tc.bad {
				f[len(f)-1] ^= 0xff
			}
			bb := newBatch(8)
			if err := b.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			// Until one arrives: the first may wait on the neighbour.
			for range 20 {
				ob := [][]byte{withFrame(f)}
				if _, err := a.Write(ob, metas(ob, ep), headroom); err != nil {
					t.Fatal(err)
				}
				n, err := b.Read(bb.bufs, bb.meta, headroom)
				if err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
			}
			if bb.meta[0].Size != len(f) {
				t.Fatalf("read a frame of %d bytes, want %d", bb.meta[0].Size, len(f))
			}
			if got := bb.meta[0].CsumVerified; got != tc.wantVerified {
				t.Fatalf("CsumVerified %v, want %v", got, tc.wantVerified)
			}
		})
	}
}
