package vxlan_test

import (
	"fmt"

	"github.com/gvswitch/gvs/vxlan"
)

// Encap writes the VXLAN header into the headroom in front of a frame, and
// Decap takes it off again.
func Example() {
	const headroom = 64
	buf := make([]byte, headroom+60)
	frame := buf[headroom:]
	copy(frame, []byte{0x0a, 0x58, 10, 128, 2, 3}) // inner destination MAC

	pkt := vxlan.Encap(buf, headroom, len(frame), 10)
	fmt.Printf("header % x\n", pkt[:vxlan.HeaderLen])

	inner, vni, err := vxlan.Decap(pkt)
	fmt.Println(len(inner), vni, err)
	// Output:
	// header 08 00 00 00 00 00 0a 00
	// 60 10 <nil>
}
