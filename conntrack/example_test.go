package conntrack_test

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/gvswitch/gvs/conntrack"
)

// udp returns an IPv4/UDP packet with a correct IP header checksum and no
// UDP checksum (0: none).
func udp(src, dst [4]byte, sport, dport uint16) []byte {
	b := make([]byte, 28)
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], 28)
	copy(b[12:], src[:])
	copy(b[16:], dst[:])
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	s = s>>16 + s&0xffff
	binary.BigEndian.PutUint16(b[10:], ^uint16(s+s>>16))
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], 8)
	return b
}

// A stateful firewall, as the OVS rule set
//
//	table=0, ip, ct_state=-trk, actions=ct(table=1)
//	table=1, in_port=inside, ct_state=+trk+new, actions=ct(commit),output:outside
//	table=1, ct_state=+trk+est, actions=output:<other side>
//	table=1, actions=drop
//
// runs it: a query from inside is committed, its answer is +est, an
// unsolicited packet from outside is +new and dropped.
func Example() {
	t, err := conntrack.New(conntrack.Config{MaxEntries: 1024})
	if err != nil {
		panic(err)
	}
	in, out := [4]byte{10, 128, 0, 5}, [4]byte{8, 8, 8, 8}
	deliver := func(pkt []byte, inside bool) bool {
		var m conntrack.Meta // a new packet is untracked
		now := t.Now()
		t.Process(now, pkt, 0, &conntrack.Action{}, &m)
		switch {
		case m.State&conntrack.StateNew != 0 && inside:
			t.Process(now, pkt, 0, &conntrack.Action{Commit: true}, &m)
			return true
		case m.State&conntrack.StateEst != 0:
			return true
		}
		return false
	}
	fmt.Println(deliver(udp(in, out, 5000, 53), true))
	fmt.Println(deliver(udp(out, in, 53, 5000), false))
	fmt.Println(deliver(udp(out, in, 53, 5001), false))
	for e := range t.All(t.Now()) {
		fmt.Println(e.String())
	}
	// Output:
	// true
	// true
	// false
	// udp,orig=(src=10.128.0.5,dst=8.8.8.8,sport=5000,dport=53),reply=(src=8.8.8.8,dst=10.128.0.5,sport=53,dport=5000)
}

// Source NAT: ct(commit,nat(src=192.168.1.10)) on the way out,
// ct(nat) on the way back.
func Example_snat() {
	t, _ := conntrack.New(conntrack.Config{MaxEntries: 1024})
	pod, node, srv := [4]byte{10, 128, 0, 5}, [4]byte{192, 168, 1, 10}, [4]byte{8, 8, 8, 8}
	snat := conntrack.Action{Commit: true, NAT: conntrack.NAT{Kind: conntrack.NATSrc, MinAddr: node}}
	unnat := conntrack.Action{NAT: conntrack.NAT{Kind: conntrack.NATBare}}

	q := udp(pod, srv, 5000, 53)
	var m conntrack.Meta
	t.Process(t.Now(), q, 0, &snat, &m)
	fmt.Println(m.State, q[12:16])

	a := udp(srv, node, 53, 5000)
	m = conntrack.Meta{}
	t.Process(t.Now(), a, 0, &unnat, &m)
	fmt.Println(m.State, a[16:20], m.Orig())
	// Output:
	// +new+trk+snat [192 168 1 10]
	// +est+rpl+trk+dnat [10 128 0 5] src=10.128.0.5,dst=8.8.8.8,sport=5000,dport=53
}

// Carrying the connections over a restart: the old process saves the
// table, the new one loads it.
func ExampleTracker_Save() {
	old, _ := conntrack.New(conntrack.Config{MaxEntries: 1024})
	var m conntrack.Meta
	old.Process(old.Now(), udp([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}, 1, 2), 0, &conntrack.Action{Commit: true}, &m)
	var file bytes.Buffer
	n, err := old.Save(&file)
	fmt.Println(n, err)

	next, _ := conntrack.New(conntrack.Config{MaxEntries: 1024})
	res, err := next.Load(&file)
	fmt.Println(res.Loaded, res.Skipped, err)
	m = conntrack.Meta{}
	next.Process(next.Now(), udp([4]byte{10, 0, 0, 2}, [4]byte{10, 0, 0, 1}, 2, 1), 0, &conntrack.Action{}, &m)
	fmt.Println(m.State)
	// Output:
	// 1 <nil>
	// 1 0 <nil>
	// +est+rpl+trk
}
