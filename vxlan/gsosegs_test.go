//go:build linux

package vxlan

import "testing"

func TestGSOSegments(t *testing.T) {
	for _, tc := range []struct{ mtu, want int }{
		{1450, 44}, // 65507 / (8 + 14 + 1450)
		{1500, 43},
		{9000, 7},
		{200, 64}, // the UDP_SEGMENT segment limit
		{0, 0},
		{-1, 0},
		{70000, 1},
	} {
		if got := GSOSegments(tc.mtu); got != tc.want {
			t.Errorf("GSOSegments(%d) = %d, want %d", tc.mtu, got, tc.want)
		}
		if n := GSOSegments(tc.mtu); n > 0 && tc.mtu < 65000 && n*(HeaderLen+14+tc.mtu) > gsoMaxPayload {
			t.Errorf("GSOSegments(%d) = %d overflows one UDP datagram", tc.mtu, n)
		}
	}
}
