package packet

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// udpSuperFrame builds an Ethernet/IPv4-or-IPv6/UDP frame with payload
// bytes of payload. With partial, the UDP checksum field holds only the
// pseudo-header sum, as a socket with UDP_SEGMENT hands it to a USO device;
// otherwise the checksum is complete.
func udpSuperFrame(ver, payload int, partial bool) []byte {
	ipLen := 20
	if ver == 6 {
		ipLen = 40
	}
	f := make([]byte, EthernetLen+ipLen+8+payload)
	copy(f[0:6], []byte{0x0a, 0x58, 0x0a, 0x80, 0x02, 0x03})
	copy(f[6:12], []byte{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03})
	ip := f[EthernetLen:]
	var src, dst []byte
	if ver == 4 {
		binary.BigEndian.PutUint16(f[12:14], EtherTypeIPv4)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen+8+payload))
		binary.BigEndian.PutUint16(ip[4:6], 0xfffe) // wraps during the test
		ip[8], ip[9] = 64, ProtoUDP
		copy(ip[12:16], []byte{10, 128, 0, 3})
		copy(ip[16:20], []byte{10, 128, 2, 3})
		ipv4HeaderChecksum(ip, ipLen)
		src, dst = ip[12:16], ip[16:20]
	} else {
		binary.BigEndian.PutUint16(f[12:14], EtherTypeIPv6)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:6], uint16(8+payload))
		ip[6], ip[7] = ProtoUDP, 64
		ip[8], ip[23] = 0xfd, 3
		ip[24], ip[39] = 0xfd, 4
		src, dst = ip[8:24], ip[24:40]
	}
	udp := ip[ipLen:]
	binary.BigEndian.PutUint16(udp[0:2], 40000)
	binary.BigEndian.PutUint16(udp[2:4], 9000)
	binary.BigEndian.PutUint16(udp[4:6], uint16(8+payload))
	for i := range payload {
		udp[8+i] = byte(i*13 + 1)
	}
	ph := PseudoHeaderSum(src, dst, ProtoUDP, 8+payload)
	if partial {
		binary.BigEndian.PutUint16(udp[6:8], ph)
	} else {
		binary.BigEndian.PutUint16(udp[6:8], ^Checksum(udp[:8+payload], ph))
	}
	return f
}

// refUDPValid checks a UDP datagram's checksum the plain way: the sum over
// the pseudo-header and the whole datagram must be 0xffff.
// segmentsOf returns the segments SegmentTCP or SegmentUDP laid out in dst,
// each after headroom bytes, with the given sizes.
func segmentsOf(dst []byte, sizes []int, headroom int) [][]byte {
	segs := make([][]byte, len(sizes))
	off := 0
	for k, size := range sizes {
		off += headroom
		segs[k] = dst[off : off+size]
		off += size
	}
	return segs
}

func refUDPValid(t *testing.T, seg []byte) bool {
	t.Helper()
	ip := seg[EthernetLen:]
	var src, dst, udp []byte
	switch ip[0] >> 4 {
	case 4:
		// The header length comes from IHL: segments copy any IPv4
		// options from the super-frame.
		src, dst, udp = ip[12:16], ip[16:20], ip[int(ip[0]&0x0f)*4:]
	case 6:
		src, dst, udp = ip[8:24], ip[24:40], ip[40:]
	default:
		t.Fatalf("IP version %d", ip[0]>>4)
	}
	if int(binary.BigEndian.Uint16(udp[4:6])) != len(udp) {
		t.Fatalf("UDP length %d for %d bytes", binary.BigEndian.Uint16(udp[4:6]), len(udp))
	}
	return binary.BigEndian.Uint16(udp[6:8]) != 0 && Checksum(udp, PseudoHeaderSum(src, dst, ProtoUDP, len(udp))) == 0xffff
}

func TestSegmentUDP(t *testing.T) {
	const size = 1000
	for _, ver := range []int{4, 6} {
		for _, partial := range []bool{true, false} {
			for _, payload := range []int{0, 1, size, size + 1, 10 * size, 63*size + 17} {
				orig := udpSuperFrame(ver, payload, partial)
				ipLen := 20
				if ver == 6 {
					ipLen = 40
				}
				hdr := EthernetLen + ipLen + 8
				g := GSO{Type: GSOUDPL4, Size: size, HdrLen: uint16(hdr), NeedsCsum: partial}
				dst := make([]byte, len(orig)+64*(hdr+8))
				sizes := make([]int, 64)
				n, err := Segment(dst, orig, g, 8, sizes)
				if err != nil {
					t.Fatalf("v%d payload %d: %v", ver, payload, err)
				}
				if want := max((payload+size-1)/size, 1); n != want {
					t.Fatalf("v%d payload %d: %d datagrams, want %d", ver, payload, n, want)
				}
				rest := orig[hdr:]
				for k, seg := range segmentsOf(dst, sizes[:n], 8) {
					if !refUDPValid(t, seg) {
						t.Fatalf("v%d payload %d datagram %d: bad UDP checksum", ver, payload, k)
					}
					ip := seg[EthernetLen:]
					if ver == 4 {
						if !ipv4HeaderValid(ip) {
							t.Fatalf("datagram %d: bad IPv4 header checksum", k)
						}
						if got, want := binary.BigEndian.Uint16(ip[2:4]), uint16(len(seg)-EthernetLen); got != want {
							t.Errorf("datagram %d: total length %d, want %d", k, got, want)
						}
						if got, want := binary.BigEndian.Uint16(ip[4:6]), uint16(0xfffe+k); got != want {
							t.Errorf("datagram %d: ip id %#x, want %#x", k, got, want)
						}
					} else if got, want := binary.BigEndian.Uint16(ip[4:6]), uint16(len(seg)-EthernetLen-40); got != want {
						t.Errorf("datagram %d: payload length %d, want %d", k, got, want)
					}
					if !bytes.Equal(seg[:12], orig[:12]) || !bytes.Equal(seg[EthernetLen+ipLen:EthernetLen+ipLen+4], orig[EthernetLen+ipLen:EthernetLen+ipLen+4]) {
						t.Errorf("datagram %d: addresses or ports changed", k)
					}
					if k < n-1 && len(seg) != hdr+size {
						t.Errorf("datagram %d of %d: %d bytes", k, n, len(seg))
					}
					if !bytes.HasPrefix(rest, seg[hdr:]) {
						t.Fatalf("v%d payload %d datagram %d: payload differs", ver, payload, k)
					}
					rest = rest[len(seg)-hdr:]
				}
				if len(rest) != 0 {
					t.Errorf("v%d payload %d: %d payload bytes not sent", ver, payload, len(rest))
				}
			}
		}
	}
}

func TestSegmentUDPRefuses(t *testing.T) {
	good := udpSuperFrame(4, 3000, true)
	g := GSO{Type: GSOUDPL4, Size: 1000}
	dst := make([]byte, 8192)
	sizes := make([]int, 8)
	tcp := superFrame(3000, TCPFlagACK)
	long := bytes.Clone(good)
	binary.BigEndian.PutUint16(long[EthernetLen+2:], uint16(len(good))) // past the frame
	frag := bytes.Clone(good)
	frag[EthernetLen+6] = 0x20 // more fragments
	for name, c := range map[string]struct {
		frame []byte
		g     GSO
		sizes []int
		err   error
	}{
		"tcp":           {tcp, g, sizes, ErrGSOFrame},
		"length":        {long, g, sizes, ErrGSOFrame},
		"fragment":      {frag, g, sizes, ErrGSOFrame},
		"size 0":        {good, GSO{Type: GSOUDPL4}, sizes, ErrGSOFrame},
		"short":         {good[:EthernetLen+20], g, sizes, ErrGSOFrame},
		"sizes":         {good, g, sizes[:2], ErrGSOSpace},
		"udp as tcp":    {good, GSO{Type: GSOTCPv4, Size: 1000}, sizes, ErrGSOFrame},
		"dst too short": {good, g, sizes, ErrGSOSpace},
	} {
		d := dst
		if name == "dst too short" {
			d = dst[:len(good)]
		}
		if _, err := Segment(d, c.frame, c.g, 0, c.sizes); err != c.err {
			t.Errorf("%s: err %v, want %v", name, err, c.err)
		}
	}
}

func TestSegmentUDPAllocs(t *testing.T) {
	orig := udpSuperFrame(4, 20000, true)
	g := GSO{Type: GSOUDPL4, Size: 1400}
	dst := make([]byte, 2*len(orig))
	sizes := make([]int, 64)
	if a := testing.AllocsPerRun(100, func() { _, _ = SegmentUDP(dst, orig, g, 8, sizes) }); a != 0 {
		t.Errorf("%v allocations per call", a)
	}
}

func BenchmarkSegmentUDP(b *testing.B) {
	orig := udpSuperFrame(4, 44*1400, true)
	g := GSO{Type: GSOUDPL4, Size: 1400}
	dst := make([]byte, 2*len(orig))
	sizes := make([]int, 64)
	b.SetBytes(int64(len(orig)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SegmentUDP(dst, orig, g, 8, sizes); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzSegmentUDP(f *testing.F) {
	f.Add(udpSuperFrame(4, 3000, true), uint16(1000))
	f.Add(udpSuperFrame(6, 2500, false), uint16(1200))
	f.Add(udpSuperFrame(4, 0, false), uint16(1))
	f.Fuzz(func(t *testing.T, frame []byte, size uint16) {
		dst := make([]byte, 3*len(frame)+64*100)
		sizes := make([]int, 64)
		n, err := SegmentUDP(dst, frame, GSO{Type: GSOUDPL4, Size: size}, 8, sizes)
		if err != nil {
			return
		}
		ver, ipLen, end, ok := ipHeaders(frame, ProtoUDP)
		if !ok || (ver != 4 && ver != 6) {
			t.Fatalf("segmented a frame ipHeaders refuses")
		}
		hdr := EthernetLen + ipLen + 8
		payload := frame[hdr:end]
		for k, seg := range segmentsOf(dst, sizes[:n], 8) {
			// Every datagram carries a correct checksum and the next piece
			// of the payload, no more than size bytes of it.
			if !refUDPValid(t, seg) {
				t.Fatalf("datagram %d of %d: bad UDP checksum", k, n)
			}
			if len(seg)-hdr > int(size) || !bytes.HasPrefix(payload, seg[hdr:]) {
				t.Fatalf("datagram %d of %d: payload differs", k, n)
			}
			payload = payload[len(seg)-hdr:]
		}
		if len(payload) != 0 {
			t.Fatalf("%d payload bytes not sent", len(payload))
		}
	})
}
