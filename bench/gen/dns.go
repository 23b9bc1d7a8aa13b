package gen

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"
)

// A DNS responder for the lab (gvs-bench dns-serve): it answers A queries
// from a records file it reads again for every query, so that a test can
// move a name by rewriting the file. It is not a DNS server for anything
// else: one question per query, A records only, no recursion.

// ErrDNSQuery wraps the reasons a datagram is not a query dns-serve answers.
var ErrDNSQuery = errors.New("gen: not a DNS query")

// DNSQuery is the question of a query.
type DNSQuery struct {
	ID    uint16
	Name  string // lower case, no final dot
	Type  uint16
	Class uint16
	end   int // offset after the question
}

// ParseDNSQuery reads a standard query with one question.
func ParseDNSQuery(b []byte) (DNSQuery, error) {
	var q DNSQuery
	if len(b) < 12 {
		return q, ErrDNSQuery
	}
	q.ID = binary.BigEndian.Uint16(b)
	flags := binary.BigEndian.Uint16(b[2:])
	if flags&0x8000 != 0 || flags&0x7800 != 0 { // a response, or not a standard query
		return q, ErrDNSQuery
	}
	if binary.BigEndian.Uint16(b[4:]) != 1 {
		return q, ErrDNSQuery
	}
	var labels []string
	off := 12
	for {
		if off >= len(b) {
			return q, ErrDNSQuery
		}
		n := int(b[off])
		off++
		if n == 0 {
			break
		}
		if n > 63 || off+n > len(b) || len(labels) > 127 { // no compression in a question we answer
			return q, ErrDNSQuery
		}
		labels = append(labels, strings.ToLower(string(b[off:off+n])))
		off += n
	}
	if off+4 > len(b) || len(labels) == 0 {
		return q, ErrDNSQuery
	}
	q.Name = strings.Join(labels, ".")
	q.Type = binary.BigEndian.Uint16(b[off:])
	q.Class = binary.BigEndian.Uint16(b[off+2:])
	q.end = off + 4
	return q, nil
}

// DNSAnswer builds the response to q from query (its bytes): the A
// records in addrs (TTL 1 s), or NXDOMAIN when there are none.
func DNSAnswer(query []byte, q DNSQuery, addrs []netip.Addr) []byte {
	out := append([]byte(nil), query[:q.end]...)
	flags := uint16(0x8400) // response, authoritative
	if len(addrs) == 0 {
		flags |= 3 // NXDOMAIN
	}
	binary.BigEndian.PutUint16(out[2:], flags|binary.BigEndian.Uint16(query[2:])&0x0100)
	binary.BigEndian.PutUint16(out[6:], uint16(len(addrs)))
	binary.BigEndian.PutUint16(out[8:], 0)
	binary.BigEndian.PutUint16(out[10:], 0)
	for _, a := range addrs {
		a4 := a.As4()
		out = append(out, 0xc0, 12) // the question's name
		out = binary.BigEndian.AppendUint16(out, 1)
		out = binary.BigEndian.AppendUint16(out, 1)
		out = binary.BigEndian.AppendUint32(out, 1)
		out = binary.BigEndian.AppendUint16(out, 4)
		out = append(out, a4[:]...)
	}
	return out
}

// readRecords reads "name address" lines.
func readRecords(path string, name string) []netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	s := bufio.NewScanner(f)
	for s.Scan() {
		fs := strings.Fields(s.Text())
		if len(fs) != 2 || strings.ToLower(strings.TrimSuffix(fs[0], ".")) != name {
			continue
		}
		if a, err := netip.ParseAddr(fs[1]); err == nil && a.Is4() {
			out = append(out, a)
		}
	}
	return out
}

// DNSServe answers A queries on pc from the records file until pc is
// closed; other queries get NXDOMAIN, datagrams that are no query nothing.
func DNSServe(pc net.PacketConn, records string) error {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		q, err := ParseDNSQuery(buf[:n])
		if err != nil {
			continue
		}
		var addrs []netip.Addr
		if q.Type == 1 && q.Class == 1 {
			addrs = readRecords(records, q.Name)
		}
		_, _ = pc.WriteTo(DNSAnswer(buf[:n], q, addrs), from)
	}
}
