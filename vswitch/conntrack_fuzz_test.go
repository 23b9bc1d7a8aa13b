package vswitch

import (
	"encoding/binary"
	"testing"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// fuzzCTRules: a firewall in zone 1 that recirculates twice (ct_clear and a
// second zone on the way), SNAT of A's connections to B, DNAT of
// connections to 10.0.0.200 to B with un-DNAT of the replies, an output
// before a translating ct and a fork that goes on after ct(table=…).
const fuzzCTRules = `
table=0, priority=100, in_port=1, ip, actions=ct(zone=1,nat,table=1),output:3
table=0, priority=100, in_port=2, ip, actions=ct(zone=1,nat,table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, nw_dst=10.0.0.200, actions=ct(commit,zone=1,nat(dst=10.0.0.2:53-60)),ct_clear,ct(zone=2,table=2)
table=1, priority=90, in_port=1, ip, ct_state=+trk+new, actions=output:3,ct(commit,zone=1,nat(src=10.0.0.100:1000-1010)),output:2
table=1, priority=90, in_port=1, ip, ct_state=+trk+est, actions=output:2
table=1, priority=90, in_port=2, ip, ct_state=+trk+est, actions=output:1
table=1, priority=80, ip, ct_state=+trk+rel, actions=output:1,output:2
table=1, priority=0, actions=drop
table=2, priority=10, ip, ct_zone=2, actions=ct(commit,zone=2,exec(set_field:0x1->ct_mark)),output:2
`

// FuzzConntrackSwitch runs random packet sequences — TCP with any flags,
// sequence numbers and sizes, UDP, ICMP, fragments, partial checksums,
// super-frame metadata, truncated and garbage frames — through a switch
// with fuzzCTRules, in batches from either side. Nothing may panic, the
// tracker stays within its limit, and every frame written carries an
// Ethernet header. The tracker is small (64 entries) so that the limits
// and eviction are reached.
func FuzzConntrackSwitch(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 1, 1, 0, 4, 0, 0, 0, 1, 0x12})
	f.Add([]byte{1, 0, 0x10, 0, 9, 1, 2, 3, 4, 5, 0, 0x80, 0x20, 2, 0, 1, 0, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{2, 1, 0x01, 3, 0, 0xc8, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1, 0xff, 0xff, 0xff})
	// One switch for every input (its buffers are what costs), with a
	// fresh tracker each time.
	c := newCTSwitch(f, fuzzCTRules, false)
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := conntrack.New(conntrack.Config{MaxEntries: 64, MaxFragments: 16})
		if err != nil {
			t.Fatal(err)
		}
		c.t, c.sw.cfg.Conntrack = tr, tr
		for _, w := range c.w[1:] {
			w.ct.t = tr
		}
		for no := 1; no <= 3; no++ {
			c.take(no)
		}
		b := fuzzBytes(data)
		for batch := 0; batch < 16 && len(b) > 0; batch++ {
			no := 1 + int(b.next()%2)
			w := c.w[no]
			n := 1 + int(b.next())%len(w.bufs)
			for i := range n {
				frame, m := fuzzCTFrame(&b, no)
				size := copy(w.bufs[i][Headroom:], frame)
				m.Size = size
				w.meta[i] = m
			}
			w.process(n)
		}
		if c.t.Len() > c.t.Cap() {
			t.Fatalf("tracker holds %d entries, limit %d", c.t.Len(), c.t.Cap())
		}
		for no := 1; no <= 3; no++ {
			for _, fr := range c.take(no) {
				if len(fr) < packet.EthernetLen {
					t.Fatalf("port %d was given a frame of %d bytes", no, len(fr))
				}
			}
		}
	})
}

// fuzzBytes hands out the fuzzer's bytes; past the end, zeros.
type fuzzBytes []byte

func (b *fuzzBytes) next() byte {
	if len(*b) == 0 {
		return 0
	}
	c := (*b)[0]
	*b = (*b)[1:]
	return c
}

func (b *fuzzBytes) u16() uint16 { return uint16(b.next())<<8 | uint16(b.next()) }

// fuzzCTFrame makes a frame for port no (1: from A, 2: from B) from the
// fuzzer's bytes, with its metadata.
func fuzzCTFrame(b *fuzzBytes, no int) ([]byte, port.Meta) {
	kind := b.next()
	src, dst := ctA, ctB
	if no == 2 {
		src, dst = ctB, [][4]byte{ctA, ctNAT, {10, 0, 0, 200}}[int(b.next())%3]
	} else if kind&0x80 != 0 {
		dst = [4]byte{10, 0, 0, 200}
	}
	sport, dport := 1000+b.u16()%16, 50+b.u16()%16
	var f []byte
	switch kind % 5 {
	case 0:
		f = tcpCT(src, dst, sport, dport, b.next(), uint32(b.u16())<<12, uint32(b.u16())<<12, int(b.next())*8)
	case 1:
		f = udpCT(src, dst, sport, dport, string(make([]byte, int(b.next())*4)))
	case 2: // ICMP: echo, reply, or an error quoting a UDP datagram
		typ := []uint8{8, 0, 3, 11}[b.next()%4]
		l4 := make([]byte, 8)
		l4[0] = typ
		binary.BigEndian.PutUint16(l4[4:], sport)
		if typ == 3 || typ == 11 {
			q := udpCT(dst, src, dport, sport, "")[packet.EthernetLen:]
			l4 = append(l4, q[:28]...)
		}
		f = ipFrame(packet.ProtoICMP, src, dst, l4)
	case 3: // a fragment of a UDP datagram
		f = udpCT(src, dst, sport, dport, string(make([]byte, 64)))
		ip := f[packet.EthernetLen:]
		binary.BigEndian.PutUint16(ip[4:], b.u16())
		binary.BigEndian.PutUint16(ip[6:], b.u16()&0x3fff)
		binary.BigEndian.PutUint16(ip[10:], 0)
		binary.BigEndian.PutUint16(ip[10:], ^packet.Checksum(ip[:20], 0))
	default: // garbage after an Ethernet header
		f = make([]byte, packet.EthernetLen+int(b.next()))
		f[12], f[13] = 0x08, 0x00
		for i := packet.EthernetLen; i < len(f); i++ {
			f[i] = b.next()
		}
	}
	if cut := b.next(); cut&0x40 != 0 && int(cut&0x3f) < len(f) {
		f = f[:len(f)-int(cut&0x3f)] // truncated
	}
	var m port.Meta
	if g := b.next(); g&1 != 0 && len(f) > 54 {
		m.GSO = packet.GSO{Type: packet.GSOTCPv4, NeedsCsum: true, HdrLen: 54, Size: uint16(g) + 1, CsumStart: 34, CsumOffset: 16}
	} else if g&2 != 0 {
		m.GSO.NeedsCsum = true
	}
	return f, m
}
