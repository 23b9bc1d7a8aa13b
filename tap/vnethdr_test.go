package tap

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseVnetHdr(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hdr      string // 10 bytes, little-endian fields
		frameLen int
		want     error
		// expected fields when valid
		flags, gso                             uint8
		hdrLen, gsoSize, csumStart, csumOffset uint16
	}{
		{name: "zero", hdr: "00 00 0000 0000 0000 0000", frameLen: 60},
		{name: "udp partial csum", hdr: "01 00 0000 0000 2200 0600", frameLen: 60,
			flags: 1, csumStart: 34, csumOffset: 6},
		{name: "tcp partial csum", hdr: "01 00 0000 0000 2200 1000", frameLen: 54,
			flags: 1, csumStart: 34, csumOffset: 16},
		{name: "data valid", hdr: "02 00 0000 0000 0000 0000", frameLen: 60, flags: 2},
		{name: "tso4", hdr: "01 01 4200 a805 2200 1000", frameLen: 65000,
			flags: 1, gso: GSOTCPv4, hdrLen: 66, gsoSize: 1448, csumStart: 34, csumOffset: 16},
		{name: "tso6 ecn", hdr: "01 84 4a00 9405 3600 1000", frameLen: 9000,
			flags: 1, gso: GSOTCPv6 | GSOECN, hdrLen: 74, gsoSize: 1428, csumStart: 54, csumOffset: 16},
		{name: "uso", hdr: "01 05 2a00 b405 2200 0600", frameLen: 9000,
			flags: 1, gso: GSOUDPL4, hdrLen: 42, gsoSize: 1460, csumStart: 34, csumOffset: 6},
		{name: "short", hdr: "00 00 0000 0000 0000", want: ErrVnetShort},
		{name: "unknown flag", hdr: "08 00 0000 0000 0000 0000", frameLen: 60, want: ErrVnetFlags},
		{name: "unknown gso", hdr: "00 02 0000 0000 0000 0000", frameLen: 60, want: ErrVnetGSOType},
		{name: "ecn alone", hdr: "00 80 0000 0000 0000 0000", frameLen: 60, want: ErrVnetGSOType},
		{name: "ecn udp", hdr: "01 83 2a00 b405 2200 0600", frameLen: 9000, want: ErrVnetGSOType},
		{name: "gso size 0", hdr: "01 01 4200 0000 2200 1000", frameLen: 9000, want: ErrVnetGSOType},
		{name: "hdr_len past frame", hdr: "00 00 4000 0000 0000 0000", frameLen: 60, want: ErrVnetHdrLen},
		{name: "csum field past frame", hdr: "01 00 0000 0000 2200 1000", frameLen: 51, want: ErrVnetCsum},
		{name: "csum field at end", hdr: "01 00 0000 0000 2200 1000", frameLen: 52,
			flags: 1, csumStart: 34, csumOffset: 16},
		{name: "csum in ethernet hdr", hdr: "01 00 0000 0000 0a00 0000", frameLen: 60, want: ErrVnetCsum},
		{name: "csum offset huge", hdr: "01 00 0000 0000 2200 ffff", frameLen: 60, want: ErrVnetCsum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append(unhex(t, tc.hdr), make([]byte, tc.frameLen)...)
			h, err := ParseVnetHdr(b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if err != nil {
				return
			}
			if len(h) != VnetHdrLen || h.Flags() != tc.flags || h.GSOType() != tc.gso ||
				h.HdrLen() != tc.hdrLen || h.GSOSize() != tc.gsoSize ||
				h.CsumStart() != tc.csumStart || h.CsumOffset() != tc.csumOffset {
				t.Errorf("fields = %d %d %d %d %d %d", h.Flags(), h.GSOType(), h.HdrLen(),
					h.GSOSize(), h.CsumStart(), h.CsumOffset())
			}
			if h.IsGSO() != (tc.gso != GSONone) || h.NeedsCsum() != (tc.flags&VnetNeedsCsum != 0) {
				t.Error("IsGSO/NeedsCsum disagree with the fields")
			}
		})
	}
}

func TestVnetHdrBuild(t *testing.T) {
	h := VnetHdr(make([]byte, VnetHdrLen))
	for i := range h {
		h[i] = 0xee
	}
	h.Reset()
	if hex.EncodeToString(h) != "00000000000000000000" {
		t.Fatalf("Reset: %x", []byte(h))
	}
	h.SetPartialCsum(34, 16)
	h.SetGSO(GSOTCPv4, 66, 1448)
	if got, want := hex.EncodeToString(h), "01014200a80522001000"; got != want {
		t.Fatalf("built %s, want %s", got, want)
	}
	h.SetFlags(VnetDataValid)
	h.SetGSOType(GSONone)
	h.SetHdrLen(0)
	h.SetGSOSize(0)
	h.SetCsumStart(0)
	h.SetCsumOffset(0)
	if got, want := hex.EncodeToString(h), "02000000000000000000"; got != want {
		t.Fatalf("built %s, want %s", got, want)
	}
}

func TestParseVnetHdrAllocs(t *testing.T) {
	b := append(unhex(t, "01 00 0000 0000 2200 0600"), make([]byte, 60)...)
	if n := testing.AllocsPerRun(100, func() { _, _ = ParseVnetHdr(b) }); n != 0 {
		t.Fatalf("ParseVnetHdr allocates %v", n)
	}
}

func FuzzParseVnetHdr(f *testing.F) {
	for _, s := range []string{
		"00000000000000000000" + strings.Repeat("00", 60),
		"01000000000022000600" + strings.Repeat("00", 60),
		"01014200a80522001000" + strings.Repeat("ab", 200),
		"0184",
		"0100000000000a000000" + strings.Repeat("00", 20),
	} {
		f.Add(unhex(f, s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseVnetHdr(b)
		if err != nil {
			return
		}
		frame := b[VnetHdrLen:]
		if int(h.HdrLen()) > len(frame) {
			t.Fatalf("accepted hdr_len %d > frame %d", h.HdrLen(), len(frame))
		}
		if h.IsGSO() && h.GSOSize() == 0 {
			t.Fatal("accepted GSO with gso_size 0")
		}
		if h.NeedsCsum() && !CompleteChecksum(frame, int(h.CsumStart()), int(h.CsumOffset())) {
			t.Fatalf("accepted checksum offsets %d+%d outside frame %d", h.CsumStart(), h.CsumOffset(), len(frame))
		}
	})
}

func BenchmarkParseVnetHdr(b *testing.B) {
	buf := append(unhex(b, "01 00 0000 0000 2200 0600"), make([]byte, 1500)...)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ParseVnetHdr(buf)
	}
}
