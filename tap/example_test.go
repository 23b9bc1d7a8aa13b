package tap_test

import (
	"fmt"

	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
)

// A frame as a TAP with checksum offload hands it over: the header says the
// UDP checksum (6 bytes into the UDP header, which starts 34 bytes into the
// Ethernet frame) is partial.
func ExampleParseVnetHdr() {
	b := make([]byte, tap.VnetHdrLen+60)
	tap.VnetHdr(b).SetPartialCsum(34, 6)

	h, err := tap.ParseVnetHdr(b)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.NeedsCsum(), h.IsGSO(), h.CsumStart(), h.CsumOffset())
	fmt.Printf("% x\n", []byte(h))
	// Output:
	// true false 34 6
	// 01 00 00 00 00 00 22 00 06 00
}

// Creating a TAP and moving frames through it. Frames start at offset 64 in
// each buffer; the 10 bytes before hold the virtio_net_hdr.
func ExampleCreate() {
	dev, err := tap.Create(tap.Config{Name: "gvs-pod0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()

	const offset = 64
	bufs := make([][]byte, dev.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, offset+1514+1)
	}
	meta := make([]port.Meta, len(bufs))
	n, err := dev.Read(bufs, meta, offset) // blocks for at least one frame
	if err != nil {
		fmt.Println(err)
		return
	}
	// Send them back out (a real switch would forward them elsewhere):
	// meta[i] says how long frame i is and carries its offload metadata.
	if _, err := dev.Write(bufs[:n], meta[:n], offset); err != nil {
		fmt.Println(err)
	}
}
