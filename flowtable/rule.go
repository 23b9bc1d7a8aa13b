package flowtable

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
)

// DefaultPriority is the priority of a rule that does not give one, as in
// ovs-ofctl.
const DefaultPriority = 32768

// Rule is one flow rule: where it lives (Table), how it ranks (Priority),
// an opaque Cookie for bulk deletion, what it matches and what it does.
//
// A Rule given to Table.Add belongs to the table from then on and must not
// be modified. Its packet and byte counters are updated atomically by
// Verdict.Account and read with Stats.
type Rule struct {
	Table    uint8
	Priority uint16
	Cookie   uint64
	Match    Match
	Actions  []Action // empty: drop

	slot uint8 // its slot in a Counters (set when the rule is made)

	// The counters are written by every worker that hits the rule, after
	// each of its batches (Counters.Flush), and the fields above are read
	// by every lookup and Account. A line of padding on each side keeps
	// the counters off the lines of those fields and of the next object,
	// wherever the allocator puts the rule, so that one worker's flush
	// does not take the rule's other lines from the other workers' caches
	// (TestRuleCountersOwnLines).
	_       [cacheLine]byte
	packets atomic.Uint64
	bytes   atomic.Uint64
	_       [cacheLine]byte
}

// cacheLine is the size of a CPU cache line (x86-64, most arm64).
const cacheLine = 64

// ruleSeq numbers rules as they are made, to spread them over the slots of
// a Counters (a rule made otherwise has slot 0: correct, only slower).
var ruleSeq atomic.Uint32

func nextSlot() uint8 { return uint8(ruleSeq.Add(1) % counterSlots) }

// Stats returns the rule's packet and byte counters.
func (r *Rule) Stats() (packets, bytes uint64) { return r.packets.Load(), r.bytes.Load() }

// Equal reports whether r and o are the same rule (counters aside).
func (r *Rule) Equal(o *Rule) bool {
	return r.Table == o.Table && r.Priority == o.Priority && r.Cookie == o.Cookie &&
		r.Match == o.Match && reflect.DeepEqual(r.Actions, o.Actions)
}

// String prints r in ovs-ofctl add-flow syntax; ParseRule of the result
// yields a rule Equal to r.
func (r *Rule) String() string {
	var b strings.Builder
	b.WriteString("table=")
	b.WriteString(strconv.Itoa(int(r.Table)))
	b.WriteString(", priority=")
	b.WriteString(strconv.Itoa(int(r.Priority)))
	if r.Cookie != 0 {
		b.WriteString(", cookie=0x")
		b.WriteString(strconv.FormatUint(r.Cookie, 16))
	}
	if m := r.Match.String(); m != "" {
		b.WriteString(", ")
		b.WriteString(strings.ReplaceAll(m, ",", ", "))
	}
	b.WriteString(", actions=")
	formatActions(&b, r.Actions)
	return b.String()
}

// check normalizes r's match and validates the rule as a whole.
func (r *Rule) check() error {
	r.Match.normalize()
	if err := r.Match.validate(); err != nil {
		return err
	}
	if r.Table == 255 {
		return errors.New("table 255 is reserved")
	}
	for i := range r.Actions {
		if err := r.checkAction(i); err != nil {
			return fmt.Errorf("action %d (%s): %w", i+1, r.Actions[i], err)
		}
	}
	return nil
}

func (r *Rule) checkAction(i int) error {
	a := &r.Actions[i]
	ref := func(fr FieldRef, write bool) error {
		if fr.Field == FieldNone || fr.Field >= numFields {
			return errors.New("no such field")
		}
		if write && !fieldInfos[fr.Field].writable {
			return fmt.Errorf("%s is read-only", fr.Field)
		}
		if fr.NBits == 0 || int(fr.Ofs)+int(fr.NBits) > int(fr.Field.Width()) {
			return fmt.Errorf("bits %d..%d outside %s", fr.Ofs, int(fr.Ofs)+int(fr.NBits)-1, fr.Field)
		}
		return nil
	}
	switch a.Kind {
	case ActOutput:
		if a.Port == PortNone || a.Port >= PortMax {
			return errors.New("reserved port")
		}
	case ActOutputReg:
		return ref(a.Src, false)
	case ActInPort, ActNote, ActCTClear:
	case ActCT:
		if a.CT == nil {
			return errors.New("ct without its arguments (use Ct(CT{}))")
		}
		return r.checkCT(a.CT)
	case ActGotoTable:
		if i != len(r.Actions)-1 {
			return errors.New("goto_table must be the last action")
		}
		if a.Table <= r.Table || a.Table == 255 {
			return fmt.Errorf("goto_table:%d must go forward from table %d", a.Table, r.Table)
		}
	case ActResubmit:
		if a.Table == 255 {
			return errors.New("table 255 is reserved")
		}
	case ActLoad:
		if err := ref(a.Dst, true); err != nil {
			return err
		}
		if a.Value&^a.Dst.mask() != 0 {
			return fmt.Errorf("value 0x%x does not fit in %d bits", a.Value, a.Dst.NBits)
		}
	case ActSetField:
		if err := ref(a.Dst, true); err != nil {
			return err
		}
		if a.Dst.Ofs != 0 || a.Dst.NBits != a.Dst.Field.Width() {
			return errors.New("set_field sets a whole field")
		}
		if a.Value&^a.Dst.mask() != 0 {
			return fmt.Errorf("value 0x%x does not fit in %d bits", a.Value, a.Dst.NBits)
		}
	case ActMove:
		if err := ref(a.Src, false); err != nil {
			return err
		}
		if err := ref(a.Dst, true); err != nil {
			return err
		}
		if a.Src.NBits != a.Dst.NBits {
			return errors.New("source and destination widths differ")
		}
	default:
		return errors.New("unknown action kind")
	}
	return nil
}

// header is what a rule or filter text says besides its match.
type header struct {
	table                int
	priority             uint16
	cookie, cookieMask   uint64
	hasTable, hasCookie  bool
	hasPrio, cookieMasks bool
}

// fieldUse records where a match field was given, for prerequisite errors.
type fieldUse struct {
	name string
	col  int
	pre  prereq
}

// parseMatchPart parses the comma/space separated key=value list before
// "actions=". base is the offset of s in the whole text.
func parseMatchPart(s string, base int, allowCookieMask bool) (Match, header, error) {
	var m Match
	h := header{priority: DefaultPriority, cookieMask: ^uint64(0)}
	var uses []fieldUse
	i := 0
	for i < len(s) {
		c := s[i]
		if c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			i++
			continue
		}
		j := i
		for j < len(s) && !strings.ContainsRune(", \t\r\n", rune(s[j])) {
			j++
		}
		tok := s[i:j]
		col := base + i + 1
		i = j
		key, val, hasVal := strings.Cut(tok, "=")
		fail := func(msg string) error { return &SyntaxError{Col: col, Field: key, Msg: msg} }
		switch key {
		case "table":
			n, err := parseUint(val, 8)
			if err != nil || n > 254 {
				return m, h, fail("want a table number 0-254")
			}
			h.table, h.hasTable = int(n), true
			continue
		case "priority":
			n, err := parseUint(val, 16)
			if err != nil {
				return m, h, fail("want a priority 0-65535")
			}
			h.priority, h.hasPrio = uint16(n), true
			continue
		case "cookie":
			vs, ms, masked := strings.Cut(val, "/")
			v, err := parseUint(vs, 64)
			if err != nil {
				return m, h, fail(err.Error())
			}
			h.cookie, h.hasCookie = v, true
			if masked {
				if !allowCookieMask {
					return m, h, fail("a cookie mask is only allowed in filters")
				}
				if h.cookieMask, err = parseUint(ms, 64); err != nil {
					return m, h, fail(err.Error())
				}
				h.cookieMasks = true
			}
			continue
		case "duration", "n_packets", "n_bytes", "idle_age", "hard_age":
			continue // ovs-ofctl dump-flows output
		case "idle_timeout", "hard_timeout":
			if val != "0" {
				return m, h, fail("flow timeouts are not supported")
			}
			continue
		}
		if et, proto, hasProto, ok := shorthand(key); ok {
			if hasVal {
				return m, h, fail("protocol shorthand takes no value")
			}
			if err := setMatch(&m, mEthType, uint64(et), 0xffff); err != nil {
				return m, h, fail(err.Error())
			}
			if hasProto {
				if err := setMatch(&m, mNwProto, uint64(proto), 0xff); err != nil {
					return m, h, fail(err.Error())
				}
			}
			continue
		}
		if key == "ct_label" {
			if !hasVal {
				return m, h, fail("missing =value")
			}
			v, mk, err := parseLabel(val)
			if err != nil {
				return m, h, fail(err.Error())
			}
			if err := setLabel(&m, v, mk); err != nil {
				return m, h, fail(err.Error())
			}
			continue
		}
		fa, ok := lookupMatchField(key)
		if !ok {
			return m, h, fail("unknown or unsupported match field")
		}
		if !hasVal {
			return m, h, fail("missing =value")
		}
		v, mk, err := parseFieldValue(fa.f, val)
		if err != nil {
			return m, h, fail(err.Error())
		}
		if mk == 0 {
			continue // fully wildcarded
		}
		if err := setMatch(&m, fa.f, v, mk); err != nil {
			return m, h, fail(err.Error())
		}
		uses = append(uses, fieldUse{key, col, fa.pre})
	}
	for _, u := range uses {
		if miss := u.pre.check(&m); miss != "" {
			return m, h, &SyntaxError{Col: u.col, Field: u.name, Msg: "requires " + miss}
		}
	}
	if err := m.validate(); err != nil {
		return m, h, &SyntaxError{Col: base + 1, Msg: err.Error()}
	}
	return m, h, nil
}

// ParseRule parses one rule in ovs-ofctl add-flow syntax:
//
//	table=20, priority=100, cookie=0x1, in_port=3, ip, nw_src=10.128.0.3, actions=load:0x5->NXM_NX_REG0[],goto_table:27
//
// Keys may come in any order, separated by commas and/or spaces; actions=
// comes last. table defaults to 0, priority to 32768, cookie to 0. Errors
// are *SyntaxError values wrapping ErrSyntax.
func ParseRule(s string) (*Rule, error) {
	ai := strings.Index(s, "actions=")
	if ai < 0 {
		return nil, &SyntaxError{Col: len(s) + 1, Msg: "missing actions= (use actions=drop to drop)"}
	}
	m, h, err := parseMatchPart(s[:ai], 0, false)
	if err != nil {
		return nil, err
	}
	abase := ai + len("actions=")
	acts, err := parseActions(s[abase:], abase)
	if err != nil {
		return nil, err
	}
	r := &Rule{Table: uint8(h.table), Priority: h.priority, Cookie: h.cookie, Match: m, Actions: acts, slot: nextSlot()}
	if err := r.check(); err != nil {
		return nil, &SyntaxError{Col: abase + 1, Field: "actions", Msg: err.Error()}
	}
	return r, nil
}

// ParseRules parses rules one per line. Blank lines and lines starting
// with # are skipped. Errors name the line.
func ParseRules(text string) ([]*Rule, error) {
	var out []*Rule
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		r, err := ParseRule(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseMatch parses a match in ovs-ofctl syntax. table=, priority= and
// cookie= (with an optional /mask) are accepted and ignored; use
// ParseFilter to keep them.
func ParseMatch(s string) (Match, error) {
	m, _, err := parseMatchPart(s, 0, true)
	return m, err
}

// Filter selects rules for Table.Delete and for dumps, as ovs-ofctl
// del-flows does.
//
// Table -1 selects every table. A rule is selected when
// (rule.Cookie ^ Cookie) & CookieMask == 0 and, if Strict, its match equals
// Match and its priority equals Priority; if not Strict, its match is at
// least as specific as Match (priority ignored).
type Filter struct {
	Table      int
	Match      Match
	Strict     bool
	Priority   uint16
	Cookie     uint64
	CookieMask uint64
}

// Selects reports whether f selects r.
func (f *Filter) Selects(r *Rule) bool {
	if f.Table >= 0 && int(r.Table) != f.Table {
		return false
	}
	if (r.Cookie^f.Cookie)&f.CookieMask != 0 {
		return false
	}
	m := f.Match
	m.normalize()
	if f.Strict {
		return r.Priority == f.Priority && r.Match == m
	}
	return m.Subsumes(&r.Match)
}

// ParseFilter parses a del-flows / dump-flows filter: a match plus
// optional table=N (default: every table), priority=P (default 32768, used
// when strict) and cookie=V[/MASK] (exact when the mask is omitted).
func ParseFilter(s string) (Filter, error) {
	m, h, err := parseMatchPart(s, 0, true)
	if err != nil {
		return Filter{}, err
	}
	f := Filter{Table: -1, Match: m, Priority: h.priority}
	if h.hasTable {
		f.Table = h.table
	}
	if h.hasCookie {
		f.Cookie, f.CookieMask = h.cookie, h.cookieMask
	}
	return f, nil
}

// ParseFields parses a packet description for Trace in match syntax, e.g.
// "in_port=3,tcp,nw_src=10.128.0.3,nw_dst=10.128.0.4,tp_dst=80". Fields not
// named are zero; masks are not allowed.
func ParseFields(s string) (Fields, error) {
	m, h, err := parseMatchPart(s, 0, false)
	if err != nil {
		return Fields{}, err
	}
	if h.hasTable || h.hasPrio || h.hasCookie {
		return Fields{}, &SyntaxError{Col: 1, Msg: "a packet description takes no table, priority or cookie"}
	}
	for _, f := range everyField {
		if mk := f.get(&m.Mask); mk != 0 && mk != fullMask(f.bits) {
			return Fields{}, &SyntaxError{Col: 1, Field: f.name, Msg: "a packet description takes no masks"}
		}
	}
	return m.Value, nil
}

// FormatFields prints the non-zero fields of f in match syntax, the form
// ParseFields reads.
func FormatFields(f Fields) string {
	var m Match
	m.Value = f
	for _, fd := range everyField {
		if fd.get(&f) != 0 {
			fd.set(&m.Mask, fullMask(fd.bits))
		}
	}
	return m.String()
}
