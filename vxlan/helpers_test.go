package vxlan

import (
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strings"
	"testing"
)

// unhex decodes a hex fixture; spaces and newlines are ignored.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad fixture: %v", err)
	}
	return b
}

// ipv4Frame builds an Ethernet/IPv4 frame with a valid header checksum.
func ipv4Frame(dstMAC, srcMAC [6]byte, src, dst [4]byte, proto uint8, l4 []byte) []byte {
	f := make([]byte, 14+20+len(l4))
	copy(f[0:6], dstMAC[:])
	copy(f[6:12], srcMAC[:])
	binary.BigEndian.PutUint16(f[12:14], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:4], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(ip[6:8], 0x4000) // DF
	ip[8] = 64
	ip[9] = proto
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:12], ipChecksum(ip))
	copy(f[34:], l4)
	return f
}

// udpFrame builds an Ethernet/IPv4/UDP frame (UDP checksum 0: none).
func udpFrame(dstMAC, srcMAC [6]byte, src, dst [4]byte, sport, dport uint16, payload []byte) []byte {
	u := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], dport)
	binary.BigEndian.PutUint16(u[4:6], uint16(8+len(payload)))
	copy(u[8:], payload)
	return ipv4Frame(dstMAC, srcMAC, src, dst, 17, u)
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func netipAddr4(a, b, c, d byte) netip.Addr { return netip.AddrFrom4([4]byte{a, b, c, d}) }
