// Package pcap writes the classic libpcap file format
// (https://www.tcpdump.org/manpages/pcap-savefile.5.html) that tcpdump,
// Wireshark and tshark read: a 24-byte file header, then one 16-byte record
// header and the captured bytes per packet. gvs writes link type
// LINKTYPE_ETHERNET with nanosecond timestamps (magic 0xa1b23c4d), in
// little-endian byte order.
package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Format constants.
const (
	// MagicNanos is the magic number of a file with nanosecond timestamps.
	MagicNanos = 0xa1b23c4d
	// LinkTypeEthernet is LINKTYPE_ETHERNET (IEEE 802.3 frames).
	LinkTypeEthernet = 1
	// FileHeaderLen and RecordHeaderLen are the sizes of the headers.
	FileHeaderLen   = 24
	RecordHeaderLen = 16
)

// ErrTooLong is returned for a packet longer than the file's snap length.
var ErrTooLong = errors.New("pcap: packet longer than the snap length")

// Writer writes a pcap stream. It is not safe for concurrent use.
type Writer struct {
	w       io.Writer
	snaplen int
	hdr     [RecordHeaderLen]byte
}

// NewWriter writes the file header (link type Ethernet, the given snap
// length) to w and returns a Writer for the packets.
func NewWriter(w io.Writer, snaplen int) (*Writer, error) {
	if snaplen <= 0 {
		return nil, fmt.Errorf("pcap: snap length %d", snaplen)
	}
	var h [FileHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:4], MagicNanos)
	binary.LittleEndian.PutUint16(h[4:6], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:8], 4)
	// h[8:16]: thiszone and sigfigs, both 0.
	binary.LittleEndian.PutUint32(h[16:20], uint32(snaplen))
	binary.LittleEndian.PutUint32(h[20:24], LinkTypeEthernet)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("pcap: writing the file header: %w", err)
	}
	return &Writer{w: w, snaplen: snaplen}, nil
}

// WritePacket writes one record: data is the captured part of a packet of
// origLen bytes (origLen ≥ len(data)), taken at ts.
func (w *Writer) WritePacket(ts time.Time, origLen int, data []byte) error {
	if len(data) > w.snaplen {
		return fmt.Errorf("%w: %d > %d", ErrTooLong, len(data), w.snaplen)
	}
	origLen = max(origLen, len(data))
	ns := ts.UnixNano()
	binary.LittleEndian.PutUint32(w.hdr[0:4], uint32(ns/1e9))
	binary.LittleEndian.PutUint32(w.hdr[4:8], uint32(ns%1e9))
	binary.LittleEndian.PutUint32(w.hdr[8:12], uint32(len(data)))
	binary.LittleEndian.PutUint32(w.hdr[12:16], uint32(origLen))
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	if _, err := w.w.Write(data); err != nil {
		return fmt.Errorf("pcap: %w", err)
	}
	return nil
}
