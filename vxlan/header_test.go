package vxlan

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/gvswitch/gvs/packet"
)

// outerARP is a whole VXLAN packet as it appears on the underlay wire:
// Ethernet, IPv4 192.0.2.2 → 192.0.2.1, UDP 54321 → 4789, VXLAN VNI 42, and
// an inner ARP request "who has 10.99.0.1, tell 10.99.0.2" from
// 02:00:00:00:00:02 (the shape the Linux vxlan driver emits).
const outerARP = `
020000000a01 020000000a02 0800
4500004e 12340000 4011e467 c0000202 c0000201
d431 12b5 003a 0000
08000000 00002a00
ffffffffffff 020000000002 0806
0001 0800 06 04 0001 020000000002 0a630002 000000000000 0a630001`

func TestDecapFixture(t *testing.T) {
	pkt := unhex(t, outerARP)
	eth := packet.Ethernet(pkt)
	ip := packet.IPv4(eth.Payload())
	if !eth.Valid() || !ip.Valid() || ip.Protocol() != packet.ProtoUDP {
		t.Fatal("fixture: outer headers do not parse")
	}
	udp := packet.UDP(ip.Payload())
	if !udp.Valid() || udp.DstPort() != UDPPort {
		t.Fatalf("fixture: UDP dst port %d", udp.DstPort())
	}
	inner, vni, err := Decap(udp[packet.UDPLen:])
	if err != nil {
		t.Fatalf("Decap: %v", err)
	}
	if vni != 42 {
		t.Errorf("VNI = %d, want 42", vni)
	}
	ie := packet.Ethernet(inner)
	if len(inner) != 42 || ie.Type() != packet.EtherTypeARP {
		t.Fatalf("inner frame: len %d type %#x", len(inner), ie.Type())
	}
	arp := packet.ARP(ie.Payload())
	if !arp.Valid() || arp.TPA() != [4]byte{10, 99, 0, 1} || arp.SPA() != [4]byte{10, 99, 0, 2} {
		t.Errorf("inner ARP: %x", []byte(arp))
	}
	// Re-encapsulating the inner frame in place gives back the UDP payload.
	payload := append([]byte(nil), udp[packet.UDPLen:]...)
	clear(payload[:HeaderLen])
	if got := Encap(payload, HeaderLen, len(inner), 42); !bytes.Equal(got, udp[packet.UDPLen:]) {
		t.Errorf("Encap = %x, want %x", got, []byte(udp[packet.UDPLen:]))
	}
}

func TestHeaderValid(t *testing.T) {
	tests := []struct {
		name string
		hex  string
		want error
		vni  uint32
	}{
		{"vni 42", "08000000 00002a00", nil, 42},
		{"vni 0", "08000000 00000000", nil, 0},
		{"vni max", "08000000 ffffff00", nil, MaxVNI},
		{"vni 0x123456", "08000000 12345600", nil, 0x123456},
		{"I flag clear", "00000000 00002a00", ErrFlags, 0},
		{"reserved flag bit", "88000000 00002a00", ErrFlags, 0},
		{"GBP G bit", "88000001 00002a00", ErrFlags, 0},
		{"reserved byte 1", "08010000 00002a00", ErrFlags, 0},
		{"reserved byte 3", "08000001 00002a00", ErrFlags, 0},
		{"reserved byte 7", "08000000 00002a01", ErrFlags, 0},
		{"short 7", "08000000 00002a", ErrShort, 0},
		{"empty", "", ErrShort, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := unhex(t, tt.hex)
			if got := Header(b).Valid(); got != (tt.want == nil) {
				t.Errorf("Valid = %v", got)
			}
			inner, vni, err := Decap(b)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decap err = %v, want %v", err, tt.want)
			}
			if err == nil && (vni != tt.vni || len(inner) != 0) {
				t.Errorf("Decap = %x, %d", inner, vni)
			}
		})
	}
}

func TestPutHeader(t *testing.T) {
	for _, tt := range []struct {
		vni  uint32
		want string
	}{
		{42, "0800000000002a00"},
		{0, "0800000000000000"},
		{0xabcdef, "08000000abcdef00"},
		{0x1abcdef, "08000000abcdef00"}, // only the low 24 bits
	} {
		b := bytes.Repeat([]byte{0xff}, HeaderLen)
		PutHeader(b, tt.vni)
		if got := unhex(t, tt.want); !bytes.Equal(b, got) {
			t.Errorf("PutHeader(%#x) = %x, want %x", tt.vni, b, got)
		}
	}
}

func TestEncapDecapRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		offset := HeaderLen + rng.IntN(64)
		frame := make([]byte, rng.IntN(1500))
		for i := range frame {
			frame[i] = byte(rng.Uint32())
		}
		vni := rng.Uint32() & MaxVNI
		buf := make([]byte, offset+len(frame)+rng.IntN(8))
		for i := range buf[:offset] {
			buf[i] = 0xee // stale headroom must not leak into the header
		}
		copy(buf[offset:], frame)
		out := Encap(buf, offset, len(frame), vni)
		if &out[HeaderLen:][:1][0] != &buf[offset:][:1][0] && len(frame) > 0 {
			t.Fatal("Encap moved the frame")
		}
		if len(out) != HeaderLen+len(frame) {
			t.Fatalf("len = %d", len(out))
		}
		inner, got, err := Decap(out)
		if err != nil || got != vni || !bytes.Equal(inner, frame) {
			t.Fatalf("round trip: err %v vni %d/%d", err, got, vni)
		}
	}
}

func TestAllocs(t *testing.T) {
	pkt := unhex(t, outerARP)
	payload := pkt[14+20+8:]
	buf := make([]byte, 64+len(payload))
	peers, err := NewPeers()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		peers.Add(netipAddr4(10, 0, byte(i), 1))
	}
	var sink uint32
	for name, fn := range map[string]func(){
		"Decap": func() {
			_, v, _ := Decap(payload)
			sink += v
		},
		"Encap": func() { sink += uint32(len(Encap(buf, 64, len(payload)-HeaderLen, 7))) },
		"Peers.Contains": func() {
			if peers.Contains([4]byte{10, 0, 5, 1}) {
				sink++
			}
		},
		"Header.Valid": func() {
			if Header(payload).Valid() {
				sink++
			}
		},
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
	_ = sink
}

func BenchmarkEncap(b *testing.B) {
	buf := make([]byte, 64+1450)
	b.ReportAllocs()
	for b.Loop() {
		Encap(buf, 64, 1450, 42)
	}
}

func BenchmarkDecap(b *testing.B) {
	buf := make([]byte, HeaderLen+1450)
	PutHeader(buf, 42)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decap(buf); err != nil {
			b.Fatal(err)
		}
	}
}
