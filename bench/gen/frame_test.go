package gen

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func testSpec(size, flows int) FrameSpec {
	return FrameSpec{
		SrcMAC:   [6]byte{0x0a, 0x58, 10, 1, 0, 1},
		DstMAC:   [6]byte{0x0a, 0x58, 10, 1, 0, 2},
		Src:      netip.MustParseAddr("10.1.0.1"),
		Dst:      netip.MustParseAddr("10.1.0.2"),
		BasePort: 10000,
		DstPort:  9000,
		Size:     size,
		Flows:    flows,
	}
}

// TestFrameBuilderDecodes decodes built frames with gopacket, checks every
// field, and re-serialises them with gopacket computing the checksums: the
// bytes must be identical, so both checksums are right.
func TestFrameBuilderDecodes(t *testing.T) {
	for _, size := range []int{64, 65, 100, 1400, 1464, 9000} {
		fb, err := NewFrameBuilder(testSpec(size, 300))
		if err != nil {
			t.Fatal(err)
		}
		frame := make([]byte, size)
		for _, c := range []struct {
			flow uint32
			seq  uint64
		}{{0, 0}, {1, 1}, {299, 0xffffffffffffffff}, {77, 0x0123456789abcdef}, {0xffff - 10000, 0xfffe}} {
			fb.Build(frame, c.flow, c.seq)
			p := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
			if el := p.ErrorLayer(); el != nil {
				t.Fatalf("size %d: decode: %v", size, el.Error())
			}
			eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
			if eth == nil || ip == nil || udp == nil {
				t.Fatalf("size %d: layers %v", size, p.Layers())
			}
			if eth.SrcMAC.String() != "0a:58:0a:01:00:01" || eth.DstMAC.String() != "0a:58:0a:01:00:02" {
				t.Errorf("macs %v → %v", eth.SrcMAC, eth.DstMAC)
			}
			if ip.SrcIP.String() != "10.1.0.1" || ip.DstIP.String() != "10.1.0.2" || int(ip.Length) != size-14 || ip.TTL != 64 || ip.Flags != layers.IPv4DontFragment {
				t.Errorf("ip %+v", ip)
			}
			if int(udp.SrcPort) != 10000+int(c.flow) || udp.DstPort != 9000 || int(udp.Length) != size-34 {
				t.Errorf("udp %d → %d len %d", udp.SrcPort, udp.DstPort, udp.Length)
			}
			if udp.Checksum == 0 {
				t.Error("UDP checksum 0")
			}
			f, ok := ParseBlastFrame(frame)
			if !ok || f.Flow != c.flow || f.Seq != c.seq || f.SrcPort != uint16(udp.SrcPort) || f.DstPort != 9000 {
				t.Errorf("ParseBlastFrame = %+v, %v", f, ok)
			}
			// Re-serialise with gopacket's checksums.
			_ = udp.SetNetworkLayerForChecksum(ip)
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, eth, ip, udp, gopacket.Payload(udp.Payload)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), frame) {
				t.Errorf("size %d flow %d seq %#x: gopacket's checksums differ: ip %#04x udp %#04x, ours %#04x %#04x",
					size, c.flow, c.seq, buf.Bytes()[24:26], buf.Bytes()[40:42], frame[24:26], frame[40:42])
			}
		}
	}
}

// TestPatchEqualsBuild checks that patching a frame of another flow gives
// the same bytes as building it afresh.
func TestPatchEqualsBuild(t *testing.T) {
	fb, err := NewFrameBuilder(testSpec(200, 64))
	if err != nil {
		t.Fatal(err)
	}
	a, b := make([]byte, 200), make([]byte, 200)
	fb.Build(a, 3, 99)
	for i := range uint32(200) {
		fb.Patch(a, i%64, uint64(i)*0x10001)
		fb.Build(b, i%64, uint64(i)*0x10001)
		if !bytes.Equal(a, b) {
			t.Fatalf("patch %d differs from build", i)
		}
	}
}

func TestFrameSpecValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*FrameSpec)
		want error
	}{
		{"63 B", func(s *FrameSpec) { s.Size = 63 }, ErrFrameSize},
		{"9001 B", func(s *FrameSpec) { s.Size = 9001 }, ErrFrameSize},
		{"0 flows", func(s *FrameSpec) { s.Flows = 0 }, ErrFlows},
		{"too many flows", func(s *FrameSpec) { s.Flows = MaxFlows + 1 }, ErrFlows},
		{"ports overflow", func(s *FrameSpec) { s.BasePort = 65000; s.Flows = 600 }, ErrFlows},
	} {
		s := testSpec(64, 1)
		c.mod(&s)
		if _, err := NewFrameBuilder(s); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
	s := testSpec(64, 1)
	s.Dst = netip.MustParseAddr("fd00::1")
	if _, err := NewFrameBuilder(s); err == nil {
		t.Error("IPv6 destination accepted")
	}
}

func TestParseBlastFrameRejects(t *testing.T) {
	fb, _ := NewFrameBuilder(testSpec(64, 1))
	good := make([]byte, 64)
	fb.Build(good, 0, 0)
	for _, c := range []struct {
		name string
		mod  func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:49] }},
		{"arp", func(b []byte) []byte { b[12], b[13] = 0x08, 0x06; return b }},
		{"tcp", func(b []byte) []byte { b[23] = 6; return b }},
		{"fragment", func(b []byte) []byte { b[21] = 1; return b }},
		{"magic", func(b []byte) []byte { b[42] ^= 1; return b }},
		{"ihl", func(b []byte) []byte { b[14] = 0x44; return b }},
	} {
		b := c.mod(bytes.Clone(good))
		if _, ok := ParseBlastFrame(b); ok {
			t.Errorf("%s accepted", c.name)
		}
	}
	if _, ok := ParseBlastFrame(good[:58]); !ok {
		t.Error("truncated after the metadata: rejected")
	}
}

func TestPatchAllocs(t *testing.T) {
	fb, _ := NewFrameBuilder(testSpec(1400, 64))
	frame := make([]byte, 1400)
	fb.Build(frame, 0, 0)
	seq := uint64(0)
	if n := testing.AllocsPerRun(1000, func() {
		seq++
		fb.Patch(frame, uint32(seq%64), seq)
		_, _ = ParseBlastFrame(frame)
	}); n != 0 {
		t.Errorf("%v allocations per frame", n)
	}
}

func BenchmarkPatch64(b *testing.B) {
	fb, _ := NewFrameBuilder(testSpec(64, 64))
	frame := make([]byte, 64)
	fb.Build(frame, 0, 0)
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		fb.Patch(frame, uint32(seq&63), seq)
	}
}

func FuzzParseBlastFrame(f *testing.F) {
	fb, _ := NewFrameBuilder(testSpec(64, 4))
	good := make([]byte, 64)
	fb.Build(good, 3, 42)
	f.Add(good)
	f.Add(good[:40])
	f.Add([]byte{})
	opt := bytes.Clone(good)
	opt[14] = 0x4f // 60-byte IP header, longer than the frame's rest
	f.Add(opt)
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, ok := ParseBlastFrame(b)
		if !ok {
			return
		}
		if len(b) < blastHdr+blastMeta {
			t.Errorf("accepted a %d-byte frame", len(b))
		}
		if again, _ := ParseBlastFrame(b); again != fr {
			t.Errorf("parse not deterministic: %+v then %+v", fr, again)
		}
	})
}
