package pcap

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestWriterReadBack(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, 128)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2026, 11, 21, 20, 30, 0, 123456789, time.UTC)
	pkts := []struct {
		data []byte
		orig int
	}{
		{bytes.Repeat([]byte{0xab}, 60), 60},
		{bytes.Repeat([]byte{0xcd}, 128), 9000}, // truncated at the snap length
		{[]byte{1, 2, 3}, 0},                    // origLen below len(data) is raised
	}
	for i, p := range pkts {
		if err := w.WritePacket(ts.Add(time.Duration(i)*time.Microsecond), p.orig, p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WritePacket(ts, 200, make([]byte, 129)); !errors.Is(err, ErrTooLong) {
		t.Errorf("129 bytes with snap length 128: %v", err)
	}

	r, err := pcapgo.NewReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != layers.LinkTypeEthernet || r.Snaplen() != 128 || r.Resolution().String() != "10^-9" {
		t.Errorf("file header: link %v snaplen %d resolution %v", r.LinkType(), r.Snaplen(), r.Resolution())
	}
	for i, p := range pkts {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		want := max(p.orig, len(p.data))
		if !bytes.Equal(data, p.data) || ci.CaptureLength != len(p.data) || ci.Length != want ||
			!ci.Timestamp.Equal(ts.Add(time.Duration(i)*time.Microsecond)) {
			t.Errorf("packet %d: %d/%d bytes at %v", i, ci.CaptureLength, ci.Length, ci.Timestamp)
		}
	}
	if _, _, err := r.ReadPacketData(); err == nil {
		t.Error("more packets than written")
	}
}

func TestNewWriterErrors(t *testing.T) {
	if _, err := NewWriter(&bytes.Buffer{}, 0); err == nil {
		t.Error("snap length 0 accepted")
	}
	if _, err := NewWriter(failWriter{}, 100); err == nil {
		t.Error("a failing writer went unnoticed")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }
