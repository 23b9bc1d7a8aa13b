package gen

import (
	"net/netip"
	"testing"
)

// query builds a query for name of type t.
func query(name string, t uint16) []byte {
	b := []byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range splitDots(name) {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0, byte(t>>8), byte(t), 0, 1)
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func TestDNSQueryAnswer(t *testing.T) {
	b := query("Ext.Example.COM", 1)
	q, err := ParseDNSQuery(b)
	if err != nil || q.Name != "ext.example.com" || q.Type != 1 || q.ID != 0x1234 {
		t.Fatalf("%+v %v", q, err)
	}
	a := DNSAnswer(b, q, []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")})
	if a[2]&0x80 == 0 || a[7] != 2 || len(a) != len(b)+2*16 || a[len(a)-1] != 2 {
		t.Errorf("answer % x", a)
	}
	if nx := DNSAnswer(b, q, nil); nx[3]&0x0f != 3 || nx[7] != 0 {
		t.Errorf("NXDOMAIN % x", nx)
	}
	for _, bad := range [][]byte{nil, b[:11], append([]byte{0x12, 0x34, 0x81, 0}, b[4:]...), b[:len(b)-2], {0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0}} {
		if _, err := ParseDNSQuery(bad); err == nil {
			t.Errorf("% x parsed", bad)
		}
	}
}

func FuzzParseDNSQuery(f *testing.F) {
	f.Add(query("ext.example.com", 1))
	f.Add(query("a", 28))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := ParseDNSQuery(b)
		if err != nil {
			return
		}
		a := DNSAnswer(b, q, []netip.Addr{netip.MustParseAddr("192.0.2.1")})
		if q2, err := ParseDNSQuery(append(append([]byte(nil), a[:2]...), b[2:]...)); err != nil || q2.Name != q.Name {
			t.Fatalf("the query does not parse again: %v", err)
		}
	})
}
