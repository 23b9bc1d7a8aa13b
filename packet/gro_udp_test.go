package packet

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// splitUDP segments a UDP super-frame into its datagrams.
func splitUDP(t testing.TB, frame []byte, size int) [][]byte {
	t.Helper()
	dst := make([]byte, 2*len(frame)+MaxUDPCoalesce*64)
	sizes := make([]int, 2*MaxUDPCoalesce)
	n, err := SegmentUDP(dst, frame, GSO{Type: GSOUDPL4, Size: uint16(size)}, 0, sizes)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	off := 0
	for k := range n {
		out = append(out, dst[off:off+sizes[k]])
		off += sizes[k]
	}
	return out
}

func TestUDPCoalesceRoundTrip(t *testing.T) {
	const size = 1000
	for _, payload := range []int{size, size + 1, 10 * size, 63*size + 17, 64 * size} {
		orig := udpSuperFrame(4, payload, false)
		dgrams := splitUDP(t, orig, size)
		var c Coalescer
		c.UDP = true
		out := make([]byte, MaxSuperFrame)
		c.Start(out, dgrams[0])
		for k, d := range dgrams[1:] {
			if !c.Append(d) {
				t.Fatalf("payload %d: datagram %d not merged", payload, k+1)
			}
		}
		n, g := c.Finish()
		res := out[:n]
		if len(dgrams) == 1 {
			if g.IsGSO() || !bytes.Equal(res, orig) {
				t.Fatalf("payload %d: one datagram came back changed (%+v)", payload, g)
			}
			continue
		}
		if g.Type != GSOUDPL4 || !g.NeedsCsum || g.Size != size || g.HdrLen != 42 || g.CsumStart != 34 || g.CsumOffset != 6 {
			t.Fatalf("payload %d: gso %+v", payload, g)
		}
		// Complete the partial checksum as the receiving kernel would: the
		// frame must then be the original (whose IP ID is the first
		// datagram's).
		cs := ^Checksum(res[g.CsumStart:], 0)
		binary.BigEndian.PutUint16(res[g.CsumStart+g.CsumOffset:], cs)
		if !bytes.Equal(res, orig) {
			t.Fatalf("payload %d: merged frame differs from the original", payload)
		}
		// And it segments back into the same datagrams.
		for k, d := range splitUDP(t, res, int(g.Size)) {
			if !bytes.Equal(d, dgrams[k]) {
				t.Fatalf("payload %d: datagram %d differs after the round trip", payload, k)
			}
		}
	}
}

func TestUDPCoalesceRefuses(t *testing.T) {
	const size = 500
	base := splitUDP(t, udpSuperFrame(4, 3*size, false), size)
	mod := func(f func(d []byte)) []byte {
		d := bytes.Clone(base[1])
		f(d)
		return d
	}
	fixIP := func(d []byte) { ipv4HeaderChecksum(d[EthernetLen:], 20) }
	long := splitUDP(t, udpSuperFrame(4, 3*size, false), size+1)[0]
	for name, d := range map[string][]byte{
		"other port":   mod(func(d []byte) { d[EthernetLen+20+1]++ }),
		"bad checksum": mod(func(d []byte) { d[len(d)-1]++ }),
		"no checksum":  mod(func(d []byte) { d[EthernetLen+26], d[EthernetLen+27] = 0, 0 }),
		"other TTL":    mod(func(d []byte) { d[EthernetLen+8]--; fixIP(d) }),
		"fragment":     mod(func(d []byte) { d[EthernetLen+6] |= 0x20; fixIP(d) }),
		"other MAC":    mod(func(d []byte) { d[0] ^= 2 }),
		"bad IP csum":  mod(func(d []byte) { d[EthernetLen+5]++ }), // ID: not compared, but covered by the header checksum
		"other TOS":    mod(func(d []byte) { d[EthernetLen+1] = 0x02; fixIP(d) }),
		"other DF":     mod(func(d []byte) { d[EthernetLen+6] ^= 0x40; fixIP(d) }),
		"other source": mod(func(d []byte) { d[EthernetLen+15]++; fixIP(d) }),
		"other dest":   mod(func(d []byte) { d[EthernetLen+19]++; fixIP(d) }),
		"IP options":   mod(func(d []byte) { d[EthernetLen] = 0x46; fixIP(d) }),
		"IP length":    mod(func(d []byte) { binary.BigEndian.PutUint16(d[EthernetLen+2:], uint16(len(d)-EthernetLen-1)); fixIP(d) }),
		"ipv6":         splitUDP(t, udpSuperFrame(6, 3*size, false), size)[1],
		"longer":       long,
		"padded":       append(bytes.Clone(base[1]), 0),
		"tcp":          superFrame(size, TCPFlagACK),
	} {
		var c UDPCoalescer
		out := make([]byte, MaxSuperFrame)
		c.Start(out, base[0])
		if c.Append(d) {
			t.Errorf("%s: merged", name)
		}
		if n, g := c.Finish(); n != len(base[0]) || g.IsGSO() || !bytes.Equal(out[:n], base[0]) {
			t.Errorf("%s: a refused datagram changed the frame", name)
		}
	}
	// A shorter datagram ends the frame.
	short := splitUDP(t, udpSuperFrame(4, 2*size+10, false), size)
	var c UDPCoalescer
	c.Start(make([]byte, MaxSuperFrame), short[0])
	if !c.Append(short[1]) || !c.Append(short[2]) || c.Append(base[1]) {
		t.Error("a datagram was merged after a shorter one")
	}
	// A bad first datagram is passed on alone.
	bad := bytes.Clone(base[0])
	bad[len(bad)-1]++
	c.Start(make([]byte, MaxSuperFrame), bad)
	if c.Append(base[1]) {
		t.Error("merged into a datagram with a bad checksum")
	}
	badIP := bytes.Clone(base[0])
	badIP[EthernetLen+8]--
	c.Start(make([]byte, MaxSuperFrame), badIP)
	if c.Append(base[1]) {
		t.Error("merged into a datagram with a bad IPv4 header checksum")
	}
	// MaxUDPCoalesce datagrams at most.
	many := splitUDP(t, udpSuperFrame(4, (MaxUDPCoalesce+1)*100, false), 100)
	c.Start(make([]byte, MaxSuperFrame), many[0])
	for k, d := range many[1:] {
		if got, want := c.Append(d), k+1 < MaxUDPCoalesce; got != want {
			t.Fatalf("datagram %d: merged %v", k+1, got)
		}
	}
	// Without Coalescer.UDP nothing UDP is merged.
	var off Coalescer
	off.Start(make([]byte, MaxSuperFrame), base[0])
	if off.Append(base[1]) {
		t.Error("Coalescer merged UDP with UDP unset")
	}
}

func TestUDPCoalesceAllocs(t *testing.T) {
	dgrams := splitUDP(t, udpSuperFrame(4, 20*1000, false), 1000)
	out := make([]byte, MaxSuperFrame)
	c := Coalescer{UDP: true}
	a := testing.AllocsPerRun(100, func() {
		c.Start(out, dgrams[0])
		for _, d := range dgrams[1:] {
			c.Append(d)
		}
		c.Finish()
	})
	if a != 0 {
		t.Errorf("%v allocations per frame", a)
	}
}

func BenchmarkCoalesceUDP(b *testing.B) {
	dgrams := splitUDP(b, udpSuperFrame(4, 44*1358, false), 1358)
	out := make([]byte, MaxSuperFrame)
	var c UDPCoalescer
	b.SetBytes(44 * 1358)
	b.ReportAllocs()
	for b.Loop() {
		c.Start(out, dgrams[0])
		for _, d := range dgrams[1:] {
			c.Append(d)
		}
		c.Finish()
	}
}

func FuzzUDPCoalescer(f *testing.F) {
	d := splitUDP(f, udpSuperFrame(4, 300, false), 100)
	f.Add(d[0], d[1])
	f.Add(d[0], d[2][:len(d[2])-1])
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out := make([]byte, MaxSuperFrame)
		var c UDPCoalescer
		if !c.Start(out, a) {
			return
		}
		merged := c.Append(b)
		n, g := c.Finish()
		if !merged {
			if n != len(a) || g.IsGSO() || !bytes.Equal(out[:n], a) {
				t.Fatal("a lone datagram changed")
			}
			return
		}
		// Both inputs were valid: their checksums are what allowed the merge.
		for k, d := range [][]byte{a, b} {
			if !refUDPValid(t, d) || !ipv4HeaderValid(d[EthernetLen:]) {
				t.Fatalf("merged input %d has a bad checksum", k)
			}
		}
		// A merged frame, its checksum completed, segments back into a and
		// b, byte for byte except b's IP ID and the checksums that depend
		// on it (the kernel renumbers IDs from the first datagram's).
		res := out[:n]
		if got, want := binary.BigEndian.Uint16(res[40:42]), PseudoHeaderSum(res[26:30], res[30:34], ProtoUDP, n-34); got != want {
			t.Fatalf("partial checksum %#x, want the pseudo-header sum %#x", got, want)
		}
		binary.BigEndian.PutUint16(res[g.CsumStart+g.CsumOffset:], ^Checksum(res[g.CsumStart:], 0))
		parts := splitUDP(t, res, int(g.Size))
		if len(parts) != 2 {
			t.Fatalf("%d datagrams from a merge of 2", len(parts))
		}
		if !bytes.Equal(parts[0], a) {
			t.Fatal("the first datagram differs after the round trip")
		}
		mask := func(d []byte) []byte {
			d = bytes.Clone(d)
			for _, i := range []int{18, 19, 24, 25, 40, 41} {
				d[i] = 0
			}
			return d
		}
		if !bytes.Equal(mask(parts[1]), mask(b)) {
			t.Fatal("the second datagram differs after the round trip")
		}
	})
}

// FuzzCoalescer feeds three frames through a Coalescer with UDP on, the way
// vxlan's read does (Start, Append while it merges, Finish, Start again),
// and checks that every input comes out exactly once: alone and unchanged,
// or inside a merged frame whose payload is the merged inputs' payloads in
// order, with the first input's headers.
func FuzzCoalescer(f *testing.F) {
	u := splitUDP(f, udpSuperFrame(4, 300, false), 100)
	tcp := superFrame(3000, TCPFlagACK)
	dst := make([]byte, 8192)
	sizes := make([]int, 8)
	n, err := SegmentTCP(dst, tcp, GSO{Type: GSOTCPv4, Size: 1000}, 0, sizes)
	if err != nil || n != 3 {
		f.Fatal(n, err)
	}
	t0, t1 := bytes.Clone(dst[:sizes[0]]), bytes.Clone(dst[sizes[0]:sizes[0]+sizes[1]])
	f.Add(u[0], u[1], u[2])
	f.Add(t0, t1, u[0])
	f.Add(u[0], t0, t1)
	f.Add(u[0], u[1], t0)
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		in := [][]byte{a, b, c}
		var co Coalescer
		co.UDP = true
		type out struct {
			frame []byte
			g     GSO
			from  []int // inputs merged into it
		}
		var outs []out
		buf := make([]byte, MaxSuperFrame)
		var cur []int
		finish := func() {
			n, g := co.Finish()
			outs = append(outs, out{bytes.Clone(buf[:n]), g, cur})
		}
		for i, fr := range in {
			if len(cur) > 0 && co.Append(fr) {
				cur = append(cur, i)
				continue
			}
			if len(cur) > 0 {
				finish()
			}
			if !co.Start(buf, fr) {
				t.Fatalf("Start refused a %d-byte frame", len(fr))
			}
			cur = []int{i}
		}
		finish()
		seen := 0
		for _, o := range outs {
			seen += len(o.from)
			first := in[o.from[0]]
			if len(o.from) == 1 {
				if o.g.IsGSO() || !bytes.Equal(o.frame, first) {
					t.Fatalf("input %d came out changed", o.from[0])
				}
				continue
			}
			hdr := int(o.g.HdrLen)
			if !o.g.IsGSO() || hdr > len(first) || !bytes.Equal(o.frame[:12], first[:12]) {
				t.Fatalf("merged frame of %v: gso %+v", o.from, o.g)
			}
			var payload []byte
			for _, k := range o.from {
				payload = append(payload, in[k][hdr:]...)
			}
			if !bytes.Equal(o.frame[hdr:], payload) {
				t.Fatalf("merged frame of %v: payload differs", o.from)
			}
		}
		if seen != len(in) {
			t.Fatalf("%d inputs came out as %d", len(in), seen)
		}
	})
}
