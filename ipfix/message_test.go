package ipfix

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMessageLayout builds a message with a template set and a data set
// and checks it byte for byte against the layouts of RFC 7011: the
// message header (section 3.1), set headers (3.3.2), a template record
// (3.4.1) with an IANA field specifier and an enterprise one, its
// enterprise bit set and the number after it (3.2), and a data record
// (3.4.3) with a variable-length value (7).
func TestMessageLayout(t *testing.T) {
	tmpl := Template{ID: 256, Fields: []Field{
		{ID: IESourceIPv4Address, Length: 4},
		{ID: IEPacketDeltaCount, Length: 8},
		{ID: IESourcePodName, Length: VarLen, Enterprise: DocumentationPEN},
	}}
	var m Message
	m.Begin(make([]byte, 0, 128), 0x5f5e1000, 7, 42)
	m.StartSet(SetTemplate)
	m.AppendTemplate(&tmpl)
	m.StartSet(256)
	b := m.Bytes()
	b = append(b, 192, 0, 2, 1)
	b = append(b, 0, 0, 0, 0, 0, 0, 0x01, 0x00)
	b = AppendVarLen(b, "ns/a")
	m.SetBytes(b)
	m.StartSet(300) // empty: taken back out
	got, err := m.Finish()
	if err != nil {
		t.Fatal(err)
	}
	want := unhex(t, `
		000a 003d 5f5e1000 00000007 0000002a
		0002 0018
		  0100 0003
		  0008 0004
		  0002 0008
		  8003 ffff 00007ed9
		0100 0015
		  c0000201 0000000000000100 04 6e732f61`)
	if !bytes.Equal(got, want) {
		t.Errorf("message\n got %x\nwant %x", got, want)
	}
	var d Decoder
	dec, err := d.Decode(got)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Header != (Header{Version: 10, Length: 0x3d, ExportTime: 0x5f5e1000, Seq: 7, Domain: 42}) {
		t.Errorf("header %+v", dec.Header)
	}
	if len(dec.Templates) != 1 || len(dec.Templates[0].Fields) != 3 || dec.Templates[0].Fields[2] != tmpl.Fields[2] {
		t.Errorf("templates %+v", dec.Templates)
	}
	if len(dec.Records) != 1 || string(dec.Records[0].Values[2]) != "ns/a" {
		t.Errorf("records %+v", dec.Records)
	}
}

// TestVarLen: a value of 255 bytes or more takes the three-octet length
// (RFC 7011 section 7, figure R).
func TestVarLen(t *testing.T) {
	for _, tc := range []struct {
		n    int
		head string
	}{{0, "00"}, {254, "fe"}, {255, "ff00ff"}, {1000, "ff03e8"}} {
		b := AppendVarLen(nil, strings.Repeat("x", tc.n))
		if hex.EncodeToString(b[:len(b)-tc.n]) != tc.head {
			t.Errorf("length %d: prefix %x, want %s", tc.n, b[:len(b)-tc.n], tc.head)
		}
	}
}

// TestDecodeRefuses: the decoder's checks.
func TestDecodeRefuses(t *testing.T) {
	for name, s := range map[string]string{
		"short":           "000a 0010 00000000 00000000",
		"version 9":       "0009 0010 00000000 00000000 00000000",
		"length mismatch": "000a 0020 00000000 00000000 00000000",
		"set too long":    "000a 0018 00000000 00000000 00000000 0002 0010 01000000",
		"reserved set":    "000a 0014 00000000 00000000 00000000 0004 0004",
		"field length 0":  "000a 001c 00000000 00000000 00000000 0002 000c 0100 0001 0008 0000",
		"template ID 255": "000a 001c 00000000 00000000 00000000 0002 000c 00ff 0001 0008 0004",
		"record cut":      "000a 0024 00000000 00000000 00000000 0002 000c 0100 0001 0008 ffff 0100 0008 05616263",
	} {
		var d Decoder
		if _, err := d.Decode(unhex(t, s)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// FuzzDecode: the decoder never panics and what it accepts it accepts
// again; a message of records built from fuzzed values decodes to them.
func FuzzDecode(f *testing.F) {
	var m Message
	m.Begin(nil, 1, 2, 3)
	m.StartSet(SetTemplate)
	ts := Templates(DocumentationPEN)
	for i := range ts {
		m.AppendTemplate(&ts[i])
	}
	r := Record{Src: [4]byte{10, 0, 0, 1}, Proto: 6, SrcPod: "a/b", NAT: true}
	m.StartSet(r.TemplateID())
	m.SetBytes(AppendRecord(m.Bytes(), &r))
	seed, _ := m.Finish()
	f.Add(seed, "pod", uint64(1))
	f.Fuzz(func(t *testing.T, b []byte, pod string, n uint64) {
		var d Decoder
		if _, err := d.Decode(b); err == nil {
			var d2 Decoder
			if _, err := d2.Decode(b); err != nil {
				t.Fatalf("accepted once, refused again: %v", err)
			}
		}
		var m Message
		m.Begin(nil, 0, 0, 0)
		m.StartSet(SetTemplate)
		ts := Templates(DocumentationPEN)
		m.AppendTemplate(&ts[0])
		m.StartSet(TemplateFlow)
		r := Record{Octets: n, SrcPod: pod, DstPod: pod}
		m.SetBytes(AppendRecord(m.Bytes(), &r))
		msg, err := m.Finish()
		if err != nil {
			return // too long for a message
		}
		var d3 Decoder
		dec, err := d3.Decode(msg)
		if err != nil {
			t.Fatalf("own message refused: %v", err)
		}
		want := pod
		if len(want) > 0xffff {
			want = want[:0xffff]
		}
		if len(dec.Records) != 1 || string(dec.Records[0].Values[14]) != want || string(dec.Records[0].Values[15]) != want {
			t.Fatalf("records %d, pod names not read back", len(dec.Records))
		}
	})
}
