package ipfix

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed: Decode met bytes that are not a well-formed IPFIX
// message.
var ErrMalformed = errors.New("ipfix: malformed message")

// Header is an IPFIX message header (RFC 7011 section 3.1).
type Header struct {
	Version    uint16
	Length     uint16
	ExportTime uint32
	Seq        uint32
	Domain     uint32
}

// DataRecord is a data record as Decode read it: its template's ID and
// one value per field of the template, in order (variable-length values
// without their length prefix). The values share the message's bytes.
type DataRecord struct {
	Template uint16
	Values   [][]byte
}

// Decoded is a decoded message.
type Decoded struct {
	Header    Header
	Templates []Template   // the template records it carried
	Records   []DataRecord // the data records of templates known by then
	Unknown   int          // data sets of templates not known, skipped
}

// Decoder decodes IPFIX messages as a collecting process does (RFC 7011
// sections 3 and 8): it keeps the templates each observation domain
// sent and reads the data sets with them. It is gvs's own check on its
// exporter (tests, fuzzing); collectors are the real readers. Not safe
// for concurrent use.
type Decoder struct {
	templates map[uint64]Template // domain << 16 | template ID
}

// maxFields bounds a template's field count, so that a hostile message
// cannot make Decode allocate much (a real template has a few dozen).
const maxFields = 512

// Decode decodes one message: header, template sets (kept for later
// messages), data sets of known templates. Options template sets are
// skipped. It returns ErrMalformed for lengths that do not add up, a
// version other than 10, a template with a field of length 0, or a
// record that runs past its set.
func (d *Decoder) Decode(msg []byte) (*Decoded, error) {
	if d.templates == nil {
		d.templates = map[uint64]Template{}
	}
	if len(msg) < HeaderLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a header", ErrMalformed, len(msg))
	}
	h := Header{
		Version: binary.BigEndian.Uint16(msg), Length: binary.BigEndian.Uint16(msg[2:]),
		ExportTime: binary.BigEndian.Uint32(msg[4:]), Seq: binary.BigEndian.Uint32(msg[8:]),
		Domain: binary.BigEndian.Uint32(msg[12:]),
	}
	if h.Version != Version {
		return nil, fmt.Errorf("%w: version %d", ErrMalformed, h.Version)
	}
	if int(h.Length) != len(msg) {
		return nil, fmt.Errorf("%w: length field %d, message %d bytes", ErrMalformed, h.Length, len(msg))
	}
	out := &Decoded{Header: h}
	for b := msg[HeaderLen:]; len(b) > 0; {
		if len(b) < SetHeaderLen {
			return nil, fmt.Errorf("%w: %d bytes left, shorter than a set header", ErrMalformed, len(b))
		}
		id, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if n < SetHeaderLen || n > len(b) {
			return nil, fmt.Errorf("%w: set %d of length %d with %d bytes left", ErrMalformed, id, n, len(b))
		}
		body := b[SetHeaderLen:n]
		b = b[n:]
		switch {
		case id == SetTemplate:
			if err := d.templateSet(h.Domain, body, out); err != nil {
				return nil, err
			}
		case id == SetOptionsTemplate:
		case id < MinDataSetID:
			return nil, fmt.Errorf("%w: reserved set ID %d", ErrMalformed, id)
		default:
			t, ok := d.templates[uint64(h.Domain)<<16|uint64(id)]
			if !ok {
				out.Unknown++
				continue
			}
			if err := dataSet(&t, body, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// templateSet reads a template set's records; what is left shorter than
// a template header is padding.
func (d *Decoder) templateSet(domain uint32, b []byte, out *Decoded) error {
	for len(b) >= TemplateHeaderLen {
		id, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		b = b[TemplateHeaderLen:]
		if id < MinDataSetID {
			return fmt.Errorf("%w: template ID %d", ErrMalformed, id)
		}
		if n > maxFields {
			return fmt.Errorf("%w: template %d has %d fields", ErrMalformed, id, n)
		}
		t := Template{ID: id, Fields: make([]Field, 0, min(n, len(b)/4))}
		for range n {
			if len(b) < 4 {
				return fmt.Errorf("%w: template %d cut short", ErrMalformed, id)
			}
			f := Field{ID: binary.BigEndian.Uint16(b) &^ 0x8000, Length: binary.BigEndian.Uint16(b[2:])}
			ent := b[0]&0x80 != 0
			b = b[4:]
			if ent {
				if len(b) < 4 {
					return fmt.Errorf("%w: template %d cut short", ErrMalformed, id)
				}
				f.Enterprise = binary.BigEndian.Uint32(b)
				b = b[4:]
				if f.Enterprise == 0 {
					return fmt.Errorf("%w: template %d: enterprise bit with number 0", ErrMalformed, id)
				}
			}
			if f.Length == 0 {
				return fmt.Errorf("%w: template %d: field %d of length 0", ErrMalformed, id, f.ID)
			}
			t.Fields = append(t.Fields, f)
		}
		if n == 0 {
			// A withdrawal (RFC 7011 section 8.1): forget it.
			delete(d.templates, uint64(domain)<<16|uint64(id))
			continue
		}
		d.templates[uint64(domain)<<16|uint64(id)] = t
		out.Templates = append(out.Templates, t)
	}
	return nil
}

// minRecord is the least a record of t takes: fixed fields plus one
// length octet per variable-length one.
func minRecord(t *Template) int {
	n := 0
	for _, f := range t.Fields {
		if f.Length == VarLen {
			n++
		} else {
			n += int(f.Length)
		}
	}
	return n
}

// dataSet reads the records of t in a data set; what is left shorter
// than a record is padding.
func dataSet(t *Template, b []byte, out *Decoded) error {
	least := max(minRecord(t), 1)
	for len(b) >= least {
		r := DataRecord{Template: t.ID, Values: make([][]byte, 0, len(t.Fields))}
		for _, f := range t.Fields {
			n := int(f.Length)
			if f.Length == VarLen {
				if len(b) < 1 {
					return fmt.Errorf("%w: record of template %d cut short", ErrMalformed, t.ID)
				}
				n, b = int(b[0]), b[1:]
				if n == 255 {
					if len(b) < 2 {
						return fmt.Errorf("%w: record of template %d cut short", ErrMalformed, t.ID)
					}
					n, b = int(binary.BigEndian.Uint16(b)), b[2:]
				}
			}
			if n > len(b) {
				return fmt.Errorf("%w: record of template %d cut short", ErrMalformed, t.ID)
			}
			r.Values = append(r.Values, b[:n:n])
			b = b[n:]
		}
		out.Records = append(out.Records, r)
	}
	return nil
}
