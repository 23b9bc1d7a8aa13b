package packet

import "testing"

func TestPodMAC(t *testing.T) {
	got := PodMAC([4]byte{10, 128, 2, 7})
	want := [6]byte{0x0a, 0x58, 10, 128, 2, 7}
	if got != want {
		t.Fatalf("PodMAC = %x, want %x", got, want)
	}
	if got[0]&0x02 == 0 || got[0]&0x01 != 0 {
		t.Fatalf("PodMAC %x is not a locally administered unicast address", got)
	}
}
