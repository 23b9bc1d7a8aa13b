package packet

import (
	"encoding/hex"
	"strings"
	"testing"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), "\n", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An ARP request from 10.128.0.2 (0a:58:0a:80:00:02) for 10.128.0.1.
const arpRequest = "ffffffffffff 0a580a800002 0806" +
	"0001 0800 06 04 0001 0a580a800002 0a800002 000000000000 0a800001"

// A UDP datagram 10.128.0.2:12345 → 10.128.2.3:53, 4 bytes of payload.
const udpFrame = "0a580a800203 0a580a800002 0800" +
	"4500 0020 1234 4000 40 11 0000 0a800002 0a800203" +
	"3039 0035 000c 0000 deadbeef"

// A TCP SYN 10.128.0.2:40000 → 10.128.2.3:80 with a 4-byte option (MSS).
const tcpSyn = "0a580a800203 0a580a800002 0800" +
	"4500 002c 0001 0000 40 06 0000 0a800002 0a800203" +
	"9c40 0050 00000064 00000000 60 02 ffff 0000 0000 020405b4"

func TestEthernetARP(t *testing.T) {
	f := mustHex(t, arpRequest)
	e := Ethernet(f)
	if !e.Valid() || e.Type() != EtherTypeARP {
		t.Fatalf("ethernet: valid=%v type=%#x", e.Valid(), e.Type())
	}
	if e.Dst() != [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} || e.Src() != [6]byte{0x0a, 0x58, 10, 128, 0, 2} {
		t.Errorf("macs: %x %x", e.Dst(), e.Src())
	}
	a := ARP(e.Payload())
	if !a.Valid() {
		t.Fatal("arp not valid")
	}
	if a.Op() != 1 || a.SPA() != [4]byte{10, 128, 0, 2} || a.TPA() != [4]byte{10, 128, 0, 1} ||
		a.SHA() != e.Src() || a.THA() != [6]byte{} {
		t.Errorf("arp fields: op=%d spa=%v tpa=%v sha=%x tha=%x", a.Op(), a.SPA(), a.TPA(), a.SHA(), a.THA())
	}
	e.SetDst([6]byte{1, 2, 3, 4, 5, 6})
	e.SetSrc([6]byte{6, 5, 4, 3, 2, 1})
	e.SetType(EtherTypeIPv4)
	if e.Dst() != [6]byte{1, 2, 3, 4, 5, 6} || e.Src() != [6]byte{6, 5, 4, 3, 2, 1} || e.Type() != EtherTypeIPv4 {
		t.Error("setters did not take")
	}
}

func TestIPv4UDPTCP(t *testing.T) {
	ip := IPv4(Ethernet(mustHex(t, udpFrame)).Payload())
	if !ip.Valid() {
		t.Fatal("ipv4 not valid")
	}
	if ip.HeaderLen() != 20 || ip.TotalLen() != 32 || ip.ID() != 0x1234 || ip.TTL() != 64 ||
		ip.Protocol() != ProtoUDP || ip.FragOff() != 0 || ip.MoreFragments() ||
		ip.Src() != [4]byte{10, 128, 0, 2} || ip.Dst() != [4]byte{10, 128, 2, 3} {
		t.Errorf("ipv4 fields wrong: %x", []byte(ip[:20]))
	}
	u := UDP(ip.Payload())
	if !u.Valid() || u.SrcPort() != 12345 || u.DstPort() != 53 || u.Length() != 12 || u.Checksum() != 0 {
		t.Errorf("udp: %x", []byte(u))
	}

	ip = IPv4(Ethernet(mustHex(t, tcpSyn)).Payload())
	if !ip.Valid() || ip.Protocol() != ProtoTCP {
		t.Fatal("tcp frame's ipv4 not valid")
	}
	tc := TCP(ip.Payload())
	if !tc.Valid() || tc.SrcPort() != 40000 || tc.DstPort() != 80 || tc.Seq() != 100 ||
		tc.HeaderLen() != 24 || tc.Flags() != 0x02 {
		t.Errorf("tcp: valid=%v %d→%d seq=%d hl=%d flags=%#x", tc.Valid(), tc.SrcPort(), tc.DstPort(), tc.Seq(), tc.HeaderLen(), tc.Flags())
	}
}

func TestInvalid(t *testing.T) {
	udp := mustHex(t, udpFrame)
	cases := []struct {
		name  string
		valid bool
	}{
		{"short ethernet", Ethernet(udp[:13]).Valid()},
		{"short ipv4", IPv4(udp[14:33]).Valid()},
		{"ipv6 version", IPv4(append([]byte{0x65}, udp[15:]...)).Valid()},
		{"ihl below 5", IPv4(append([]byte{0x44}, udp[15:]...)).Valid()},
		{"total length past the end", IPv4(udp[14 : 14+31]).Valid()},
		{"short udp", UDP(udp[34:41]).Valid()},
		{"short arp", ARP(mustHex(t, arpRequest)[14:41]).Valid()},
		{"arp for ipv6", ARP(append([]byte{0, 1, 0x86, 0xdd}, mustHex(t, arpRequest)[18:]...)).Valid()},
		{"tcp data offset below 5", TCP(append(append([]byte{}, mustHex(t, tcpSyn)[34:46]...), 0x40, 0x02, 0, 0, 0, 0, 0, 0)).Valid()},
		{"tcp options past the end", TCP(mustHex(t, tcpSyn)[34 : 34+22]).Valid()},
	}
	for _, c := range cases {
		if c.valid {
			t.Errorf("%s: Valid() = true", c.name)
		}
	}
}

func TestNoAllocs(t *testing.T) {
	f := mustHex(t, tcpSyn)
	var sink uint32
	n := testing.AllocsPerRun(100, func() {
		e := Ethernet(f)
		ip := IPv4(e.Payload())
		if e.Valid() && ip.Valid() {
			tc := TCP(ip.Payload())
			if tc.Valid() {
				sink += uint32(tc.SrcPort()) + uint32(ip.Src()[3])
			}
		}
	})
	if n != 0 {
		t.Errorf("parsing allocates %.0f times", n)
	}
	_ = sink
}

// FuzzHeaders checks that Valid guards every accessor: whatever the bytes,
// a header that says it is valid can be read without panicking, and its
// lengths stay inside the buffer.
func FuzzHeaders(f *testing.F) {
	for _, s := range []string{arpRequest, udpFrame, tcpSyn} {
		f.Add(mustHex(f, s))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e := Ethernet(b)
		if !e.Valid() {
			return
		}
		_, _, _ = e.Dst(), e.Src(), e.Type()
		p := e.Payload()
		if a := ARP(p); a.Valid() {
			_, _, _, _, _ = a.Op(), a.SHA(), a.SPA(), a.THA(), a.TPA()
		}
		ip := IPv4(p)
		if !ip.Valid() {
			return
		}
		if ip.HeaderLen() > int(ip.TotalLen()) || int(ip.TotalLen()) > len(p) {
			t.Fatalf("valid IPv4 with header %d, total %d, buffer %d", ip.HeaderLen(), ip.TotalLen(), len(p))
		}
		_, _, _, _, _ = ip.ID(), ip.FragOff(), ip.MoreFragments(), ip.TTL(), ip.Protocol()
		_, _ = ip.Src(), ip.Dst()
		l4 := ip.Payload()
		if u := UDP(l4); u.Valid() {
			_, _, _, _ = u.SrcPort(), u.DstPort(), u.Length(), u.Checksum()
		}
		if tc := TCP(l4); tc.Valid() {
			if tc.HeaderLen() > len(l4) {
				t.Fatalf("valid TCP with header %d > %d", tc.HeaderLen(), len(l4))
			}
			_, _, _, _ = tc.SrcPort(), tc.DstPort(), tc.Seq(), tc.Flags()
		}
	})
}
