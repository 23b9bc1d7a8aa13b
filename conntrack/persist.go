package conntrack

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
)

// The saved-table format, version 1 (all integers big-endian):
//
//	header  16 bytes: "GVSCT\x00", version uint16, 8 zero bytes
//	entry   88 bytes each: tag 1, then the fields below (recordLen)
//	end     13 bytes: tag 0xff, entry count uint64, CRC-32C uint32 of every
//	        byte before the CRC
//
// An entry holds both keys, the zone, the translation, the class and
// protocol state, mark, label, the time it has left (nanoseconds) and the
// two TCP ends' tracking state: everything a tracker needs to carry on,
// nothing that depends on the process (slab positions, hash seeds).
const (
	formatVersion = 1
	headerLen     = 16
	recordLen     = 88
	tagEntry      = 1
	tagEnd        = 0xff
)

var magic = [6]byte{'G', 'V', 'S', 'C', 'T', 0}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// record is an entry as saved.
type record struct {
	fwd, rev key
	nat      uint8
	class    Class
	pstate   uint8
	flags    uint8
	mark     uint32
	label    Label
	left     int64 // nanoseconds
	tcp      [2]tcpPeer
}

func (r *record) encode(b *[recordLen]byte) {
	*b = [recordLen]byte{}
	b[0] = tagEntry
	b[1] = r.fwd.proto()
	binary.BigEndian.PutUint16(b[2:], r.fwd.zone())
	for i, k := range [2]key{r.fwd, r.rev} {
		o := 4 + 12*i
		binary.BigEndian.PutUint64(b[o:], k.a)
		binary.BigEndian.PutUint16(b[o+8:], k.sport())
		binary.BigEndian.PutUint16(b[o+10:], k.dport())
		b[28+i] = k.icmpType()
	}
	b[30], b[31], b[32], b[33] = r.nat, uint8(r.class), r.pstate, r.flags
	binary.BigEndian.PutUint32(b[36:], r.mark)
	binary.BigEndian.PutUint64(b[40:], r.label.Hi)
	binary.BigEndian.PutUint64(b[48:], r.label.Lo)
	binary.BigEndian.PutUint64(b[56:], uint64(r.left))
	for i, p := range r.tcp {
		o := 64 + 12*i
		binary.BigEndian.PutUint32(b[o:], p.seqlo)
		binary.BigEndian.PutUint32(b[o+4:], p.seqhi)
		binary.BigEndian.PutUint16(b[o+8:], p.maxWin)
		b[o+10], b[o+11] = p.wscale, p.state
	}
}

// decode reads and validates an entry record; it refuses anything Save
// could not have written.
func (r *record) decode(b *[recordLen]byte) error {
	bad := func(what string) error { return fmt.Errorf("%w: entry: %s", ErrFormat, what) }
	if b[0] != tagEntry {
		return bad("unknown record tag")
	}
	if b[34] != 0 || b[35] != 0 {
		return bad("reserved bytes")
	}
	proto, zone := b[1], binary.BigEndian.Uint16(b[2:])
	var ks [2]key
	for i := range ks {
		o := 4 + 12*i
		ks[i] = mkKey(binary.BigEndian.Uint32(b[o:]), binary.BigEndian.Uint32(b[o+4:]),
			binary.BigEndian.Uint16(b[o+8:]), binary.BigEndian.Uint16(b[o+10:]), zone, proto, b[28+i])
	}
	*r = record{
		fwd: ks[0], rev: ks[1], nat: b[30], class: Class(b[31]), pstate: b[32], flags: b[33],
		mark:  binary.BigEndian.Uint32(b[36:]),
		label: Label{Hi: binary.BigEndian.Uint64(b[40:]), Lo: binary.BigEndian.Uint64(b[48:])},
		left:  int64(binary.BigEndian.Uint64(b[56:])),
	}
	for i := range r.tcp {
		o := 64 + 12*i
		r.tcp[i] = tcpPeer{
			seqlo: binary.BigEndian.Uint32(b[o:]), seqhi: binary.BigEndian.Uint32(b[o+4:]),
			maxWin: binary.BigEndian.Uint16(b[o+8:]), wscale: b[o+10], state: b[o+11],
		}
	}
	fwd, rev := r.fwd, r.rev
	switch proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		if fwd.sport() == 0 || fwd.dport() == 0 || rev.sport() == 0 || rev.dport() == 0 || fwd.icmpType() != 0 || rev.icmpType() != 0 {
			return bad("ports")
		}
	case ProtoICMP:
		if !icmpQuery(fwd.icmpType()) || rev.icmpType() != icmpReverse(fwd.icmpType()) ||
			fwd.sport() != fwd.dport() || rev.sport() != rev.dport() {
			return bad("icmp identifier or type")
		}
	default:
		if fwd.b>>32 != 0 || rev.b>>32 != 0 || fwd.icmpType()|rev.icmpType() != 0 {
			return bad("ports of a portless protocol")
		}
	}
	switch r.nat {
	case natNone:
		if rev != fwd.reverse() {
			return bad("reply key of an untranslated connection")
		}
	case natSrc:
		if rev.src() != fwd.dst() || proto != ProtoICMP && rev.sport() != fwd.dport() {
			return bad("reply key of a source translation")
		}
	case natDst:
		if rev.dst() != fwd.src() {
			return bad("reply key of a destination translation")
		}
	default:
		return bad("nat kind")
	}
	if classProto(r.class) != protoGroup(proto) {
		return bad("class")
	}
	if r.pstate > pBidir || r.flags&^flagAssured != 0 {
		return bad("state or flags")
	}
	if r.left <= 0 || r.left > int64(maxTimeout) {
		return bad("time left")
	}
	for _, p := range r.tcp {
		if proto != ProtoTCP {
			if p != (tcpPeer{}) {
				return bad("tcp state of a non-tcp connection")
			}
			continue
		}
		if TCPState(p.state) >= numTCPStates || p.wscale&0x30 != 0 || p.wscale&wsMask > tcpMaxWscale {
			return bad("tcp state")
		}
	}
	return nil
}

// protoGroup and classProto put protocols and classes in four groups:
// TCP, UDP, ICMP, other.
func protoGroup(p uint8) int {
	switch p {
	case ProtoTCP:
		return 0
	case ProtoUDP:
		return 1
	case ProtoICMP:
		return 2
	}
	return 3
}

func classProto(c Class) int {
	switch {
	case c <= TCPClose:
		return 0
	case c <= UDPReplied:
		return 1
	case c <= ICMPReplied:
		return 2
	case c < NumClasses:
		return 3
	}
	return -1
}

// Save writes every entry in use to w in the versioned binary format
// above, with the time each has left on the tracker's clock, and returns
// how many it wrote. Packets may keep flowing: each entry is copied under
// its lock. A restarted (or upgraded) gvs-switchd hands the file to Load,
// and its connections carry on where they were.
func (t *Tracker) Save(w io.Writer) (int, error) {
	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 64<<10)
	var h [headerLen]byte
	copy(h[:], magic[:])
	binary.BigEndian.PutUint16(h[6:], formatVersion)
	if _, err := bw.Write(h[:]); err != nil {
		return 0, fmt.Errorf("conntrack: save: %w", err)
	}
	now := t.Now()
	n := 0
	var buf [recordLen]byte
	for i := range t.bump.Load() {
		r, ok := t.record(i, now)
		if !ok {
			continue
		}
		r.encode(&buf)
		if _, err := bw.Write(buf[:]); err != nil {
			return n, fmt.Errorf("conntrack: save: %w", err)
		}
		n++
	}
	var end [9]byte
	end[0] = tagEnd
	binary.BigEndian.PutUint64(end[1:], uint64(n))
	if _, err := bw.Write(end[:]); err != nil {
		return n, fmt.Errorf("conntrack: save: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("conntrack: save: %w", err)
	}
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc.Sum32())
	if _, err := w.Write(sum[:]); err != nil {
		return n, fmt.Errorf("conntrack: save: %w", err)
	}
	return n, nil
}

// record copies entry i for Save if it is in use and not expired.
func (t *Tracker) record(i uint32, now Time) (record, bool) {
	e := &t.entries[i]
	if e.gen.Load()&1 == 0 {
		return record{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen.Load()&1 == 0 || e.expires <= now {
		return record{}, false
	}
	return record{
		fwd: keyOf(e.k[0][0].Load(), e.k[0][1].Load()), rev: keyOf(e.k[1][0].Load(), e.k[1][1].Load()),
		nat: e.nat, class: e.class, pstate: e.pstate, flags: e.flags & flagAssured,
		mark: e.mark, label: e.label, left: int64(e.expires - now), tcp: e.tcp,
	}, true
}

// LoadResult says what Load did with the entries it read.
type LoadResult struct {
	Loaded  int // entries now in the table
	Skipped int // entries left out: over the global or a zone limit, or a key already in use
}

// Load reads a table Save wrote and adds its entries to t, each with the
// time it had left (clamped to t's timeout for its class). It checks the
// whole input first — format, version, every field, the count and the
// checksum — and adds nothing if any check fails (ErrFormat, ErrVersion,
// or the reader's error). Entries that would exceed t's global or zone
// limits, or whose keys are in use already, are skipped, never evicting
// anything. Load may run while packets flow.
func (t *Tracker) Load(rd io.Reader) (LoadResult, error) {
	crc := crc32.New(castagnoli)
	br := bufio.NewReaderSize(rd, 64<<10)
	recs, err := readRecords(br, crc)
	if err != nil {
		t.log.Warn("conntrack: saved table refused", "err", err)
		return LoadResult{}, err
	}
	var res LoadResult
	now := t.Now()
	for i := range recs {
		if t.insert(&recs[i], now) {
			res.Loaded++
		} else {
			res.Skipped++
		}
	}
	return res, nil
}

// readRecords reads and checks a saved table: header, entries, end.
func readRecords(br *bufio.Reader, crc hash.Hash32) ([]record, error) {
	in := io.TeeReader(br, crc)
	var h [headerLen]byte
	if _, err := io.ReadFull(in, h[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrFormat, err)
	}
	if [6]byte(h[:6]) != magic {
		return nil, fmt.Errorf("%w: not a saved connection table", ErrFormat)
	}
	if v := binary.BigEndian.Uint16(h[6:]); v != formatVersion {
		return nil, fmt.Errorf("%w: version %d", ErrVersion, v)
	}
	if binary.BigEndian.Uint64(h[8:]) != 0 {
		return nil, fmt.Errorf("%w: header: reserved bytes", ErrFormat)
	}
	var recs []record
	var buf [recordLen]byte
	for {
		if _, err := io.ReadFull(in, buf[:1]); err != nil {
			return nil, fmt.Errorf("%w: truncated: %w", ErrFormat, err)
		}
		if buf[0] == tagEnd {
			break
		}
		if len(recs) >= MaxEntriesLimit {
			return nil, fmt.Errorf("%w: more than %d entries", ErrFormat, MaxEntriesLimit)
		}
		if _, err := io.ReadFull(in, buf[1:]); err != nil {
			return nil, fmt.Errorf("%w: truncated entry: %w", ErrFormat, err)
		}
		var r record
		if err := r.decode(&buf); err != nil {
			return nil, err
		}
		recs = append(recs, r)
	}
	var cnt [8]byte
	if _, err := io.ReadFull(in, cnt[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated end: %w", ErrFormat, err)
	}
	want := crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return nil, fmt.Errorf("%w: truncated checksum: %w", ErrFormat, err)
	}
	if n := binary.BigEndian.Uint64(cnt[:]); n != uint64(len(recs)) {
		return nil, fmt.Errorf("%w: %d entries, the end says %d", ErrFormat, len(recs), n)
	}
	if binary.BigEndian.Uint32(sum[:]) != want {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrFormat)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the end", ErrFormat)
	}
	return recs, nil
}

// insert adds a loaded entry within the limits, without evicting.
func (t *Tracker) insert(r *record, now Time) bool {
	zone := r.fwd.zone()
	if t.reserve(zone, now, false) != ReasonNone {
		return false
	}
	idx, ok := t.alloc()
	if !ok {
		t.unreserve(zone)
		return false
	}
	e := &t.entries[idx]
	left := min(r.left, t.timeouts[r.class])
	e.mu.Lock()
	e.expires = now + Time(left)
	e.mark, e.label, e.class, e.pstate, e.nat, e.flags, e.tcp = r.mark, r.label, r.class, r.pstate, r.nat, r.flags, r.tcp
	if t.acct != nil {
		// Counts are not saved: a loaded connection counts from the load,
		// as if it began then.
		t.acct[idx] = acct{start: now, last: now, sentAt: now}
	}
	e.mu.Unlock()
	fa, fb := r.fwd.words()
	e.k[0][0].Store(fa)
	e.k[0][1].Store(fb)
	t.stats.byClass[r.class].Add(1)
	if res, _ := t.linkRev(idx, r.fwd, r.rev, now); res != linked {
		t.stats.byClass[r.class].Add(-1)
		t.release(idx, zone)
		return false
	}
	return true
}
