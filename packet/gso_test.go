package packet

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// superFrame builds an Ethernet/IPv4/TCP frame with a 12-byte timestamp
// option, payload bytes of payload and a complete TCP checksum.
func superFrame(payload int, flags uint8) []byte {
	const ipLen, tcpLen = 20, 32
	f := make([]byte, EthernetLen+ipLen+tcpLen+payload)
	copy(f[0:6], []byte{0x0a, 0x58, 0x0a, 0x80, 0x02, 0x03})
	copy(f[6:12], []byte{0x0a, 0x58, 0x0a, 0x80, 0x00, 0x03})
	binary.BigEndian.PutUint16(f[12:14], EtherTypeIPv4)
	ip := f[EthernetLen:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(ipLen+tcpLen+payload))
	binary.BigEndian.PutUint16(ip[4:6], 0x1234)
	ip[6] = 0x40 // DF
	ip[8] = 64
	ip[9] = ProtoTCP
	copy(ip[12:16], []byte{10, 128, 0, 3})
	copy(ip[16:20], []byte{10, 128, 2, 3})
	ipv4HeaderChecksum(ip, ipLen)
	tcp := ip[ipLen:]
	binary.BigEndian.PutUint16(tcp[0:2], 48084)
	binary.BigEndian.PutUint16(tcp[2:4], 5201)
	binary.BigEndian.PutUint32(tcp[4:8], 0xfffff000) // wraps during the test
	binary.BigEndian.PutUint32(tcp[8:12], 77)
	tcp[12] = byte(tcpLen/4) << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:16], 502)
	copy(tcp[20:32], []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2})
	for i := range payload {
		tcp[tcpLen+i] = byte(i * 7)
	}
	l4 := tcp[:tcpLen+payload]
	binary.BigEndian.PutUint16(tcp[16:18], ^Checksum(l4, PseudoHeaderSum(ip[12:16], ip[16:20], ProtoTCP, len(l4))))
	return f
}

func ipv4HeaderValid(ip []byte) bool { return Checksum(ip[:int(ip[0]&0xf)*4], 0) == 0xffff }

func TestSegmentTCPAndCoalesce(t *testing.T) {
	const mss = 1398
	for _, payload := range []int{1, mss, mss + 1, 10 * mss, 46*mss + 17, 65535 - 52} {
		orig := superFrame(payload, TCPFlagACK|TCPFlagPSH)
		g := GSO{Type: GSOTCPv4, Size: mss, HdrLen: 66}
		dst := make([]byte, 2*len(orig)+64*(66+8))
		sizes := make([]int, 64)
		n, err := SegmentTCP(dst, orig, g, 8, sizes)
		if err != nil {
			t.Fatalf("payload %d: %v", payload, err)
		}
		if want := (payload + mss - 1) / mss; n != want {
			t.Fatalf("payload %d: %d segments, want %d", payload, n, want)
		}
		var c TCPCoalescer
		out := make([]byte, MaxSuperFrame)
		for k, seg := range segmentsOf(dst, sizes[:n], 8) {
			if !TCPChecksumValid(seg) || !ipv4HeaderValid(seg[EthernetLen:]) {
				t.Fatalf("payload %d segment %d: bad checksum", payload, k)
			}
			if got, want := binary.BigEndian.Uint16(seg[EthernetLen+4:]), uint16(0x1234+k); got != want {
				t.Errorf("segment %d: ip id %#x, want %#x", k, got, want)
			}
			fl := seg[EthernetLen+20+13]
			if (fl&TCPFlagPSH != 0) != (k == n-1) {
				t.Errorf("segment %d of %d: flags %#x", k, n, fl)
			}
			if k < n-1 && sizes[k] != 66+mss {
				t.Errorf("segment %d: size %d", k, sizes[k])
			}
			if k == 0 {
				c.Start(out, seg)
			} else if !c.Append(seg) {
				t.Fatalf("payload %d: segment %d not coalesced", payload, k)
			}
		}
		m, gg := c.Finish()
		if m != len(orig) {
			t.Fatalf("payload %d: coalesced %d bytes, want %d", payload, m, len(orig))
		}
		res := out[:m]
		if n > 1 {
			if gg.Type != GSOTCPv4 || !gg.NeedsCsum || gg.Size != mss || gg.HdrLen != 66 || gg.CsumStart != 34 || gg.CsumOffset != 16 {
				t.Fatalf("gso %+v", gg)
			}
			// Complete the partial checksum as the receiving kernel would.
			cs := ^Checksum(res[gg.CsumStart:], 0)
			binary.BigEndian.PutUint16(res[gg.CsumStart+gg.CsumOffset:], cs)
			// The IP ID is that of the first segment.
		}
		if !bytes.Equal(res, orig) {
			t.Fatalf("payload %d: coalesced frame differs from the original", payload)
		}
	}
}

func TestCoalesceRefuses(t *testing.T) {
	const mss = 1000
	orig := superFrame(3*mss, TCPFlagACK)
	dst := make([]byte, 8192)
	sizes := make([]int, 8)
	n, err := SegmentTCP(dst, orig, GSO{Type: GSOTCPv4, Size: mss}, 0, sizes)
	if err != nil || n != 3 {
		t.Fatal(n, err)
	}
	s0, s1, s2 := dst[:sizes[0]], dst[sizes[0]:sizes[0]+sizes[1]], dst[sizes[0]+sizes[1]:sizes[0]+sizes[1]+sizes[2]]
	out := make([]byte, MaxSuperFrame)
	var c TCPCoalescer
	c.Start(out, s0)
	if c.Append(s2) {
		t.Error("appended a segment out of sequence")
	}
	bad := bytes.Clone(s1)
	bad[len(bad)-1] ^= 1
	if c.Append(bad) {
		t.Error("appended a segment with a bad checksum")
	}
	other := bytes.Clone(s1)
	other[EthernetLen+20+1]++ // source port
	if c.Append(other) {
		t.Error("appended a segment of another flow")
	}
	if !c.Append(s1) || !c.Append(s2) {
		t.Error("refused the right segments")
	}
	if n, g := c.Finish(); n != len(orig) || g.Type != GSOTCPv4 {
		t.Errorf("finish %d %+v", n, g)
	}
	// A first segment with a bad checksum is passed on alone, as is.
	bad0 := bytes.Clone(s0)
	bad0[len(bad0)-3] ^= 0x10
	c.Start(out, bad0)
	if c.Append(s1) {
		t.Error("extended a first segment with a bad checksum")
	}
	if n, g := c.Finish(); n != len(bad0) || g.IsGSO() || !bytes.Equal(out[:n], bad0) {
		t.Errorf("bad first segment: finish %d %+v", n, g)
	}
	// A refused segment leaves the frame as it was.
	c.Start(out, s0)
	badsum := bytes.Clone(s1)
	badsum[EthernetLen+20+16] ^= 0x01 // the checksum field itself
	if c.Append(badsum) || c.Len() != len(s0) || !bytes.Equal(out[:c.Len()], s0) {
		t.Error("a refused segment changed the frame")
	}
	// A damaged IPv4 header (ID changed, header checksum not) is neither
	// appended nor extended: merged, it would get a valid checksum.
	badIP := bytes.Clone(s1)
	badIP[EthernetLen+5]++
	c.Start(out, s0)
	if c.Append(badIP) {
		t.Error("appended a segment with a bad IPv4 header checksum")
	}
	badIP0 := bytes.Clone(s0)
	badIP0[EthernetLen+8]--
	c.Start(out, badIP0)
	if c.Append(s1) {
		t.Error("extended a first segment with a bad IPv4 header checksum")
	}
	// A SYN is never extended.
	syn := superFrame(100, TCPFlagSYN|TCPFlagACK)
	c.Start(out, syn)
	if c.Append(s1) {
		t.Error("extended a SYN")
	}
	if n, g := c.Finish(); n != len(syn) || g.IsGSO() {
		t.Errorf("single frame %d %+v", n, g)
	}
}

func TestSegmentAllocs(t *testing.T) {
	orig := superFrame(40000, TCPFlagACK)
	dst := make([]byte, 65536)
	sizes := make([]int, 64)
	out := make([]byte, MaxSuperFrame)
	a := testing.AllocsPerRun(50, func() {
		n, _ := SegmentTCP(dst, orig, GSO{Type: GSOTCPv4, Size: 1398}, 0, sizes)
		var c TCPCoalescer
		off := 0
		for k := range n {
			seg := dst[off : off+sizes[k]]
			off += sizes[k]
			if k == 0 {
				c.Start(out, seg)
			} else {
				c.Append(seg)
			}
		}
		c.Finish()
	})
	if a != 0 {
		t.Errorf("%v allocs", a)
	}
}

func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 1448)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		Checksum(buf, 0)
	}
}

func BenchmarkSegmentTCP(b *testing.B) {
	orig := superFrame(65535-52, TCPFlagACK)
	dst := make([]byte, 80000)
	sizes := make([]int, 64)
	b.SetBytes(int64(len(orig)))
	b.ReportAllocs()
	for b.Loop() {
		SegmentTCP(dst, orig, GSO{Type: GSOTCPv4, Size: 1398}, 8, sizes)
	}
}

func BenchmarkCoalesceTCP(b *testing.B) {
	orig := superFrame(46*1398, TCPFlagACK)
	dst := make([]byte, 100000)
	sizes := make([]int, 64)
	n, _ := SegmentTCP(dst, orig, GSO{Type: GSOTCPv4, Size: 1398}, 0, sizes)
	if n != 46 {
		b.Fatal(n)
	}
	out := make([]byte, MaxSuperFrame)
	b.SetBytes(int64(len(orig)))
	b.ReportAllocs()
	for b.Loop() {
		var c TCPCoalescer
		off := 0
		for k := range n {
			seg := dst[off : off+sizes[k]]
			off += sizes[k]
			if k == 0 {
				c.Start(out, seg)
			} else if !c.Append(seg) {
				b.Fatalf("segment %d not coalesced", k)
			}
		}
		c.Finish()
	}
}

// refTCPValid is TCPChecksumValid computed with the RFC 1071 reference
// sum, for the fuzz targets.
func refTCPValid(frame []byte) bool {
	ip, l4, ok := tcpv4Segment(frame)
	if !ok {
		return false
	}
	var ph [12]byte
	copy(ph[0:8], ip[12:20])
	ph[9] = ProtoTCP
	binary.BigEndian.PutUint16(ph[10:12], uint16(len(l4)))
	return refChecksum(l4, refChecksum(ph[:], 0)) == 0xffff
}

func FuzzSegmentTCP(f *testing.F) {
	f.Add(superFrame(3000, TCPFlagACK|TCPFlagFIN), uint16(1000))
	f.Add(superFrame(10, TCPFlagSYN), uint16(1))
	f.Fuzz(func(t *testing.T, frame []byte, mss uint16) {
		dst := make([]byte, 3*len(frame)+64*100)
		sizes := make([]int, 64)
		n, err := SegmentTCP(dst, frame, GSO{Type: GSOTCPv4, Size: mss}, 8, sizes)
		if err != nil {
			return
		}
		ver, ipLen, tcpLen, _, _ := tcpHeaders(frame)
		hdr := EthernetLen + ipLen + tcpLen
		var payload []byte
		if ver == 4 {
			payload = frame[hdr : EthernetLen+int(binary.BigEndian.Uint16(frame[EthernetLen+2:]))]
		}
		var c TCPCoalescer
		out := make([]byte, MaxSuperFrame)
		for k, seg := range segmentsOf(dst, sizes[:n], 8) {
			if ver == 4 {
				// Every segment carries a correct checksum and the next
				// piece of the payload.
				if !refTCPValid(seg) {
					t.Fatalf("segment %d of %d: bad TCP checksum", k, n)
				}
				if !bytes.HasPrefix(payload, seg[hdr:]) {
					t.Fatalf("segment %d of %d: payload differs", k, n)
				}
				payload = payload[len(seg)-hdr:]
			}
			if k == 0 {
				c.Start(out, seg)
			} else {
				c.Append(seg)
			}
		}
		c.Finish()
	})
}

func FuzzTCPCoalescer(f *testing.F) {
	f.Add(superFrame(100, TCPFlagACK), superFrame(100, TCPFlagACK))
	{
		dst := make([]byte, 4096)
		sizes := make([]int, 4)
		if n, err := SegmentTCP(dst, superFrame(2001, TCPFlagACK), GSO{Type: GSOTCPv4, Size: 1001}, 0, sizes); err == nil && n == 2 {
			a, b := dst[:sizes[0]], dst[sizes[0]:sizes[0]+sizes[1]]
			f.Add(bytes.Clone(a), bytes.Clone(b))
			bad := bytes.Clone(b)
			bad[len(bad)-1] ^= 0x80
			f.Add(bytes.Clone(a), bad)
			f.Add(bad, bytes.Clone(b))
		}
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var c TCPCoalescer
		out := make([]byte, MaxSuperFrame)
		if !c.Start(out, a) {
			return
		}
		if !bytes.Equal(out[:c.Len()], a) {
			t.Fatal("Start did not copy the segment")
		}
		if c.Append(b) {
			// Never launder a bad checksum into a super-frame.
			if !refTCPValid(a) || !refTCPValid(b) {
				t.Fatalf("coalesced a segment with a bad checksum (a %v, b %v)", refTCPValid(a), refTCPValid(b))
			}
			hdr := len(a) - c.size
			if c.Len() != len(a)+len(b)-hdr || !bytes.Equal(out[:len(a)], a) || !bytes.Equal(out[len(a):c.Len()], b[hdr:]) {
				t.Fatal("coalesced frame is not a followed by b's payload")
			}
		} else if !bytes.Equal(out[:c.Len()], a) {
			t.Fatal("a refused Append changed the frame")
		}
		n, g := c.Finish()
		if n > len(out) || (g.IsGSO() && int(g.HdrLen) > n) {
			t.Fatalf("n %d g %+v", n, g)
		}
	})
}
