package gen

import (
	"errors"
	"testing"
)

func TestSCTPRoundTrip(t *testing.T) {
	init := BuildSCTPInit(40000, 80, 0, 0x11223344, false)
	p, err := ParseSCTP(init)
	if err != nil {
		t.Fatal(err)
	}
	if p.SrcPort != 40000 || p.DstPort != 80 || p.VTag != 0 || p.Chunk != SCTPChunkInit || p.InitiateTag != 0x11223344 {
		t.Errorf("INIT read back as %+v", p)
	}
	ack := BuildSCTPInit(80, 40000, 0x11223344, 0x55667788, true)
	if p, err = ParseSCTP(ack); err != nil || p.Chunk != SCTPChunkInitAck || p.VTag != 0x11223344 || p.InitiateTag != 0x55667788 {
		t.Errorf("INIT ACK read back as %+v, %v", p, err)
	}
	for name, bad := range map[string][]byte{
		"short":                        init[:20],
		"bad checksum":                 append(append([]byte{}, init[:8]...), append([]byte{1, 2, 3, 4}, init[12:]...)...),
		"INIT with a verification tag": BuildSCTPInit(1, 2, 9, 1, false),
		"zero initiate tag":            BuildSCTPInit(1, 2, 0, 0, false),
	} {
		if _, err := ParseSCTP(bad); !errors.Is(err, ErrSCTP) {
			t.Errorf("%s: err %v, want ErrSCTP", name, err)
		}
	}
}

func FuzzParseSCTP(f *testing.F) {
	f.Add(BuildSCTPInit(40000, 80, 0, 7, false))
	f.Add(BuildSCTPInit(80, 40000, 7, 9, true))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseSCTP(b)
		if err != nil {
			return
		}
		// What parses builds back to a packet that parses the same.
		q, err := ParseSCTP(BuildSCTPInit(p.SrcPort, p.DstPort, p.VTag, p.InitiateTag, p.Chunk == SCTPChunkInitAck))
		if err != nil || q != p {
			t.Fatalf("%+v rebuilt as %+v, %v", p, q, err)
		}
	})
}
