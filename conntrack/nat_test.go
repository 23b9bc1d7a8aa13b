package conntrack

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	pod   = "10.128.0.5"
	pod2  = "10.128.0.6"
	node  = "192.168.1.10"
	far   = "93.184.216.34"
	rtr   = "10.9.9.1"
	vip   = "172.30.0.10"
	vip2  = "172.30.0.11"
	bknd  = "10.128.0.7"
	cliIP = "10.0.0.1"
)

var (
	natBare = Action{NAT: NAT{Kind: NATBare}}
	snat    = Action{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4(node)}}
	dnat    = Action{Commit: true, NAT: NAT{Kind: NATDst, MinAddr: ip4(bknd), MinPort: 8080, MaxPort: 8080}}
)

func tcp4(src string, sport uint16, dst string, dport uint16, flags uint8, seq, ack uint32, n int) []byte {
	return build(hdr{src: src, dst: dst, proto: ProtoTCP, sport: sport, dport: dport, flags: flags, seq: seq, ack: ack, payload: n})
}

func udp4(src string, sport uint16, dst string, dport uint16, n int) []byte {
	return build(hdr{src: src, dst: dst, proto: ProtoUDP, sport: sport, dport: dport, payload: n})
}

func TestSNAT(t *testing.T) {
	tr, c := newTracker(t, Config{})
	const snatted = StateSNAT
	run(t, tr, c, []step{
		{name: "SYN out", pkt: tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), act: snat, state: trkNew | snatted,
			want: tcp4(node, 40000, far, 80, tcpSYN, 1, 0, 0)},
		{name: "SYN+ACK back", pkt: tcp4(far, 80, node, 40000, tcpSYN|tcpACK, 9, 2, 0), act: natBare, state: trkEstRpl | StateDNAT,
			want: tcp4(far, 80, pod, 40000, tcpSYN|tcpACK, 9, 2, 0)},
		{name: "ACK out", pkt: tcp4(pod, 40000, far, 80, tcpACK, 2, 10, 0), act: natBare, state: trkEst | snatted,
			want: tcp4(node, 40000, far, 80, tcpACK, 2, 10, 0)},
		{name: "data out", pkt: tcp4(pod, 40000, far, 80, tcpACK|tcpPSH, 2, 10, 1000), act: natBare, state: trkEst | snatted,
			want: tcp4(node, 40000, far, 80, tcpACK|tcpPSH, 2, 10, 1000)},
		{name: "without nat the packet stays", pkt: tcp4(pod, 40000, far, 80, tcpACK, 1002, 10, 0), act: lookup, state: trkEst,
			want: tcp4(pod, 40000, far, 80, tcpACK, 1002, 10, 0)},
		{name: "a router's error about it", pkt: icmpErr(rtr, node, icmpUnreach, 4, quote(tcp4(node, 40000, far, 80, tcpACK, 2, 10, 1000), 8)),
			act: natBare, state: trkRelRpl | StateDNAT,
			want: icmpErr(rtr, pod, icmpUnreach, 4, quote(tcp4(pod, 40000, far, 80, tcpACK, 2, 10, 1000), 8))},
	})
	// A second pod with the same source port: the port moves.
	var m Meta
	b := tcp4(pod2, 40000, far, 80, tcpSYN, 1, 0, 0)
	if r := tr.Process(c.Now(), b, 0, &snat, &m); r != ReasonNone || m.State != trkNew|snatted {
		t.Fatalf("second pod: %v %v", m.State, r)
	}
	port := get16(b, 20)
	if port == 40000 || port < 1024 || get32(b, 12) != be32(ip4(node)) {
		t.Fatalf("second pod left as %x: want %s with a port in 1024-65535 other than 40000", b[12:24], node)
	}
	if want := tcp4(node, port, far, 80, tcpSYN, 1, 0, 0); string(b) != string(want) {
		t.Errorf("second pod's SYN\n got %x\nwant %x", b, want)
	}
	run(t, tr, c, []step{{name: "its reply", pkt: tcp4(far, 80, node, port, tcpSYN|tcpACK, 7, 2, 0), act: natBare,
		state: trkEstRpl | StateDNAT, want: tcp4(far, 80, pod2, 40000, tcpSYN|tcpACK, 7, 2, 0)}})
	checkBothWays(t, tr, c)
}

func TestSNATUDPAndChecksums(t *testing.T) {
	tr, c := newTracker(t, Config{})
	noSum := build(hdr{src: pod, dst: far, proto: ProtoUDP, sport: 5000, dport: 53, payload: 40, noUDPCsum: true})
	noSumWant := build(hdr{src: node, dst: far, proto: ProtoUDP, sport: 5000, dport: 53, payload: 40, noUDPCsum: true})
	run(t, tr, c, []step{
		{name: "query", pkt: udp4(pod, 5000, far, 53, 40), act: snat, state: trkNew | StateSNAT, want: udp4(node, 5000, far, 53, 40)},
		{name: "answer", pkt: udp4(far, 53, node, 5000, 300), act: natBare, state: trkEstRpl | StateDNAT, want: udp4(far, 53, pod, 5000, 300)},
		{name: "no checksum stays none", pkt: noSum, act: natBare, state: trkEst | StateSNAT, want: noSumWant},
		{name: "port unreachable", pkt: icmpErr(far, node, icmpUnreach, 3, quote(udp4(node, 5000, far, 53, 40), 8)), act: natBare,
			state: trkRelRpl | StateDNAT, want: icmpErr(far, pod, icmpUnreach, 3, quote(udp4(pod, 5000, far, 53, 40), 8))},
		{name: "partial checksum", pkt: partialCopy(udp4(pod, 5000, far, 53, 1400)), act: natBare, flags: CsumPartial,
			state: trkEst | StateSNAT, want: partialCopy(udp4(node, 5000, far, 53, 1400))},
	})
}

func TestSNATPartialSuperFrame(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "SYN", pkt: tcp4(pod, 40000, far, 80, tcpSYN, 1, 0, 0), act: snat, state: trkNew | StateSNAT},
		{name: "SYN+ACK", pkt: tcp4(far, 80, node, 40000, tcpSYN|tcpACK, 9, 2, 0), act: natBare, state: trkEstRpl | StateDNAT},
		{name: "64 KiB super-frame, partial checksum", pkt: partialCopy(tcp4(pod, 40000, far, 80, tcpACK, 2, 10, 65000)),
			act: natBare, flags: CsumPartial, state: trkEst | StateSNAT, want: partialCopy(tcp4(node, 40000, far, 80, tcpACK, 2, 10, 65000))},
	})
	// A port change does not touch a partial sum.
	var m Meta
	b := partialCopy(tcp4(pod2, 40000, far, 80, tcpSYN, 1, 0, 0))
	tr.Process(c.Now(), b, CsumPartial, &snat, &m)
	if want := partialCopy(tcp4(node, get16(b, 20), far, 80, tcpSYN, 1, 0, 0)); string(b) != string(want) || get16(b, 20) == 40000 {
		t.Errorf("partial sum after a port change\n got %x\nwant %x", b, want)
	}
}

func TestDNAT(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "SYN to the VIP", pkt: tcp4(cliIP, 50000, vip, 80, tcpSYN, 1, 0, 0), act: dnat, state: trkNew | StateDNAT,
			want: tcp4(cliIP, 50000, bknd, 8080, tcpSYN, 1, 0, 0)},
		{name: "SYN+ACK from the backend", pkt: tcp4(bknd, 8080, cliIP, 50000, tcpSYN|tcpACK, 9, 2, 0), act: natBare,
			state: trkEstRpl | StateSNAT, want: tcp4(vip, 80, cliIP, 50000, tcpSYN|tcpACK, 9, 2, 0)},
		{name: "data", pkt: tcp4(cliIP, 50000, vip, 80, tcpACK, 2, 10, 500), act: natBare, state: trkEst | StateDNAT,
			want: tcp4(cliIP, 50000, bknd, 8080, tcpACK, 2, 10, 500)},
		{name: "a router's error to the client", pkt: icmpErr(rtr, cliIP, icmpTimeExceeded, 0, quote(tcp4(cliIP, 50000, bknd, 8080, tcpACK, 2, 10, 500), 8)),
			act: natBare, state: trkRelRpl | StateSNAT,
			want: icmpErr(vip, cliIP, icmpTimeExceeded, 0, quote(tcp4(cliIP, 50000, vip, 80, tcpACK, 2, 10, 500), 8))},
		{name: "the client's error about a reply", pkt: icmpErr(cliIP, vip, icmpUnreach, 3, quote(tcp4(vip, 80, cliIP, 50000, tcpACK, 10, 2, 50), 8)),
			act: natBare, state: StateTrk | StateRel | StateDNAT,
			want: icmpErr(cliIP, bknd, icmpUnreach, 3, quote(tcp4(bknd, 8080, cliIP, 50000, tcpACK, 10, 2, 50), 8))},
	})
	// The same client port to another VIP on the same backend: the reply
	// tuple collides, so OVS moves the client's source port.
	var m Meta
	b := tcp4(cliIP, 50000, vip2, 80, tcpSYN, 1, 0, 0)
	if r := tr.Process(c.Now(), b, 0, &dnat, &m); r != ReasonNone {
		t.Fatal(r)
	}
	port := get16(b, 20)
	if want := tcp4(cliIP, port, bknd, 8080, tcpSYN, 1, 0, 0); string(b) != string(want) || port == 50000 {
		t.Fatalf("second VIP's SYN\n got %x\nwant %x (with another source port)", b, want)
	}
	run(t, tr, c, []step{{name: "its reply", pkt: tcp4(bknd, 8080, cliIP, port, tcpSYN|tcpACK, 9, 2, 0), act: natBare,
		state: trkEstRpl | StateSNAT, want: tcp4(vip2, 80, cliIP, 50000, tcpSYN|tcpACK, 9, 2, 0)}})
	checkBothWays(t, tr, c)
}

func TestNATRanges(t *testing.T) {
	t.Run("port range exhausted", func(t *testing.T) {
		var log bytes.Buffer
		tr, c := newTracker(t, Config{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		a := Action{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4(node), MinPort: 5000, MaxPort: 5001}}
		seen := map[uint16]bool{}
		for i, src := range []string{"10.128.0.1", "10.128.0.2", "10.128.0.3"} {
			var m Meta
			b := udp4(src, 7000, far, 53, 10)
			r := tr.Process(c.Now(), b, 0, &a, &m)
			if i < 2 {
				p := get16(b, 20)
				if r != ReasonNone || p < 5000 || p > 5001 || seen[p] {
					t.Fatalf("%s: %v, port %d", src, r, p)
				}
				seen[p] = true
				continue
			}
			if r != ReasonNATExhausted || m.State != trkNew || string(b) != string(udp4(src, 7000, far, 53, 10)) {
				t.Errorf("third: %v %v, packet %x: want nat_exhausted, +trk+new, untouched", r, m.State, b[12:24])
			}
		}
		// More refusals within the second log nothing more.
		for range 5 {
			var m Meta
			tr.Process(c.Now(), udp4("10.128.0.4", 7000, far, 53, 10), 0, &a, &m)
		}
		if n := strings.Count(log.String(), "no free tuple"); n != 1 {
			t.Errorf("%d warnings for 6 refusals in a second:\n%s", n, log.String())
		}
		c.advance(time.Second)
		var m Meta
		tr.Process(c.Now(), udp4("10.128.0.4", 7000, far, 53, 10), 0, &a, &m)
		if n := strings.Count(log.String(), "no free tuple"); n != 2 {
			t.Errorf("%d warnings a second later, want 2", n)
		}
	})
	t.Run("address range and persistent", func(t *testing.T) {
		a := Action{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4("192.168.1.10"), MaxAddr: ip4("192.168.1.12"), Persistent: true}}
		pick := func() (got []uint32) {
			tr, c := newTracker(t, Config{})
			for i := range 20 {
				var m Meta
				b := udp4(fmt.Sprintf("10.128.1.%d", i), 7000, far, 53, 10)
				tr.Process(c.Now(), b, 0, &a, &m)
				if s := get32(b, 12); s < be32(ip4("192.168.1.10")) || s > be32(ip4("192.168.1.12")) {
					t.Fatalf("source %x outside the range", s)
				}
				got = append(got, get32(b, 12))
			}
			return got
		}
		first, second := pick(), pick()
		if fmt.Sprint(first) != fmt.Sprint(second) {
			t.Errorf("persistent choices differ between trackers:\n%v\n%v", first, second)
		}
		n := map[uint32]bool{}
		for _, a := range first {
			n[a] = true
		}
		if len(n) < 2 {
			t.Errorf("20 sources all got %v", first)
		}
	})
	t.Run("src=0.0.0.0 moves the port only on collision", func(t *testing.T) {
		tr, c := newTracker(t, Config{})
		zero := Action{Commit: true, NAT: NAT{Kind: NATSrc}}
		toPod := Action{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4(pod)}}
		run(t, tr, c, []step{
			{name: "no collision", pkt: udp4(pod, 7000, far, 53, 10), act: zero, state: trkNew | StateSNAT, want: udp4(pod, 7000, far, 53, 10)},
			// Another host's flow translated to pod:7100 holds the reply
			// tuple far:53 -> pod:7100.
			{name: "take the reply tuple", pkt: udp4("10.128.0.9", 7100, far, 53, 10), act: toPod, state: trkNew | StateSNAT, want: udp4(pod, 7100, far, 53, 10)},
		})
		var m Meta
		b := udp4(pod, 7100, far, 53, 10)
		if r := tr.Process(c.Now(), b, 0, &zero, &m); r != ReasonNone {
			t.Fatal(r)
		}
		if p := get16(b, 20); p == 7100 || p < 1024 || get32(b, 12) != be32(ip4(pod)) {
			t.Errorf("collision left %x, want the port moved and the address kept", b[12:24])
		}
		checkBothWays(t, tr, c)
	})
	t.Run("bare nat commits without translation", func(t *testing.T) {
		tr, c := newTracker(t, Config{})
		a := Action{Commit: true, NAT: NAT{Kind: NATBare}}
		run(t, tr, c, []step{{name: "bare", pkt: udp4(pod, 7000, far, 53, 10), act: a, state: trkNew, want: udp4(pod, 7000, far, 53, 10)}})
		for e := range tr.All(c.Now()) {
			if e.NAT != NATNone {
				t.Errorf("entry %v has nat %v", e.String(), e.NAT)
			}
		}
	})
}

func TestICMPEchoNAT(t *testing.T) {
	tr, c := newTracker(t, Config{})
	run(t, tr, c, []step{
		{name: "pod pings", pkt: echo(pod, far, icmpEcho, 7, 56), act: snat, state: trkNew | StateSNAT, want: echo(node, far, icmpEcho, 7, 56)},
		{name: "reply", pkt: echo(far, node, icmpEchoReply, 7, 56), act: natBare, state: trkEstRpl | StateDNAT, want: echo(far, pod, icmpEchoReply, 7, 56)},
	})
	var m Meta
	b := echo(pod2, far, icmpEcho, 7, 56)
	tr.Process(c.Now(), b, 0, &snat, &m)
	id := get16(b, 24)
	if id == 7 {
		t.Fatal("the second pod's echo id did not move")
	}
	if want := echo(node, far, icmpEcho, id, 56); string(b) != string(want) {
		t.Errorf("second ping\n got %x\nwant %x", b, want)
	}
	run(t, tr, c, []step{
		{name: "its reply", pkt: echo(far, node, icmpEchoReply, id, 56), act: natBare, state: trkEstRpl | StateDNAT, want: echo(far, pod2, icmpEchoReply, 7, 56)},
		{name: "an error quoting the translated ping", pkt: icmpErr(rtr, node, icmpTimeExceeded, 0, quote(echo(node, far, icmpEcho, id, 56), 8)),
			act: natBare, state: trkRelRpl | StateDNAT, want: icmpErr(rtr, pod2, icmpTimeExceeded, 0, quote(echo(pod2, far, icmpEcho, 7, 56), 8))},
	})
	checkBothWays(t, tr, c)
}

// checkBothWays checks that every entry is found by its original and its
// reply tuple, and that no two entries share a key.
func checkBothWays(t testing.TB, tr *Tracker, c *clock) {
	t.Helper()
	seen := map[key]bool{}
	for i := range tr.bump.Load() {
		e := &tr.entries[i]
		if e.gen.Load()&1 == 0 {
			continue
		}
		fwd := keyOf(e.k[0][0].Load(), e.k[0][1].Load())
		for d := range 2 {
			k := keyOf(e.k[d][0].Load(), e.k[d][1].Load())
			if d == 1 && k == fwd {
				// A packet to itself (same address, same ports or
				// none): one key serves both ways, found as forward.
				continue
			}
			if seen[k] {
				t.Errorf("key %+v held twice", k)
			}
			seen[k] = true
			idx, dir, _, ok := tr.lookup(k, tr.hash(k))
			if !ok || idx != i || dir != d {
				t.Errorf("entry %d direction %d (%+v) not found: %v %d %d", i, d, k, ok, idx, dir)
			}
		}
	}
}

func TestConcurrentNATPortsUnique(t *testing.T) {
	// Eight goroutines commit SNAT connections from 400 sources with the
	// same source port to one server through a 256-port range: exactly 256
	// succeed, with 256 distinct ports.
	tr, c := newTracker(t, Config{MaxEntries: 4096})
	a := Action{Commit: true, NAT: NAT{Kind: NATSrc, MinAddr: ip4(node), MinPort: 20000, MaxPort: 20255}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ports := map[uint16]int{}
	exhausted := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				src := [4]byte{10, 128, byte(g), byte(i)}
				b := build(hdr{src: fmt.Sprintf("%d.%d.%d.%d", src[0], src[1], src[2], src[3]), dst: far, proto: ProtoUDP, sport: 7000, dport: 53, payload: 8})
				var m Meta
				r := tr.Process(c.Now(), b, 0, &a, &m)
				mu.Lock()
				switch r {
				case ReasonNone:
					ports[binary.BigEndian.Uint16(b[20:])]++
				case ReasonNATExhausted:
					exhausted++
				default:
					t.Errorf("reason %v", r)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(ports) != 256 || exhausted != 400-256 || tr.Len() != 256 {
		t.Errorf("%d distinct ports, %d exhausted, %d entries; want 256, 144, 256", len(ports), exhausted, tr.Len())
	}
	for p, n := range ports {
		if n != 1 {
			t.Errorf("port %d given %d times", p, n)
		}
	}
	checkBothWays(t, tr, c)
}
