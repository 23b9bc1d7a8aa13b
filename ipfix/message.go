package ipfix

import (
	"encoding/binary"
	"errors"
)

// Version is the IPFIX version number in a message header (RFC 7011
// section 3.1).
const Version = 10

// Set IDs (RFC 7011 section 3.3.2): 2 a Template Set, 3 an Options
// Template Set, 256 and up a Data Set of the template with that ID.
const (
	SetTemplate        = 2
	SetOptionsTemplate = 3
	MinDataSetID       = 256
)

// Sizes of the fixed parts (RFC 7011 sections 3.1, 3.3.2, 3.4.1).
const (
	HeaderLen         = 16
	SetHeaderLen      = 4
	TemplateHeaderLen = 4
)

// VarLen is the field length a template gives a variable-length field
// (RFC 7011 section 7); the record then carries the value's length.
const VarLen = 0xffff

// Field is a field specifier of a template (RFC 7011 section 3.2): an
// information element, its length in the records, and for an
// enterprise-specific element the Private Enterprise Number (0: an
// IANA element, the enterprise bit clear).
type Field struct {
	ID         uint16 // information element identifier (15 bits)
	Length     uint16 // octets in a record, or VarLen
	Enterprise uint32 // Private Enterprise Number; 0 for IANA's elements
}

// Template is a template record (RFC 7011 section 3.4.1): the ID the
// data records name (256 and up) and their fields in order.
type Template struct {
	ID     uint16
	Fields []Field
}

// ErrTooLong: a message, set or value would pass its length field's
// limit.
var ErrTooLong = errors.New("ipfix: too long")

// Message builds one IPFIX message in a buffer the caller owns and
// reuses: Begin, then sets (StartSet, the records, EndSet), then Finish.
// Appending allocates only when the buffer must grow, so a Message whose
// buffer has the capacity of the path MTU builds messages without
// allocating. A Message is not safe for concurrent use.
type Message struct {
	b   []byte
	set int // offset of the open set's header, or -1
}

// Begin starts a message in buf[:0] with the header of RFC 7011
// section 3.1: version 10, the export time in seconds since the UNIX
// epoch, the sequence number (data records sent before this message in
// the stream, modulo 2^32) and the observation domain.
func (m *Message) Begin(buf []byte, exportTime, seq, domain uint32) {
	b := buf[:0]
	b = binary.BigEndian.AppendUint16(b, Version)
	b = binary.BigEndian.AppendUint16(b, 0) // length, by Finish
	b = binary.BigEndian.AppendUint32(b, exportTime)
	b = binary.BigEndian.AppendUint32(b, seq)
	b = binary.BigEndian.AppendUint32(b, domain)
	m.b, m.set = b, -1
}

// Len is the message's length so far, an open set's pending header
// included.
func (m *Message) Len() int { return len(m.b) }

// StartSet opens a set with the given set ID, ending an open one first.
func (m *Message) StartSet(id uint16) {
	m.EndSet()
	m.set = len(m.b)
	m.b = binary.BigEndian.AppendUint16(m.b, id)
	m.b = binary.BigEndian.AppendUint16(m.b, 0)
}

// EndSet closes the open set, if any, writing its length; an empty set
// is taken back out.
func (m *Message) EndSet() {
	if m.set < 0 {
		return
	}
	if n := len(m.b) - m.set; n == SetHeaderLen {
		m.b = m.b[:m.set]
	} else {
		binary.BigEndian.PutUint16(m.b[m.set+2:], uint16(n))
	}
	m.set = -1
}

// AppendTemplate appends t as a template record to the open set (a
// Template Set, SetTemplate).
func (m *Message) AppendTemplate(t *Template) {
	m.b = AppendTemplate(m.b, t)
}

// AppendTemplate appends template record t to b (RFC 7011 sections
// 3.4.1 and 3.2): its ID, its field count, then each field specifier,
// the enterprise bit and number where the field has one.
func AppendTemplate(b []byte, t *Template) []byte {
	b = binary.BigEndian.AppendUint16(b, t.ID)
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.Fields)))
	for _, f := range t.Fields {
		id := f.ID &^ 0x8000
		if f.Enterprise != 0 {
			id |= 0x8000
		}
		b = binary.BigEndian.AppendUint16(b, id)
		b = binary.BigEndian.AppendUint16(b, f.Length)
		if f.Enterprise != 0 {
			b = binary.BigEndian.AppendUint32(b, f.Enterprise)
		}
	}
	return b
}

// Bytes returns the record bytes of the open set for the caller to
// append a data record to; SetBytes gives them back.
func (m *Message) Bytes() []byte { return m.b }

// SetBytes takes back the buffer Bytes returned, with a record appended.
func (m *Message) SetBytes(b []byte) { m.b = b }

// Mark is a point in a message's building to go back to (Rewind).
type Mark struct{ n, set int }

// Mark returns the message's state now.
func (m *Message) Mark() Mark { return Mark{len(m.b), m.set} }

// Rewind takes the message back to mark k, dropping what was appended
// since (a record that made it too long for the path MTU, and the set a
// record opened) and reopening the set that was open then.
func (m *Message) Rewind(k Mark) { m.b, m.set = m.b[:k.n], k.set }

// Finish ends the open set and writes the message length. It returns the
// message, which shares the buffer given to Begin, or ErrTooLong past
// 65535 bytes.
func (m *Message) Finish() ([]byte, error) {
	m.EndSet()
	if len(m.b) > 0xffff {
		return nil, ErrTooLong
	}
	binary.BigEndian.PutUint16(m.b[2:], uint16(len(m.b)))
	return m.b, nil
}

// AppendVarLen appends v as a variable-length field value (RFC 7011
// section 7): one length octet below 255, else 255 and two length
// octets. Values longer than 65535 bytes are cut there.
func AppendVarLen(b []byte, v string) []byte {
	if len(v) > 0xffff {
		v = v[:0xffff]
	}
	if len(v) < 255 {
		b = append(b, byte(len(v)))
	} else {
		b = append(b, 255)
		b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	}
	return append(b, v...)
}
