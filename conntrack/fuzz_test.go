package conntrack

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// checkInvariants checks what must hold after any sequence of calls: the
// global and zone limits, the class counts adding up to the entries, and
// every entry found from both directions.
func checkInvariants(t testing.TB, tr *Tracker, c *clock) {
	t.Helper()
	n := tr.Len()
	if n > tr.Cap() || n < 0 {
		t.Fatalf("%d entries, limit %d", n, tr.Cap())
	}
	live := 0
	zones := map[uint16]int{}
	for i := range tr.bump.Load() {
		e := &tr.entries[i]
		if e.gen.Load()&1 == 1 {
			live++
			zones[keyOf(e.k[0][0].Load(), e.k[0][1].Load()).zone()]++
		}
	}
	if live != n {
		t.Fatalf("%d live entries, count says %d", live, n)
	}
	var byClass int64
	for _, v := range tr.Stats().ByClass {
		byClass += v
	}
	if byClass != int64(n) {
		t.Fatalf("class counts add up to %d, %d entries", byClass, n)
	}
	for z, k := range zones {
		lim, cnt := tr.ZoneLimit(z)
		if cnt != k || lim > 0 && k > lim {
			t.Fatalf("zone %d: %d entries, count %d, limit %d", z, k, cnt, lim)
		}
	}
	checkBothWays(t, tr, c)
}

// fuzzAddrs are the few addresses fuzzed packets use, so that they meet
// each other's connections.
var fuzzAddrs = [4]string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "192.168.1.10"}

// fuzzPacket makes a packet from 8 fuzzer bytes: protocol, addresses,
// ports, TCP flags and sequence numbers, ICMP type, payload.
func fuzzPacket(in []byte) []byte {
	h := hdr{src: fuzzAddrs[in[0]&3], dst: fuzzAddrs[in[0]>>2&3]}
	sport, dport := uint16(1000+int(in[1]&3)), uint16(80+int(in[1]>>2&1))
	payload := int(in[7] & 0x3f)
	switch in[0] >> 4 & 3 {
	case 0:
		h.proto, h.sport, h.dport = ProtoTCP, sport, dport
		h.flags = in[2]
		h.seq = uint32(in[3])<<24 | uint32(in[4])<<8
		h.ack = uint32(in[5])<<24 | uint32(in[6])<<8
		h.win = uint16(in[6]) << 8
	case 1:
		h.proto, h.sport, h.dport = ProtoUDP, sport, dport
	case 2:
		h.proto, h.icmpID = ProtoICMP, uint16(in[1]&3)
		h.icmpType = [4]uint8{icmpEcho, icmpEchoReply, icmpUnreach, icmpTimestamp}[in[2]&3]
		if h.icmpType == icmpUnreach {
			q := build(hdr{src: h.dst, dst: fuzzAddrs[in[3]&3], proto: ProtoUDP, sport: sport, dport: dport, payload: 8})
			h.quote = quote(q, 8)
		}
	default:
		h.proto = 47
		if in[2]&1 != 0 {
			h.proto, h.sport, h.dport = ProtoSCTP, sport, dport
		}
	}
	h.payload = payload
	return build(h)
}

// fuzzAction makes a ct action from a fuzzer byte.
func fuzzAction(v byte) Action {
	a := Action{Zone: uint16(v & 1), Commit: v&2 != 0}
	switch v >> 2 & 3 {
	case 1:
		a.NAT.Kind = NATBare
	case 2:
		a.NAT = NAT{Kind: NATSrc, MinAddr: ip4("192.168.1.10"), MinPort: 1000, MaxPort: 1003}
	case 3:
		a.NAT = NAT{Kind: NATDst, MinAddr: ip4("10.0.0.3")}
	}
	if a.NAT.Kind >= NATSrc {
		a.Commit = true
	}
	a.Force = v&0x10 != 0 && a.Commit
	if v&0x20 != 0 && a.Commit {
		a.SetMark, a.Mark, a.MarkMask = true, uint32(v), 0xff
	}
	return a
}

// FuzzProcess sends fuzzer-chosen packets (built, or raw bytes) through
// fuzzer-chosen ct actions on a small tracker, with time passing, and
// checks: no panic, ct_state consistent, the limits and both-way lookups
// (checkInvariants), and that every translated packet's reply, translated
// back, restores the original addresses and ports.
func FuzzProcess(f *testing.F) {
	f.Add([]byte{0x04, 0, tcpSYN, 0, 1, 0, 0, 0, 2, 0, 0x14, 0, tcpSYN | tcpACK, 0, 0, 0, 1, 0, 0, 0})
	f.Add([]byte{0x14, 1, 0, 0, 0, 0, 0, 8, 10, 0, 0x11, 1, 0, 0, 0, 0, 0, 8, 4, 0})
	f.Add([]byte{0x24, 2, 0, 1, 0, 0, 0, 16, 2, 0, 0x21, 2, 1, 0, 0, 0, 0, 16, 4, 0})
	f.Add([]byte{0x14, 1, 0, 0, 0, 0, 0, 8, 14, 0, 0x24, 1, 2, 1, 0, 0, 0, 8, 4, 0})
	f.Add(bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, in []byte) {
		tr, c := newTracker(t, Config{MaxEntries: 16, ZoneLimits: map[uint16]int{1: 5}, MaxFragments: 8,
			Timeouts: Timeouts{TCPEstablished: time.Minute}})
		for len(in) >= 10 {
			op, rest := in[:10], in[10:]
			in = rest
			var b []byte
			if op[9]&0x80 != 0 && len(in) >= int(op[9]&0x3f) {
				// Raw bytes, possibly fragments or nonsense.
				n := int(op[9] & 0x3f)
				b = append([]byte(nil), in[:n]...)
				in = in[n:]
			} else {
				b = fuzzPacket(op[:8])
			}
			orig := append([]byte(nil), b...)
			a := fuzzAction(op[8])
			var pf PacketFlags
			if op[9]&0x40 != 0 {
				pf = CsumVerified
			}
			tr.Prefetch(b)
			if string(b) != string(orig) {
				t.Fatal("Prefetch changed the packet")
			}
			var m Meta
			r := tr.Process(c.Now(), b, pf, &a, &m)
			checkState(t, m.State, r)
			if a.NAT.Kind != NATNone && m.State&(StateSNAT|StateDNAT) != 0 && m.State&(StateInv|StateRel) == 0 {
				checkRoundTrip(t, tr, c, orig, b, a.Zone, m.State&StateRpl != 0)
			}
			// A second ct action on the same packet, as a pipeline would.
			if op[9]&0x20 != 0 {
				a2 := fuzzAction(op[8] >> 1)
				tr.Process(c.Now(), b, pf, &a2, &m)
				if m.State&StateTrk == 0 {
					t.Fatalf("second ct left the packet untracked: %v", m.State)
				}
			}
			switch op[9] & 0x0c {
			case 0x04:
				c.advance(time.Duration(op[9]&3+1) * 10 * time.Second)
			case 0x08:
				tr.Sweep(c.Now(), int(op[7]&7))
			case 0x0c:
				if op[8]&0xf0 == 0xf0 {
					tr.FlushZone(uint16(op[8] & 1))
				}
			}
			c.advance(time.Millisecond)
		}
		checkInvariants(t, tr, c)
	})
}

// checkState checks a ct_state against ovs-fields(7)'s constraints.
func checkState(t *testing.T, s State, r Reason) {
	t.Helper()
	switch {
	case s&StateTrk == 0:
		t.Fatalf("untracked after ct: %v", s)
	case s&StateInv != 0 && s != StateTrk|StateInv:
		t.Fatalf("+inv with other flags: %v", s)
	case r.Invalid() != (s&StateInv != 0):
		t.Fatalf("reason %v with state %v", r, s)
	case s&StateNew != 0 && s&(StateEst|StateRpl) != 0:
		t.Fatalf("+new with +est or +rpl: %v", s)
	}
}

// checkRoundTrip answers a translated packet (orig became b; rpl if it
// went in the reply direction) from its destination and checks that
// ct(nat) takes the answer as the other direction and turns it into the
// exact answer to the original: addresses and ports swapped, checksums
// right.
func checkRoundTrip(t *testing.T, tr *Tracker, c *clock, orig, b []byte, zone uint16, rpl bool) {
	t.Helper()
	if len(b) < 28 || get16(b, 6)&0x3fff != 0 || get32(b, 12) == get32(b, 16) {
		return // a fragment, or a packet to itself (its reply is itself)
	}
	proto := b[9]
	var reply, want []byte
	switch proto {
	case ProtoUDP, ProtoTCP, ProtoSCTP:
		mk := func(p []byte) []byte {
			h := hdr{src: addrStr(p[16:20]), dst: addrStr(p[12:16]), proto: proto, sport: get16(p, 22), dport: get16(p, 20)}
			if proto == ProtoTCP {
				h.flags, h.seq, h.ack = tcpACK, get32(p, 28)+1, get32(p, 24)+1
			}
			return build(h)
		}
		reply, want = mk(b), mk(orig)
	case ProtoICMP:
		if b[20] != icmpEcho {
			return
		}
		reply = echo(addrStr(b[16:20]), addrStr(b[12:16]), icmpEchoReply, get16(b, 24), 0)
		want = echo(addrStr(orig[16:20]), addrStr(orig[12:16]), icmpEchoReply, get16(orig, 24), 0)
	default:
		reply = build(hdr{src: addrStr(b[16:20]), dst: addrStr(b[12:16]), proto: proto})
		want = build(hdr{src: addrStr(orig[16:20]), dst: addrStr(orig[12:16]), proto: proto})
	}
	var m Meta
	r := tr.Process(c.Now(), reply, 0, &Action{Zone: zone, NAT: NAT{Kind: NATBare}}, &m)
	if r.Invalid() || (m.State&StateRpl != 0) == rpl {
		// A TCP answer can be out of the fuzzed window; anything else
		// must be taken as the reply.
		if proto != ProtoTCP {
			t.Fatalf("reply to %x not found: %v %v", b[12:24], m.State, r)
		}
		return
	}
	if string(reply) != string(want) {
		t.Fatalf("round trip: original %x, translated %x, reply came back as\n%x, want\n%x", orig, b, reply, want)
	}
	if err := checkChecksums(reply); err != nil {
		t.Fatalf("reply after translation: %v", err)
	}
}

func addrStr(b []byte) string { return fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3]) }

// FuzzLoad loads fuzzer bytes as a saved table into a small tracker with
// zone limits. Half the inputs get a valid checksum and count first, so
// that the record checks are reached. Load must not panic; on error it
// loads nothing; what it loads respects the limits and is found both ways.
func FuzzLoad(f *testing.F) {
	seed := func(tb testing.TB) []byte {
		tr, c := newTracker(tb, Config{})
		for i, p := range [][]byte{
			tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), udp4(cliIP, 5353, vip, 53, 10), echo(cliIP, far, icmpEcho, 5, 8),
		} {
			var m Meta
			a := []Action{snat, {Zone: 3, Commit: true, NAT: NAT{Kind: NATDst, MinAddr: ip4(bknd)}}, commit}[i]
			tr.Process(c.Now(), p, 0, &a, &m)
		}
		var buf bytes.Buffer
		if _, err := tr.Save(&buf); err != nil {
			tb.Fatal(err)
		}
		return buf.Bytes()
	}
	good := seed(f)
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:headerLen+recordLen+5], true)
	f.Add([]byte("GVSCT\x00\x00\x01"), true)
	f.Fuzz(func(t *testing.T, in []byte, fix bool) {
		if fix && len(in) >= headerLen+13 {
			in = append([]byte(nil), in...)
			if n := (len(in) - headerLen - 13); n%recordLen == 0 {
				in[len(in)-13] = tagEnd
				binary.BigEndian.PutUint64(in[len(in)-12:], uint64(n/recordLen))
			}
			resum(in)
		}
		tr, c := newTracker(t, Config{MaxEntries: 4, ZoneLimits: map[uint16]int{3: 1}})
		res, err := tr.Load(bytes.NewReader(in))
		if err != nil && (res.Loaded != 0 || tr.Len() != 0) {
			t.Fatalf("failed load (%v) left %d entries", err, tr.Len())
		}
		if res.Loaded != tr.Len() {
			t.Fatalf("loaded %d, table holds %d", res.Loaded, tr.Len())
		}
		checkInvariants(t, tr, c)
	})
}
