package flowtable

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// A multitenant node program in the shape of docs/openshift-rules.md, for
// tests and benchmarks. Local node 10.0.0.1, subnet 10.128.0.0/16, cluster
// network 10.128.0.0/14, service network 172.30.0.0/16.

const nodeCookieBase = 0x0a000000

func podIP(i int) [4]byte  { return [4]byte{10, 128, byte(i / 250), byte(i%250 + 2)} }
func podPort(i int) uint32 { return uint32(3 + i) }
func podVNID(i int) uint32 { return uint32(10 + i%50) }
func nodeIP(j int) [4]byte { return [4]byte{10, 0, byte(1 + j/250), byte(j%250 + 2)} }
func nodeSubnet(j int) [4]byte {
	return [4]byte{10, byte(129 + j/256), byte(j % 256), 0}
}

func ip(a [4]byte) string { return fmt.Sprintf("%d.%d.%d.%d", a[0], a[1], a[2], a[3]) }

func fixedRules() []string {
	r := []string{
		"table=0, priority=250, in_port=2, ip, nw_dst=224.0.0.0/4, actions=drop",
		"table=0, priority=200, in_port=1, arp, nw_src=10.128.0.0/14, nw_dst=10.128.0.0/16, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
		"table=0, priority=200, in_port=1, ip, nw_src=10.128.0.0/14, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
		"table=0, priority=200, in_port=1, ip, nw_dst=10.128.0.0/14, actions=move:NXM_NX_TUN_ID[0..31]->NXM_NX_REG0[],goto_table:10",
		"table=0, priority=200, in_port=2, arp, nw_src=10.128.0.1, nw_dst=10.128.0.0/14, actions=goto_table:30",
		"table=0, priority=200, in_port=2, ip, actions=goto_table:30",
		"table=0, priority=150, in_port=1, actions=drop",
		"table=0, priority=150, in_port=2, actions=drop",
		"table=0, priority=100, arp, actions=goto_table:20",
		"table=0, priority=100, ip, actions=goto_table:20",
		"table=0, priority=0, actions=drop",
		"table=10, priority=0, actions=drop",
		"table=20, priority=300, udp, udp_dst=4789, actions=drop",
		"table=20, priority=0, actions=drop",
		"table=25, priority=0, actions=drop",
		"table=27, priority=0, actions=goto_table:30",
		"table=30, priority=0, actions=goto_table:31",
		"table=31, priority=300, arp, nw_dst=10.128.0.1, actions=output:2",
		"table=31, priority=300, ip, nw_dst=10.128.0.1, actions=output:2",
		"table=31, priority=200, arp, nw_dst=10.128.0.0/16, actions=goto_table:40",
		"table=31, priority=200, ip, nw_dst=10.128.0.0/16, actions=goto_table:70",
		"table=31, priority=100, arp, nw_dst=10.128.0.0/14, actions=goto_table:50",
		"table=31, priority=100, ip, nw_dst=10.128.0.0/14, actions=goto_table:90",
		"table=31, priority=100, ip, nw_dst=172.30.0.0/16, actions=goto_table:60",
		"table=31, priority=0, ip, actions=goto_table:99",
		"table=31, priority=0, arp, actions=drop",
		"table=40, priority=0, actions=drop",
		"table=50, priority=0, actions=drop",
		"table=60, priority=200, ip, nw_dst=172.30.0.0/16, actions=output:2",
		"table=60, priority=0, actions=drop",
		"table=70, priority=0, actions=drop",
		"table=80, priority=300, ip, nw_src=10.128.0.1, actions=output:NXM_NX_REG2[]",
		"table=80, priority=200, reg0=0, actions=output:NXM_NX_REG2[]",
		"table=80, priority=200, reg1=0, actions=output:NXM_NX_REG2[]",
		"table=80, priority=0, actions=drop",
		"table=90, priority=0, actions=drop",
		"table=99, priority=0, actions=output:2",
		"table=253, priority=0, actions=note:01.02",
	}
	for v := 10; v < 60; v++ {
		r = append(r, fmt.Sprintf("table=80, priority=100, reg0=%d, reg1=%d, actions=output:NXM_NX_REG2[]", v, v))
	}
	return r
}

func podCookie(i int) uint64 { return 0x100000000 + uint64(i) }

func podRules(i int) []string {
	p, n, v := ip(podIP(i)), podPort(i), podVNID(i)
	a := podIP(i)
	mac := fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
	c := podCookie(i)
	return []string{
		fmt.Sprintf("table=20, priority=100, cookie=%#x, in_port=%d, arp, nw_src=%s, arp_sha=%s, actions=load:%d->NXM_NX_REG0[],goto_table:30", c, n, p, mac, v),
		fmt.Sprintf("table=20, priority=100, cookie=%#x, in_port=%d, ip, nw_src=%s, actions=load:%d->NXM_NX_REG0[],goto_table:27", c, n, p, v),
		fmt.Sprintf("table=25, priority=100, cookie=%#x, ip, nw_src=%s, actions=load:%d->NXM_NX_REG0[],goto_table:27", c, p, v),
		fmt.Sprintf("table=40, priority=100, cookie=%#x, arp, nw_dst=%s, actions=output:%d", c, p, n),
		fmt.Sprintf("table=70, priority=100, cookie=%#x, ip, nw_dst=%s, actions=load:%d->NXM_NX_REG1[],load:%d->NXM_NX_REG2[],goto_table:80", c, p, v, n),
	}
}

func remoteRules(j int) []string {
	c := uint64(nodeCookieBase) + uint64(j)
	nip, sub := ip(nodeIP(j)), ip(nodeSubnet(j))
	return []string{
		fmt.Sprintf("table=10, priority=100, cookie=%#x, tun_src=%s, actions=goto_table:30", c, nip),
		fmt.Sprintf("table=50, priority=100, cookie=%#x, arp, nw_dst=%s/24, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:%s->tun_dst,output:1", c, sub, nip),
		fmt.Sprintf("table=90, priority=100, cookie=%#x, ip, nw_dst=%s/24, actions=move:NXM_NX_REG0[]->NXM_NX_TUN_ID[0..31],set_field:%s->tun_dst,output:1", c, sub, nip),
	}
}

func programText(pods, remotes int) string {
	var b strings.Builder
	for _, r := range fixedRules() {
		b.WriteString(r + "\n")
	}
	for i := 0; i < pods; i++ {
		for _, r := range podRules(i) {
			b.WriteString(r + "\n")
		}
	}
	for j := 0; j < remotes; j++ {
		for _, r := range remoteRules(j) {
			b.WriteString(r + "\n")
		}
	}
	return b.String()
}

func mustRules(tb testing.TB, text string) []*Rule {
	tb.Helper()
	rs, err := ParseRules(text)
	if err != nil {
		tb.Fatal(err)
	}
	return rs
}

func loadProgram(tb testing.TB, pods, remotes int) *Table {
	tb.Helper()
	t := New(Config{})
	if err := t.Add(mustRules(tb, programText(pods, remotes))...); err != nil {
		tb.Fatal(err)
	}
	return t
}

// udpFrame builds an Ethernet/IPv4/UDP frame.
func udpFrame(src, dst [4]byte, sport, dport uint16) []byte {
	b := make([]byte, 14+20+8+18)
	copy(b[0:6], []byte{0x0a, 0x58, dst[0], dst[1], dst[2], dst[3]})
	copy(b[6:12], []byte{0x0a, 0x58, src[0], src[1], src[2], src[3]})
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	iph := b[14:]
	iph[0] = 0x45
	binary.BigEndian.PutUint16(iph[2:], uint16(20+8+18))
	iph[8] = 64
	iph[9] = 17
	copy(iph[12:16], src[:])
	copy(iph[16:20], dst[:])
	u := iph[20:]
	binary.BigEndian.PutUint16(u[0:], sport)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], 8+18)
	return b
}

// arpFrame builds an Ethernet/ARP request.
func arpFrame(sha [6]byte, spa, tpa [4]byte) []byte {
	b := make([]byte, 14+28)
	copy(b[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(b[6:12], sha[:])
	binary.BigEndian.PutUint16(b[12:], 0x0806)
	a := b[14:]
	binary.BigEndian.PutUint16(a[0:], 1)
	binary.BigEndian.PutUint16(a[2:], 0x0800)
	a[4], a[5] = 6, 4
	binary.BigEndian.PutUint16(a[6:], 1)
	copy(a[8:14], sha[:])
	copy(a[14:18], spa[:])
	copy(a[24:28], tpa[:])
	return b
}

func podMAC(i int) [6]byte {
	a := podIP(i)
	return [6]byte{0x0a, 0x58, a[0], a[1], a[2], a[3]}
}

func fieldsOf(tb testing.TB, inPort uint32, frame []byte) Fields {
	tb.Helper()
	f := Fields{InPort: inPort}
	if !Extract(frame, &f) {
		tb.Fatal("Extract failed")
	}
	return f
}
