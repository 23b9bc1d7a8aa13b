package flowtable

// The exact-match cache's key mask (a snapshot-wide megaflow mask):
//
//  1. A pipeline run reads the packet's Fields in two ways only: a table
//     lookup reads the bits of its subtables' masks (snapshot.go), and an
//     action reads the fields it names (move's and output_reg's Src, a ct
//     action's ZoneField) and copies some into the verdict (an output:
//     TunID, TunDst, EthDst; a ct step: Regs, TunID, TunSrc, TunDst,
//     EthDst; in_port: InPort).
//  2. So two packets that agree on every bit some subtable mask or some
//     action of the snapshot can see get the same verdict, and the cache
//     may key on those bits alone (Cache, Snapshot.keyMask).
//  3. Fail closed: only the packet header fields of wildcardable may be
//     left out of the key at all; pipeline metadata, everything a verdict
//     copies, any field added to Fields later and the struct's padding stay
//     in it always. A rule with an action kind this file does not know
//     puts every field in the key.
//
// Writes need not be in the key when they write a constant (load,
// set_field, and the clearing of the ct_* fields by ct and ct_clear):
// after them the fields hold the same value for every packet. move's and
// load's destinations are registers, tunnel fields or eth_dst, which are
// in the key anyway; they are counted all the same.

// wildcardable is the mask of the Fields bits the cache key may leave
// out when no rule of the snapshot reads them: the packet's addresses and
// ports and the connection's original-direction tuple, which differ from
// connection to connection.
var wildcardable = func() words {
	var f Fields
	f.NwSrc, f.NwDst = [4]byte{0xff, 0xff, 0xff, 0xff}, [4]byte{0xff, 0xff, 0xff, 0xff}
	f.ArpOp = 0xffff
	f.ArpSha = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	f.ArpTha = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	f.TpSrc, f.TpDst = 0xffff, 0xffff
	f.CtTpSrc, f.CtTpDst = 0xffff, 0xffff
	f.CtNwSrc, f.CtNwDst = [4]byte{0xff, 0xff, 0xff, 0xff}, [4]byte{0xff, 0xff, 0xff, 0xff}
	return *asWords(&f)
}()

// refUnknown is the bit of Rule.actionRefs for an action whose reads the
// mask cannot express: it puts every field in the key.
const refUnknown = numFields

// refBit is the actionRefs bit of field f (refUnknown's when f is not a
// field actions can address).
func refBit(f Field) uint32 {
	if f == FieldNone || f >= numFields {
		return 1 << refUnknown
	}
	return 1 << f
}

// Fields copied into a verdict by an output and by a ct step.
var (
	outputRefs = refBit(FieldTunID) | refBit(FieldTunDst) | refBit(FieldEthDst)
	ctRefs     = refBit(FieldTunID) | refBit(FieldTunSrc) | refBit(FieldTunDst) | refBit(FieldEthDst) |
		refBit(FieldReg0) | refBit(FieldReg1) | refBit(FieldReg2) | refBit(FieldReg3) |
		refBit(FieldReg4) | refBit(FieldReg5) | refBit(FieldReg6) | refBit(FieldReg7)
)

// actionRefs returns the set of fields (bit Field, or refUnknown) r's
// actions read, write or copy into a verdict.
func (r *Rule) actionRefs() uint32 {
	var refs uint32
	for i := range r.Actions {
		a := &r.Actions[i]
		switch a.Kind {
		case ActOutput:
			refs |= outputRefs
		case ActOutputReg:
			refs |= outputRefs | refBit(a.Src.Field)
		case ActInPort:
			refs |= outputRefs | refBit(FieldInPort)
		case ActGotoTable, ActResubmit, ActNote, ActCTClear:
		case ActLoad, ActSetField:
			refs |= refBit(a.Dst.Field)
		case ActMove:
			refs |= refBit(a.Src.Field) | refBit(a.Dst.Field)
		case ActCT:
			if a.CT == nil {
				refs |= 1 << refUnknown
				continue
			}
			refs |= ctRefs
			if a.CT.ZoneField.Field != FieldNone {
				refs |= refBit(a.CT.ZoneField.Field)
			}
		default:
			refs |= 1 << refUnknown
		}
	}
	return refs
}

// countRefs adds d (1 or -1) to the counts of the fields r's actions
// refer to.
func (s *Snapshot) countRefs(r *Rule, d int) {
	refs := r.actionRefs()
	for f := range s.refs {
		if refs&(1<<f) != 0 {
			s.refs[f] += d
		}
	}
}

// fieldWords returns the mask of Fields bits that field f occupies (all
// of Fields when f is not one actions can address).
func fieldWords(f Field) words {
	var m Fields
	switch {
	case f >= FieldReg0 && f <= FieldReg7:
		m.Regs[f-FieldReg0] = ^uint32(0)
	case f == FieldTunID:
		m.TunID = ^uint64(0)
	case f == FieldTunSrc:
		m.TunSrc = [4]byte{0xff, 0xff, 0xff, 0xff}
	case f == FieldTunDst:
		m.TunDst = [4]byte{0xff, 0xff, 0xff, 0xff}
	case f == FieldEthDst:
		m.EthDst = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	case f == FieldEthSrc:
		m.EthSrc = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	case f == FieldNwSrc:
		m.NwSrc = [4]byte{0xff, 0xff, 0xff, 0xff}
	case f == FieldNwDst:
		m.NwDst = [4]byte{0xff, 0xff, 0xff, 0xff}
	case f == FieldInPort:
		m.InPort = ^uint32(0)
	default:
		w := asWords(&m)
		for i := range w {
			w[i] = ^uint64(0)
		}
	}
	return *asWords(&m)
}

// setKeyMask computes the cache key's mask of s (wild, masked) from its
// subtables' masks and its rules' action references. Table.publish calls
// it; its cost is the number of subtables, not of rules.
func (s *Snapshot) setKeyMask() {
	var keep words
	for i := range keep {
		keep[i] = ^wildcardable[i]
	}
	for _, t := range s.tables {
		if t == nil {
			continue
		}
		for _, st := range t.subs {
			for i := range keep {
				keep[i] |= st.mask[i]
			}
		}
	}
	for f, n := range s.refs {
		if n <= 0 {
			continue
		}
		m := fieldWords(Field(f)) // refUnknown: every bit
		for i := range keep {
			keep[i] |= m[i]
		}
	}
	s.masked = false
	for i := range keep {
		s.wild[i] = ^keep[i]
		s.masked = s.masked || s.wild[i] != 0
	}
}

// The words of Fields that wildcardable touches (TestWildcardableWords
// checks them): the cache compares the words outside as they are.
const wildLo, wildHi = 8, 14

// sameKey reports whether key and fw agree on every bit of s's key
// mask. It compares the words that cannot have wildcard bits as they
// are (block compares) and the rest masked, without a branch per word.
func (s *Snapshot) sameKey(key, fw *words) bool {
	if *(*[wildLo]uint64)(key[:wildLo]) != *(*[wildLo]uint64)(fw[:wildLo]) {
		return false
	}
	var d uint64
	for i := wildLo; i <= wildHi; i++ {
		d |= (key[i] ^ fw[i]) &^ s.wild[i]
	}
	return d == 0 && *(*[nWords - wildHi - 1]uint64)(key[wildHi+1:]) == *(*[nWords - wildHi - 1]uint64)(fw[wildHi+1:])
}

// KeyMask returns the bits of Fields the exact-match cache keys on for s
// (see Cache): a set bit is in the key, a clear one is a field no rule of
// s can see. All ones when s wildcards nothing.
func (s *Snapshot) KeyMask() Fields {
	var m Fields
	w := asWords(&m)
	for i := range w {
		w[i] = ^s.wild[i]
	}
	return m
}
