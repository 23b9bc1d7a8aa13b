package flowtable

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ActionKind is the kind of an Action.
type ActionKind uint8

// The action kinds. Drop has no kind: a rule whose Actions is empty drops.
const (
	ActOutput    ActionKind = iota + 1 // output:Port
	ActOutputReg                       // output:Src (a register subfield)
	ActInPort                          // in_port: output to the input port
	ActGotoTable                       // goto_table:Table (last, forward only)
	ActResubmit                        // resubmit(,Table)
	ActLoad                            // load:Value->Dst
	ActMove                            // move:Src->Dst
	ActSetField                        // set_field:Value->Dst (whole field)
	ActNote                            // note:Note
	ActCT                              // ct(...): CT
	ActCTClear                         // ct_clear
)

// Field names a field that actions read or write.
type Field uint8

// The fields actions can address. Width gives their size in bits.
const (
	FieldNone Field = iota
	FieldReg0
	FieldReg1
	FieldReg2
	FieldReg3
	FieldReg4
	FieldReg5
	FieldReg6
	FieldReg7
	FieldTunID
	FieldTunSrc
	FieldTunDst
	FieldEthDst
	FieldEthSrc // read only
	FieldNwSrc  // read only
	FieldNwDst  // read only
	FieldInPort // read only
	numFields
)

type fieldInfo struct {
	nxm, oxm string // NXM name (load/move) and short name (set_field)
	width    uint8
	writable bool
	kind     kind
}

var fieldInfos = [numFields]fieldInfo{
	FieldReg0:   {"NXM_NX_REG0", "reg0", 32, true, kHex},
	FieldReg1:   {"NXM_NX_REG1", "reg1", 32, true, kHex},
	FieldReg2:   {"NXM_NX_REG2", "reg2", 32, true, kHex},
	FieldReg3:   {"NXM_NX_REG3", "reg3", 32, true, kHex},
	FieldReg4:   {"NXM_NX_REG4", "reg4", 32, true, kHex},
	FieldReg5:   {"NXM_NX_REG5", "reg5", 32, true, kHex},
	FieldReg6:   {"NXM_NX_REG6", "reg6", 32, true, kHex},
	FieldReg7:   {"NXM_NX_REG7", "reg7", 32, true, kHex},
	FieldTunID:  {"NXM_NX_TUN_ID", "tun_id", 64, true, kHex},
	FieldTunSrc: {"NXM_NX_TUN_IPV4_SRC", "tun_src", 32, true, kIP},
	FieldTunDst: {"NXM_NX_TUN_IPV4_DST", "tun_dst", 32, true, kIP},
	FieldEthDst: {"NXM_OF_ETH_DST", "eth_dst", 48, true, kMAC},
	FieldEthSrc: {"NXM_OF_ETH_SRC", "eth_src", 48, false, kMAC},
	FieldNwSrc:  {"NXM_OF_IP_SRC", "ip_src", 32, false, kIP},
	FieldNwDst:  {"NXM_OF_IP_DST", "ip_dst", 32, false, kIP},
	FieldInPort: {"NXM_OF_IN_PORT", "in_port", 16, false, kDec},
}

// String returns the field's NXM name.
func (f Field) String() string {
	if f == FieldNone || f >= numFields {
		return "Field(" + strconv.Itoa(int(f)) + ")"
	}
	return fieldInfos[f].nxm
}

// Width returns the field's width in bits.
func (f Field) Width() uint8 {
	if f >= numFields {
		return 0
	}
	return fieldInfos[f].width
}

func fieldByName(name string) Field {
	for i := FieldReg0; i < numFields; i++ {
		fi := &fieldInfos[i]
		if name == fi.nxm || name == fi.oxm {
			return i
		}
	}
	switch name {
	case "dl_dst", "OXM_OF_ETH_DST":
		return FieldEthDst
	case "dl_src", "OXM_OF_ETH_SRC":
		return FieldEthSrc
	case "nw_src":
		return FieldNwSrc
	case "nw_dst":
		return FieldNwDst
	case "tunnel_id":
		return FieldTunID
	}
	return FieldNone
}

// FieldRef is a bit range of a field: NBits bits starting at bit Ofs
// (bit 0 is the least significant), as in NXM_NX_REG0[Ofs..Ofs+NBits-1].
type FieldRef struct {
	Field Field
	Ofs   uint8
	NBits uint8
}

// String prints r in NXM subfield syntax: NXM_NX_REG0[], NXM_NX_REG0[3],
// NXM_NX_REG0[0..15].
func (r FieldRef) String() string {
	s := r.Field.String()
	switch {
	case r.Ofs == 0 && r.NBits == r.Field.Width():
		return s + "[]"
	case r.NBits == 1:
		return s + "[" + strconv.Itoa(int(r.Ofs)) + "]"
	}
	return s + "[" + strconv.Itoa(int(r.Ofs)) + ".." + strconv.Itoa(int(r.Ofs)+int(r.NBits)-1) + "]"
}

func (r FieldRef) mask() uint64 { return fullMask(uint(r.NBits)) }

// Action is one action of a rule. Which fields are meaningful depends on
// Kind (see the ActionKind constants).
type Action struct {
	Kind  ActionKind
	Port  uint32   // ActOutput
	Table uint8    // ActGotoTable, ActResubmit
	Value uint64   // ActLoad, ActSetField (MACs and IPv4 addresses big-endian)
	Src   FieldRef // ActMove, ActOutputReg
	Dst   FieldRef // ActLoad, ActMove, ActSetField
	Note  []byte   // ActNote
	CT    *CT      // ActCT (shared by copies of the Action; do not modify)
}

// String prints a in ovs-ofctl syntax.
func (a Action) String() string {
	switch a.Kind {
	case ActOutput:
		return "output:" + strconv.FormatUint(uint64(a.Port), 10)
	case ActOutputReg:
		return "output:" + a.Src.String()
	case ActInPort:
		return "in_port"
	case ActGotoTable:
		return "goto_table:" + strconv.Itoa(int(a.Table))
	case ActResubmit:
		return "resubmit(," + strconv.Itoa(int(a.Table)) + ")"
	case ActLoad:
		return "load:0x" + strconv.FormatUint(a.Value, 16) + "->" + a.Dst.String()
	case ActMove:
		return "move:" + a.Src.String() + "->" + a.Dst.String()
	case ActSetField:
		if a.Dst.Field == FieldNone || a.Dst.Field >= numFields {
			return "set_field:0x" + strconv.FormatUint(a.Value, 16) + "->" + a.Dst.Field.String()
		}
		fi := &fieldInfos[a.Dst.Field]
		var v string
		switch fi.kind {
		case kMAC:
			v = formatMAC(a.Value)
		case kIP:
			v = formatFieldValue(mTunDst, a.Value, fullMask(32))
		default:
			v = "0x" + strconv.FormatUint(a.Value, 16)
		}
		return "set_field:" + v + "->" + fi.oxm
	case ActNote:
		var b strings.Builder
		b.WriteString("note:")
		for i, c := range a.Note {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(hex.EncodeToString([]byte{c}))
		}
		return b.String()
	case ActCT:
		if a.CT == nil {
			return "ct()"
		}
		return a.CT.String()
	case ActCTClear:
		return "ct_clear"
	}
	return "unknown_action"
}

// formatActions prints a rule's action list ("drop" when empty).
func formatActions(b *strings.Builder, acts []Action) {
	if len(acts) == 0 {
		b.WriteString("drop")
		return
	}
	for i := range acts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(acts[i].String())
	}
}

// parseSubfield parses FIELD[], FIELD[n] or FIELD[a..b].
func parseSubfield(s string) (FieldRef, error) {
	name, rest, ok := strings.Cut(s, "[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return FieldRef{}, fmt.Errorf("bad subfield %q (want FIELD[], FIELD[n] or FIELD[a..b])", s)
	}
	f := fieldByName(name)
	if f == FieldNone {
		return FieldRef{}, fmt.Errorf("unknown field %q", name)
	}
	w := int(f.Width())
	rng := rest[:len(rest)-1]
	if rng == "" {
		return FieldRef{f, 0, uint8(w)}, nil
	}
	lo, hi, isRange := strings.Cut(rng, "..")
	a, err := strconv.Atoi(lo)
	if err != nil {
		return FieldRef{}, fmt.Errorf("bad bit range %q", rng)
	}
	b := a
	if isRange {
		if b, err = strconv.Atoi(hi); err != nil {
			return FieldRef{}, fmt.Errorf("bad bit range %q", rng)
		}
	}
	if a < 0 || b < a || b >= w {
		return FieldRef{}, fmt.Errorf("bit range %q out of %s's %d bits", rng, name, w)
	}
	return FieldRef{f, uint8(a), uint8(b - a + 1)}, nil
}

// splitActions splits an action list at commas and white space that are
// not inside parentheses or brackets, returning each action with its
// offset in s.
func splitActions(s string) (out []string, offs []int, err *SyntaxError) {
	depth, start := 0, -1
	for i := 0; i <= len(s); i++ {
		c := byte(',')
		if i < len(s) {
			c = s[i]
		}
		switch {
		case c == '(' || c == '[':
			depth++
		case c == ')' || c == ']':
			depth--
			if depth < 0 {
				return nil, nil, &SyntaxError{Col: i + 1, Msg: "unbalanced " + string(c)}
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			if start >= 0 {
				out = append(out, s[start:i])
				offs = append(offs, start)
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, nil, &SyntaxError{Col: len(s), Msg: "unbalanced parentheses or brackets"}
	}
	return out, offs, nil
}

// parseActions parses the text after "actions=". base is its offset in
// the whole rule, for error columns.
func parseActions(s string, base int) ([]Action, error) {
	toks, offs, serr := splitActions(s)
	if serr != nil {
		serr.Col += base
		return nil, serr
	}
	var acts []Action
	sawDrop := false
	for i, tok := range toks {
		if tok == "drop" {
			sawDrop = true
			continue
		}
		a, err := parseAction(tok)
		if err != nil {
			name, _, _ := strings.Cut(tok, "(")
			name, _, _ = strings.Cut(name, ":")
			return nil, &SyntaxError{Col: base + offs[i] + 1, Field: name, Msg: err.Error()}
		}
		acts = append(acts, a)
	}
	if sawDrop && len(acts) > 0 {
		return nil, &SyntaxError{Col: base + 1, Field: "drop", Msg: "drop must be the only action"}
	}
	for i := range acts {
		if acts[i].Kind == ActGotoTable && i != len(acts)-1 {
			return nil, &SyntaxError{Col: base + offs[i] + 1, Field: "goto_table", Msg: "goto_table must be the last action"}
		}
	}
	return acts, nil
}

func parseAction(tok string) (Action, error) {
	name, arg, hasArg := strings.Cut(tok, ":")
	if strings.HasPrefix(tok, "resubmit(") {
		name, arg, hasArg = "resubmit(", tok[len("resubmit("):], true
	}
	if tok == "ct" || strings.HasPrefix(tok, "ct(") {
		return parseCT(tok)
	}
	switch name {
	case "ct_clear":
		if !hasArg {
			return Action{Kind: ActCTClear}, nil
		}
	case "in_port", "IN_PORT":
		if !hasArg {
			return Action{Kind: ActInPort}, nil
		}
	case "output":
		return parseOutput(arg)
	case "goto_table":
		n, err := parseUint(arg, 8)
		if err != nil || n > 254 {
			return Action{}, fmt.Errorf("bad table %q (0-254)", arg)
		}
		return Action{Kind: ActGotoTable, Table: uint8(n)}, nil
	case "resubmit(":
		port, tbl, ok := strings.Cut(strings.TrimSuffix(arg, ")"), ",")
		if !ok || !strings.HasSuffix(arg, ")") {
			return Action{}, errors.New("want resubmit(,TABLE)")
		}
		if port != "" && port != "in_port" && port != "IN_PORT" {
			return Action{}, errors.New("resubmit to a port is not supported; use resubmit(,TABLE)")
		}
		n, err := parseUint(tbl, 8)
		if err != nil || n > 254 {
			return Action{}, fmt.Errorf("bad table %q (0-254)", tbl)
		}
		return Action{Kind: ActResubmit, Table: uint8(n)}, nil
	case "resubmit":
		return Action{}, errors.New("resubmit:PORT is not supported; use resubmit(,TABLE)")
	case "load":
		vs, ds, ok := strings.Cut(arg, "->")
		if !ok {
			return Action{}, errors.New("want load:VALUE->FIELD[bits]")
		}
		dst, err := parseSubfield(ds)
		if err != nil {
			return Action{}, err
		}
		if !fieldInfos[dst.Field].writable {
			return Action{}, fmt.Errorf("%s is read-only", dst.Field)
		}
		v, err := parseUint(vs, uint(dst.NBits))
		if err != nil {
			return Action{}, err
		}
		return Action{Kind: ActLoad, Value: v, Dst: dst}, nil
	case "move":
		ss, ds, ok := strings.Cut(arg, "->")
		if !ok {
			return Action{}, errors.New("want move:SRC[bits]->DST[bits]")
		}
		src, err := parseSubfield(ss)
		if err != nil {
			return Action{}, err
		}
		dst, err := parseSubfield(ds)
		if err != nil {
			return Action{}, err
		}
		if !fieldInfos[dst.Field].writable {
			return Action{}, fmt.Errorf("%s is read-only", dst.Field)
		}
		if src.NBits != dst.NBits {
			return Action{}, fmt.Errorf("source is %d bits but destination %d", src.NBits, dst.NBits)
		}
		return Action{Kind: ActMove, Src: src, Dst: dst}, nil
	case "set_field":
		vs, fs, ok := strings.Cut(arg, "->")
		if !ok {
			return Action{}, errors.New("want set_field:VALUE->FIELD")
		}
		return parseSetField(vs, fs)
	case "mod_dl_dst":
		return parseSetField(arg, "eth_dst")
	case "set_tunnel", "set_tunnel64":
		return parseSetField(arg, "tun_id")
	case "note":
		return parseNote(arg)
	}
	if n, err := strconv.ParseUint(tok, 10, 32); err == nil {
		return outputPort(n)
	}
	return Action{}, fmt.Errorf("unknown or unsupported action %q", tok)
}

func parseOutput(arg string) (Action, error) {
	if strings.Contains(arg, "[") {
		src, err := parseSubfield(arg)
		if err != nil {
			return Action{}, err
		}
		return Action{Kind: ActOutputReg, Src: src}, nil
	}
	if arg == "in_port" || arg == "IN_PORT" {
		return Action{Kind: ActInPort}, nil
	}
	n, err := parseUint(arg, 32)
	if err != nil {
		return Action{}, fmt.Errorf("bad port %q (numbers only; NORMAL, FLOOD, LOCAL and CONTROLLER are not supported)", arg)
	}
	return outputPort(n)
}

func outputPort(n uint64) (Action, error) {
	switch {
	case uint32(n) == PortInPort:
		return Action{Kind: ActInPort}, nil
	case n == 0 || n >= uint64(PortMax):
		return Action{}, fmt.Errorf("port %d is reserved or out of range", n)
	}
	return Action{Kind: ActOutput, Port: uint32(n)}, nil
}

func parseSetField(vs, fs string) (Action, error) {
	f := fieldByName(fs)
	if f == FieldNone {
		return Action{}, fmt.Errorf("unknown field %q", fs)
	}
	fi := &fieldInfos[f]
	if !fi.writable {
		return Action{}, fmt.Errorf("%s is read-only", fs)
	}
	var v uint64
	var err error
	switch fi.kind {
	case kMAC:
		v, err = parseMAC(vs)
	case kIP:
		v, err = parseIP(vs)
	default:
		v, err = parseUint(vs, uint(fi.width))
	}
	if err != nil {
		return Action{}, err
	}
	return Action{Kind: ActSetField, Value: v, Dst: FieldRef{f, 0, fi.width}}, nil
}

func parseNote(arg string) (Action, error) {
	h := strings.ReplaceAll(arg, ".", "")
	b, err := hex.DecodeString(h)
	if err != nil {
		return Action{}, fmt.Errorf("bad note %q (hex bytes, optionally separated by periods)", arg)
	}
	if len(b) == 0 {
		b = nil
	}
	return Action{Kind: ActNote, Note: b}, nil
}

// getField reads a field reference from f. Hot path: no allocation.
func getField(f *Fields, r FieldRef) uint64 {
	var v uint64
	switch r.Field {
	case FieldReg0, FieldReg1, FieldReg2, FieldReg3, FieldReg4, FieldReg5, FieldReg6, FieldReg7:
		v = uint64(f.Regs[r.Field-FieldReg0])
	case FieldTunID:
		v = f.TunID
	case FieldTunSrc:
		v = ip64(f.TunSrc)
	case FieldTunDst:
		v = ip64(f.TunDst)
	case FieldEthDst:
		v = mac64(f.EthDst)
	case FieldEthSrc:
		v = mac64(f.EthSrc)
	case FieldNwSrc:
		v = ip64(f.NwSrc)
	case FieldNwDst:
		v = ip64(f.NwDst)
	case FieldInPort:
		v = uint64(f.InPort & 0xffff)
	}
	return v >> r.Ofs & r.mask()
}

// setField writes val into a field reference of f. Hot path.
func setField(f *Fields, r FieldRef, val uint64) {
	m := r.mask() << r.Ofs
	val = val << r.Ofs & m
	switch r.Field {
	case FieldReg0, FieldReg1, FieldReg2, FieldReg3, FieldReg4, FieldReg5, FieldReg6, FieldReg7:
		p := &f.Regs[r.Field-FieldReg0]
		*p = uint32(uint64(*p)&^m | val)
	case FieldTunID:
		f.TunID = f.TunID&^m | val
	case FieldTunSrc:
		f.TunSrc = ipFrom64(ip64(f.TunSrc)&^m | val)
	case FieldTunDst:
		f.TunDst = ipFrom64(ip64(f.TunDst)&^m | val)
	case FieldEthDst:
		f.EthDst = macFrom64(mac64(f.EthDst)&^m | val)
	}
}
