package flowtable

import (
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gvswitch/gvs/conntrack"
)

// The ct and ct_clear actions (ovs-actions(7) "Connection Tracking
// Actions"), as the flow table holds, parses, prints and checks them. The
// tracker itself is package conntrack; the pipeline only records where a
// packet meets a ct action (Verdict.CT) and the switch carries it out.

// CT is the argument list of a ct action:
//
//	ct(commit, force, table=N, zone=N | zone=FIELD[a..b], nat | nat(src|dst=A1[-A2][:P1[-P2]][,persistent][,hash|random]), exec(set_field:V[/M]->ct_mark, set_field:V[/M]->ct_label))
//
// Without Recirc the packet is tracked and the actions after ct go on; with
// it the packet is also recirculated to table Table with its ct_* fields
// set (ovs-actions(7): ct forks the pipeline). The zero CT is "ct()": track
// in zone 0 and go on.
type CT struct {
	Commit bool // commit: make the connection (with NAT, exec) if it is new
	Force  bool // force: end a connection met in its reply direction and start a new one (needs Commit)
	// Recirc is table=: the packet is recirculated to Table after the
	// tracker has seen it. Table is 0 to 254 and must be 0 without Recirc.
	Recirc bool
	Table  uint8
	// Zone is zone=N; ZoneField, when its Field is not FieldNone, is
	// zone=FIELD[a..b] instead (16 bits, read when the action runs) and
	// Zone must be 0.
	Zone      uint16
	ZoneField FieldRef
	NAT       NAT      // nat, nat(src=…), nat(dst=…); zero: no nat
	Exec      []CTExec // exec(...): writes to ct_mark and ct_label (need Commit)

	act conntrack.Action // the tracker's form, made by Rule.check
}

// NAT is the nat argument of a ct action. Kind NATNone (the zero value)
// means no nat argument; NATBare is a bare "nat", which applies the
// translation recorded for the connection; NATSrc and NATDst give the
// range a new connection is translated into. MaxAddr zero means MinAddr
// alone; MinAddr zero (nat(src) written without a range) keeps the
// packet's own address and moves only a colliding port. MaxPort zero means
// MinPort alone; no ports: the port is kept unless it collides. Hash and
// Random choose how the port is picked (the tracker hashes unless Random;
// Hash is kept for printing), Persistent how the address is.
type NAT struct {
	Kind             conntrack.NATKind
	MinAddr, MaxAddr [4]byte
	MinPort, MaxPort uint16
	Persistent       bool
	Hash             bool
	Random           bool

	bad string // why a constructor could not make it
}

// CTExec is one action inside a ct action's exec(...): a write to the
// connection's ct_mark (32 bits) or, with Label, its ct_label (128 bits):
// the bits of Mask take Value. For ct_mark, Value and Mask use the low 32
// bits of Lo. Load marks one written as load:V->NXM_NX_CT_MARK[a..b] (Mask
// is then one run of bits), which is how it is printed back; otherwise it
// prints as set_field:V[/M]->ct_mark.
type CTExec struct {
	Label       bool
	Value, Mask conntrack.Label
	Load        bool
}

// Action returns the tracker's form of the action, as Table.Add (or
// NewRule, ParseRule) compiled it: the argument to hand to
// conntrack.Tracker.Process, with Zone set from ZoneField where that is
// given. It belongs to the rule: do not modify it.
func (c *CT) Action() *conntrack.Action { return &c.act }

// Ct tracks the packet in a ct action: ct(...) with the arguments in c,
// which is copied. NewRule checks it as ParseRule checks its text.
func Ct(c CT) Action {
	n := c.normalized()
	return Action{Kind: ActCT, CT: &n}
}

// CtClear is the ct_clear action: the packet becomes untracked (its
// ct_* fields cleared, and what the tracker keeps of it forgotten).
func CtClear() Action { return Action{Kind: ActCTClear} }

// SrcNAT is nat(src=lo[-hi][:loPort[-hiPort]]): source translation of a
// new connection into the addresses lo to hi and the ports loPort to
// hiPort. The zero hi means lo alone, zero ports no port range; the zero
// lo (the zero netip.Addr or 0.0.0.0) is nat(src): keep the packet's
// address and move a colliding port. Addresses are IPv4.
func SrcNAT(lo, hi netip.Addr, loPort, hiPort uint16) NAT {
	return natRange(conntrack.NATSrc, lo, hi, loPort, hiPort)
}

// DstNAT is nat(dst=lo[-hi][:loPort[-hiPort]]): destination translation
// of a new connection, as SrcNAT.
func DstNAT(lo, hi netip.Addr, loPort, hiPort uint16) NAT {
	return natRange(conntrack.NATDst, lo, hi, loPort, hiPort)
}

// BareNAT is a bare nat: apply the translation the connection was
// committed with.
func BareNAT() NAT { return NAT{Kind: conntrack.NATBare} }

func natRange(k conntrack.NATKind, lo, hi netip.Addr, loPort, hiPort uint16) NAT {
	n := NAT{Kind: k, MinPort: loPort, MaxPort: hiPort}
	for i, a := range [2]netip.Addr{lo, hi} {
		if !a.IsValid() {
			continue
		}
		v, ok := ipv4(a)
		if !ok {
			return NAT{Kind: k, bad: fmt.Sprintf("nat: %v is not an IPv4 address", a)}
		}
		if i == 0 {
			n.MinAddr = ipFrom64(v)
		} else {
			n.MaxAddr = ipFrom64(v)
		}
	}
	return n
}

// SetCtMark is exec(set_field:v/mask->ct_mark): the bits of mask take v
// (mask 0xffffffff: the whole mark).
func SetCtMark(v, mask uint32) CTExec {
	return CTExec{Value: conntrack.Label{Lo: uint64(v & mask)}, Mask: conntrack.Label{Lo: uint64(mask)}}
}

// SetCtLabel is exec(set_field:v/mask->ct_label): the bits of mask take v.
func SetCtLabel(v, mask conntrack.Label) CTExec {
	return CTExec{Label: true, Value: conntrack.Label{Hi: v.Hi & mask.Hi, Lo: v.Lo & mask.Lo}, Mask: mask}
}

// normalized returns a deep copy of c as the parser makes it: equal NAT
// bounds folded (lo-lo is lo), exec values masked, an empty exec nil, no
// bits of a zone field that names no field.
func (c CT) normalized() CT {
	n := c
	n.act = conntrack.Action{}
	if n.ZoneField.Field == FieldNone {
		n.ZoneField = FieldRef{}
	}
	if n.NAT.MaxAddr == n.NAT.MinAddr {
		n.NAT.MaxAddr = [4]byte{}
	}
	if n.NAT.MaxPort == n.NAT.MinPort {
		n.NAT.MaxPort = 0
	}
	n.Exec = nil
	for _, e := range c.Exec {
		e.Value = conntrack.Label{Hi: e.Value.Hi & e.Mask.Hi, Lo: e.Value.Lo & e.Mask.Lo}
		n.Exec = append(n.Exec, e)
	}
	return n
}

// String prints c as ovs-ofctl does: ct(commit,force,table=N,zone=Z,nat…,exec(…)).
func (c *CT) String() string {
	var b strings.Builder
	b.WriteString("ct(")
	if c.Commit {
		b.WriteString("commit,")
	}
	if c.Force {
		b.WriteString("force,")
	}
	if c.Recirc {
		b.WriteString("table=" + strconv.Itoa(int(c.Table)) + ",")
	}
	switch {
	case c.ZoneField.Field != FieldNone:
		b.WriteString("zone=" + c.ZoneField.String() + ",")
	case c.Zone != 0:
		b.WriteString("zone=" + strconv.Itoa(int(c.Zone)) + ",")
	}
	if c.NAT.Kind != conntrack.NATNone {
		b.WriteString(c.NAT.String() + ",")
	}
	if len(c.Exec) > 0 {
		b.WriteString("exec(")
		for i := range c.Exec {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(c.Exec[i].String())
		}
		b.WriteString("),")
	}
	s := strings.TrimSuffix(b.String(), ",")
	return s + ")"
}

// String prints n as ovs-ofctl does: nat, nat(src), nat(dst=A1-A2:P1-P2,persistent,random).
func (n NAT) String() string {
	switch n.Kind {
	case conntrack.NATNone:
		return ""
	case conntrack.NATBare:
		return "nat"
	}
	s := "nat(src"
	if n.Kind == conntrack.NATDst {
		s = "nat(dst"
	}
	if n.MinAddr != ([4]byte{}) || n.MinPort != 0 {
		s += "=" + netip.AddrFrom4(n.MinAddr).String()
		if n.MaxAddr != ([4]byte{}) && n.MaxAddr != n.MinAddr {
			s += "-" + netip.AddrFrom4(n.MaxAddr).String()
		}
		if n.MinPort != 0 {
			s += ":" + strconv.Itoa(int(n.MinPort))
			if n.MaxPort != 0 && n.MaxPort != n.MinPort {
				s += "-" + strconv.Itoa(int(n.MaxPort))
			}
		}
	}
	if n.Persistent {
		s += ",persistent"
	}
	if n.Hash {
		s += ",hash"
	}
	if n.Random {
		s += ",random"
	}
	return s + ")"
}

// String prints e as it was written: set_field:V[/M]->ct_mark (or
// ct_label), or load:V->NXM_NX_CT_MARK[a..b] (or NXM_NX_CT_LABEL).
func (e CTExec) String() string {
	name, nxm, full := "ct_mark", "NXM_NX_CT_MARK", conntrack.Label{Lo: 0xffffffff}
	if e.Label {
		name, nxm, full = "ct_label", "NXM_NX_CT_LABEL", conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)}
	}
	if e.Load {
		ofs, n := labelRun(e.Mask)
		v := shr128(e.Value, ofs)
		s := "load:" + formatHexC(v.Lo) + "->" + nxm + "["
		switch {
		case ofs == 0 && e.Mask == full:
			s += "]"
		case n == 1:
			s += strconv.Itoa(ofs) + "]"
		default:
			s += strconv.Itoa(ofs) + ".." + strconv.Itoa(ofs+n-1) + "]"
		}
		return s
	}
	s := "set_field:" + formatHex128(e.Value)
	if e.Mask != full {
		s += "/" + formatHex128(e.Mask)
	}
	return s + "->" + name
}

// labelRun returns the offset and length of the one run of set bits in m
// (0, 0 when m is zero; for a mask of several runs, the first run's
// offset and the span to the last bit).
func labelRun(m conntrack.Label) (ofs, n int) {
	if m.Lo != 0 {
		ofs = bits.TrailingZeros64(m.Lo)
	} else if m.Hi != 0 {
		ofs = 64 + bits.TrailingZeros64(m.Hi)
	} else {
		return 0, 0
	}
	top := 127 - bits.LeadingZeros64(m.Hi)
	if m.Hi == 0 {
		top = 63 - bits.LeadingZeros64(m.Lo)
	}
	return ofs, top - ofs + 1
}

func shr128(l conntrack.Label, n int) conntrack.Label {
	switch {
	case n == 0:
		return l
	case n >= 64:
		return conntrack.Label{Lo: l.Hi >> (n - 64)}
	}
	return conntrack.Label{Hi: l.Hi >> n, Lo: l.Lo>>n | l.Hi<<(64-n)}
}

func shl128(l conntrack.Label, n int) conntrack.Label {
	switch {
	case n == 0:
		return l
	case n >= 64:
		return conntrack.Label{Hi: l.Lo << (n - 64)}
	}
	return conntrack.Label{Hi: l.Hi<<n | l.Lo>>(64-n), Lo: l.Lo << n}
}

// ones128 returns n one bits shifted left by ofs.
func ones128(ofs, n int) conntrack.Label {
	var l conntrack.Label
	switch {
	case n >= 128:
		l = conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)}
	case n > 64:
		l = conntrack.Label{Hi: 1<<(n-64) - 1, Lo: ^uint64(0)}
	case n == 64:
		l = conntrack.Label{Lo: ^uint64(0)}
	default:
		l = conntrack.Label{Lo: 1<<n - 1}
	}
	return shl128(l, ofs)
}

// splitTop splits s at the commas that are not inside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// parseCT parses the ct action: "ct", "ct()" or "ct(ARGS)". As ovs-ofctl,
// a later table= or zone= replaces an earlier one and commit and force may
// be repeated; unlike it, a second nat argument is refused (ovs-ofctl
// tucks it into exec, where gvs takes no nat).
func parseCT(tok string) (Action, error) {
	args, ok := strings.CutPrefix(tok, "ct(")
	if tok == "ct" {
		args, ok = ")", true
	}
	if !ok || !strings.HasSuffix(args, ")") {
		return Action{}, errors.New("want ct(ARGUMENTS)")
	}
	args = args[:len(args)-1]
	var c CT
	sawNAT := false
	for _, arg := range splitTop(args) {
		arg = strings.TrimSpace(arg)
		name, val, hasVal := strings.Cut(arg, "=")
		switch {
		case arg == "":
			if args != "" {
				return Action{}, errors.New("empty ct argument")
			}
		case arg == "commit":
			c.Commit = true
		case arg == "force":
			c.Force = true
		case name == "table" && hasVal:
			n, err := parseUint(val, 8)
			if err != nil || n > 254 {
				return Action{}, fmt.Errorf("bad table %q (0-254)", val)
			}
			c.Recirc, c.Table = true, uint8(n)
		case name == "zone" && hasVal:
			if strings.Contains(val, "[") {
				r, err := parseSubfield(val)
				if err != nil {
					return Action{}, err
				}
				c.Zone, c.ZoneField = 0, r
				continue
			}
			n, err := parseUint(val, 16)
			if err != nil {
				return Action{}, fmt.Errorf("bad zone %q (0-65535 or FIELD[a..b])", val)
			}
			c.Zone, c.ZoneField = uint16(n), FieldRef{}
		case arg == "nat" || strings.HasPrefix(arg, "nat("):
			if sawNAT {
				return Action{}, errors.New("nat given twice")
			}
			sawNAT = true
			n, err := parseNAT(arg)
			if err != nil {
				return Action{}, err
			}
			c.NAT = n
		case strings.HasPrefix(arg, "exec(") && strings.HasSuffix(arg, ")"):
			inner := strings.TrimSpace(arg[len("exec(") : len(arg)-1])
			if inner == "" {
				continue
			}
			for _, x := range splitTop(inner) {
				e, err := parseCTExec(strings.TrimSpace(x))
				if err != nil {
					return Action{}, err
				}
				c.Exec = append(c.Exec, e)
			}
		case name == "alg":
			return Action{}, errors.New("alg (application layer gateways) is not supported")
		default:
			return Action{}, fmt.Errorf("unknown ct argument %q", arg)
		}
	}
	return Ct(c), nil
}

// parseNAT parses "nat" or "nat(src|dst[=A1[-A2][:P1[-P2]]][,persistent][,hash|random])".
func parseNAT(s string) (NAT, error) {
	if s == "nat" {
		return BareNAT(), nil
	}
	inner, ok := strings.CutSuffix(strings.TrimPrefix(s, "nat("), ")")
	if !ok {
		return NAT{}, errors.New("want nat(src=…) or nat(dst=…)")
	}
	var n NAT
	for _, item := range strings.Split(inner, ",") {
		item = strings.TrimSpace(item)
		kind, rng, hasRange := strings.Cut(item, "=")
		switch kind {
		case "src", "dst":
			if n.Kind != conntrack.NATNone {
				return NAT{}, errors.New(`nat: only one of "src" and "dst" may be given`)
			}
			n.Kind = conntrack.NATSrc
			if kind == "dst" {
				n.Kind = conntrack.NATDst
			}
			if hasRange {
				if err := n.parseRange(rng); err != nil {
					return NAT{}, err
				}
			}
		case "persistent":
			n.Persistent = true
		case "hash":
			n.Hash = true
		case "random":
			n.Random = true
		case "":
			if inner != "" {
				return NAT{}, errors.New("nat: empty argument")
			}
		default:
			return NAT{}, fmt.Errorf("nat: unknown argument %q", item)
		}
	}
	if n.Kind == conntrack.NATNone {
		if n.Persistent || n.Hash || n.Random {
			return NAT{}, errors.New(`nat: flags are allowed only with "src" or "dst"`)
		}
		return BareNAT(), nil
	}
	return n, nil
}

// parseRange parses A1[-A2][:P1[-P2]] into n.
func (n *NAT) parseRange(s string) error {
	if strings.HasPrefix(s, "[") {
		return errors.New("nat: IPv6 ranges are not supported")
	}
	addrs, ports, hasPorts := strings.Cut(s, ":")
	lo, hi, hasHi := strings.Cut(addrs, "-")
	a, err := netip.ParseAddr(lo)
	if err != nil || !a.Is4() {
		return fmt.Errorf("nat: bad IPv4 address %q", lo)
	}
	n.MinAddr = a.As4()
	if hasHi {
		b, err := netip.ParseAddr(hi)
		if err != nil || !b.Is4() {
			return fmt.Errorf("nat: bad IPv4 address %q", hi)
		}
		if b != a {
			n.MaxAddr = b.As4()
		}
	}
	if hasPorts {
		lo, hi, hasHi := strings.Cut(ports, "-")
		p, err := strconv.ParseUint(lo, 10, 16)
		if err != nil || p == 0 {
			return fmt.Errorf("nat: bad port %q (1-65535)", lo)
		}
		n.MinPort = uint16(p)
		if hasHi {
			q, err := strconv.ParseUint(hi, 10, 16)
			if err != nil || q == 0 {
				return fmt.Errorf("nat: bad port %q (1-65535)", hi)
			}
			if q != p {
				n.MaxPort = uint16(q)
			}
		}
	}
	return nil
}

// parseCTExec parses one action of exec(...).
func parseCTExec(s string) (CTExec, error) {
	name, arg, _ := strings.Cut(s, ":")
	switch name {
	case "set_field":
		vs, fs, ok := strings.Cut(arg, "->")
		if !ok {
			return CTExec{}, errors.New("want set_field:VALUE[/MASK]->ct_mark or ct_label")
		}
		var e CTExec
		switch fs {
		case "ct_mark":
		case "ct_label":
			e.Label = true
		default:
			return CTExec{}, fmt.Errorf("exec may set only ct_mark and ct_label, not %q", fs)
		}
		value, mask, masked := strings.Cut(vs, "/")
		v, err := parseUint128(value)
		if err != nil {
			return CTExec{}, err
		}
		m := conntrack.Label{Hi: ^uint64(0), Lo: ^uint64(0)}
		if !e.Label {
			m = conntrack.Label{Lo: 0xffffffff}
		}
		if masked {
			if m, err = parseUint128(mask); err != nil {
				return CTExec{}, err
			}
		}
		if !e.Label && (v.Hi != 0 || v.Lo > 0xffffffff || m.Hi != 0 || m.Lo > 0xffffffff) {
			return CTExec{}, fmt.Errorf("%s does not fit in ct_mark's 32 bits", vs)
		}
		e.Value, e.Mask = conntrack.Label{Hi: v.Hi & m.Hi, Lo: v.Lo & m.Lo}, m
		return e, nil
	case "load":
		vs, ds, ok := strings.Cut(arg, "->")
		if !ok {
			return CTExec{}, errors.New("want load:VALUE->NXM_NX_CT_MARK[bits] or NXM_NX_CT_LABEL[bits]")
		}
		fname, rest, ok := strings.Cut(ds, "[")
		if !ok || !strings.HasSuffix(rest, "]") {
			return CTExec{}, fmt.Errorf("bad subfield %q", ds)
		}
		var e CTExec
		width := 32
		switch fname {
		case "NXM_NX_CT_MARK", "ct_mark":
		case "NXM_NX_CT_LABEL", "ct_label":
			e.Label, width = true, 128
		default:
			return CTExec{}, fmt.Errorf("exec may load only ct_mark and ct_label, not %q", fname)
		}
		ofs, n := 0, width
		if rng := rest[:len(rest)-1]; rng != "" {
			lo, hi, isRange := strings.Cut(rng, "..")
			a, err := strconv.Atoi(lo)
			b := a
			if err == nil && isRange {
				b, err = strconv.Atoi(hi)
			}
			if err != nil || a < 0 || b < a || b >= width {
				return CTExec{}, fmt.Errorf("bit range %q out of %s's %d bits", rng, fname, width)
			}
			ofs, n = a, b-a+1
		}
		v, err := parseUint(vs, uint(min(n, 64)))
		if err != nil {
			return CTExec{}, err
		}
		e.Load = true
		e.Mask = ones128(ofs, n)
		e.Value = shl128(conntrack.Label{Lo: v}, ofs)
		return e, nil
	}
	return CTExec{}, fmt.Errorf("exec may only set_field or load ct_mark and ct_label, not %q", s)
}

// checkCT checks a ct action of rule r and compiles it into c.act.
func (r *Rule) checkCT(c *CT) error {
	m := &r.Match
	if m.Mask.EthType != 0xffff || (m.Value.EthType != 0x0800 && m.Value.EthType != 0x86dd) {
		return errors.New("ct requires ip (dl_type=0x0800) or dl_type=0x86dd in the match")
	}
	if !c.Recirc && c.Table != 0 {
		return fmt.Errorf("table %d given without Recirc", c.Table)
	}
	if c.Recirc && c.Table == 255 {
		return errors.New("table 255 is reserved")
	}
	if c.ZoneField.Field != FieldNone {
		fr := c.ZoneField
		if fr.Field >= numFields || fr.NBits == 0 || int(fr.Ofs)+int(fr.NBits) > int(fr.Field.Width()) {
			return fmt.Errorf("zone: bits %d..%d outside %s", fr.Ofs, int(fr.Ofs)+int(fr.NBits)-1, fr.Field)
		}
		if fr.NBits != 16 {
			return fmt.Errorf("zone: %s is %d bits, not 16", fr, fr.NBits)
		}
		if c.Zone != 0 {
			return errors.New("zone: both a number and a field")
		}
	}
	if c.Force && !c.Commit {
		return errors.New(`"force" requires "commit"`)
	}
	if len(c.Exec) > 0 && !c.Commit {
		return errors.New(`exec requires "commit"`)
	}
	n := &c.NAT
	if n.bad != "" {
		return errors.New(n.bad)
	}
	switch n.Kind {
	case conntrack.NATNone, conntrack.NATBare:
		if *n != (NAT{Kind: n.Kind}) {
			return errors.New(`nat: a range or flags need "src" or "dst"`)
		}
	case conntrack.NATSrc, conntrack.NATDst:
		if !c.Commit {
			return errors.New(`nat(src=…) and nat(dst=…) require "commit"`)
		}
		if n.Hash && n.Random {
			return errors.New(`nat: "hash" and "random" exclude each other`)
		}
		if n.MinAddr == ([4]byte{}) && (n.MaxAddr != [4]byte{} || n.MinPort != 0 || n.MaxPort != 0) {
			return errors.New("nat: a range needs a first address")
		}
		if n.MaxAddr != ([4]byte{}) && ip64(n.MaxAddr) < ip64(n.MinAddr) {
			return fmt.Errorf("nat: address range %v-%v is reversed", netip.AddrFrom4(n.MinAddr), netip.AddrFrom4(n.MaxAddr))
		}
		if n.MinPort == 0 && n.MaxPort != 0 {
			return errors.New("nat: a port range cannot start at 0")
		}
		if n.MaxPort != 0 && n.MaxPort < n.MinPort {
			return fmt.Errorf("nat: port range %d-%d is reversed", n.MinPort, n.MaxPort)
		}
	default:
		return fmt.Errorf("nat: unknown kind %d", n.Kind)
	}
	a := conntrack.Action{Zone: c.Zone, Commit: c.Commit, Force: c.Force, NAT: conntrack.NAT{
		Kind: n.Kind, MinAddr: n.MinAddr, MaxAddr: n.MaxAddr, MinPort: n.MinPort, MaxPort: n.MaxPort,
		Random: n.Random, Persistent: n.Persistent,
	}}
	for i := range c.Exec {
		e := &c.Exec[i]
		if e.Value.Hi&^e.Mask.Hi != 0 || e.Value.Lo&^e.Mask.Lo != 0 {
			return fmt.Errorf("exec: value %s has bits outside its mask %s", formatHex128(e.Value), formatHex128(e.Mask))
		}
		if !e.Label && (e.Mask.Hi != 0 || e.Mask.Lo > 0xffffffff) {
			return errors.New("exec: ct_mark has 32 bits")
		}
		if e.Load {
			if e.Mask == (conntrack.Label{}) {
				return errors.New("exec: load of no bits")
			}
			ofs, w := labelRun(e.Mask)
			if ones128(ofs, w) != e.Mask || w > 64 && shr128(e.Value, ofs).Hi != 0 {
				return errors.New("exec: a load writes one run of bits from a 64-bit value")
			}
		}
		if e.Label {
			a.SetLabel = true
			a.Label = conntrack.Label{Hi: e.Value.Hi | a.Label.Hi&^e.Mask.Hi, Lo: e.Value.Lo | a.Label.Lo&^e.Mask.Lo}
			a.LabelMask = conntrack.Label{Hi: a.LabelMask.Hi | e.Mask.Hi, Lo: a.LabelMask.Lo | e.Mask.Lo}
		} else {
			v, mk := uint32(e.Value.Lo), uint32(e.Mask.Lo)
			a.SetMark = true
			a.Mark = v | a.Mark&^mk
			a.MarkMask |= mk
		}
	}
	if err := a.Validate(); err != nil {
		return err
	}
	c.act = a
	return nil
}
