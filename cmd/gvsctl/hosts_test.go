package main

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParseHostsAdd(t *testing.T) {
	h, err := parseHostsAdd([]string{"f5", "192.168.0.50", "--subnet", "10.128.100.1/23", "--fixed-vnid", "10"})
	if err != nil {
		t.Fatal(err)
	}
	if h.name != "f5" || h.ip != netip.MustParseAddr("192.168.0.50") || h.subnet != netip.MustParsePrefix("10.128.100.0/23") || h.fixedVNID == nil || *h.fixedVNID != 10 {
		t.Errorf("parsed %+v", h)
	}
	h, err = parseHostsAdd([]string{"--fixed-vnid=0", "f5", "192.168.0.50"})
	if err != nil || h.fixedVNID == nil || *h.fixedVNID != 0 || h.subnet.IsValid() {
		t.Errorf("parsed %+v, %v; want fixed VNID 0, no subnet", h, err)
	}
	if h, err = parseHostsAdd([]string{"f5", "192.168.0.50"}); err != nil || h.fixedVNID != nil {
		t.Errorf("parsed %+v, %v; want no fixed VNID", h, err)
	}
	for _, bad := range [][]string{
		{"f5"},
		{"f5", "::1"},
		{"f5", "192.168.0.50", "--fixed-vnid", "16777216"},
		{"f5", "192.168.0.50", "--fixed-vnid", "-1"},
		{"f5", "192.168.0.50", "--subnet", "10.128.0.0"},
		{"f5", "192.168.0.50", "extra"},
	} {
		if _, err := parseHostsAdd(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestWriteHostRows: one row per host, "-" for a subnet not given yet and
// for no fixed VNID.
func TestWriteHostRows(t *testing.T) {
	var b strings.Builder
	ten := uint32(10)
	writeHostRows(&b, []hostRow{{Name: "f5", IP: "192.168.0.50", Subnet: "10.128.4.0/23", FixedVNID: &ten}, {Name: "lb", IP: "192.168.0.51"}})
	want := []string{"HOST IP SUBNET FIXED VNID", "f5 192.168.0.50 10.128.4.0/23 10", "lb 192.168.0.51 - -"}
	var got []string
	for l := range strings.Lines(b.String()) {
		got = append(got, strings.Join(strings.Fields(l), " "))
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
