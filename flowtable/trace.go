package flowtable

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gvswitch/gvs/conntrack"
)

// String returns the drop reason's name as used in counters and traces.
func (d DropReason) String() string {
	switch d {
	case DropNone:
		return "none"
	case DropTableMiss:
		return "table_miss"
	case DropAction:
		return "action"
	case DropLoop:
		return "loop"
	case DropTooManyOutputs:
		return "too_many_outputs"
	case DropTooManyCT:
		return "too_many_ct"
	}
	return "DropReason(" + strconv.Itoa(int(d)) + ")"
}

// Trace is the record of one packet's way through a snapshot, as
// Snapshot.Trace makes it. It marshals to JSON as is; String renders it in
// the manner of ovs-appctl ofproto/trace. The embedded TracePass is the
// packet's first pass, from table 0; every ct(table=N) it meets adds a
// recirculation, traced after it in Recirc (as ofproto/trace lists them).
type Trace struct {
	Bridge     string `json:"bridge"`
	Generation uint64 `json:"generation"`
	TracePass
	Recirc []TraceRecirc `json:"recirculations,omitempty"`
}

// TracePass is one run of the pipeline in a trace: the flow it started
// with, the tables it visited, its outputs or its drop.
type TracePass struct {
	Flow      string      `json:"flow"`
	Steps     []TraceStep `json:"steps"`
	FinalFlow string      `json:"final_flow"`
	Out       []Output    `json:"outputs,omitempty"`
	Drop      string      `json:"drop,omitempty"`       // drop reason when nothing is output
	DropTable uint8       `json:"drop_table,omitempty"` // table of the drop
	Datapath  string      `json:"datapath_actions"`
}

// TraceRecirc is one recirculation after a ct action with table=: which
// pass made it (From: 0 for the first pass, else the ID of a
// recirculation), the table it resumes in, the ct_state it resumes with
// and where that came from: "tracker" (TraceOptions.Conntrack looked up:
// Conn is the connection found, "" for none), "ct-next"
// (TraceOptions.CTNext) or "default" (trk|new, as ofproto/trace assumes).
// NAT describes the translation simulated on the recirculated packet, if
// any.
type TraceRecirc struct {
	ID     int    `json:"id"`
	From   int    `json:"from"`
	Table  uint8  `json:"table"`
	Zone   uint16 `json:"zone"`
	State  string `json:"ct_state"`
	Source string `json:"source"`
	Conn   string `json:"connection,omitempty"`
	NAT    string `json:"nat,omitempty"`
	Depth  int    `json:"depth"`
	Drop   bool   `json:"dropped,omitempty"` // deeper than MaxRecirc: not run
	TracePass
}

// TraceOptions say how Snapshot.TraceWith treats ct actions. The zero
// value traces as ovs-appctl ofproto/trace does without --ct-next: each
// recirculation resumes with ct_state=trk|new.
type TraceOptions struct {
	// Conntrack, when set, is asked (conntrack.Tracker.Peek: nothing in
	// it changes) what each ct action would find for the traced packet;
	// the recirculations resume with that state, mark, label and
	// original tuple, translated as the connection is.
	Conntrack *conntrack.Tracker
	// CTNext are the ct_state values the recirculations resume with, in
	// the order they are traced (ofproto/trace --ct-next); they take
	// precedence over Conntrack. When they run out, Conntrack or the
	// default applies.
	CTNext []conntrack.State
}

// TraceStep is one table visited: the rule matched (or a miss) and the
// actions executed. After a resubmit returns, the rest of the resubmitting
// rule's actions appear in a step with Continued set. Depth counts the
// enclosing resubmits.
type TraceStep struct {
	Depth     int           `json:"depth"`
	Table     uint8         `json:"table"`
	Miss      bool          `json:"miss,omitempty"`
	Loop      bool          `json:"loop,omitempty"`
	TooManyCT bool          `json:"too_many_ct,omitempty"`
	Continued bool          `json:"continued,omitempty"`
	Rule      string        `json:"rule,omitempty"`
	Match     string        `json:"match,omitempty"`
	Priority  uint16        `json:"priority"`
	Cookie    uint64        `json:"cookie,omitempty"`
	Actions   []TraceAction `json:"actions,omitempty"`
}

// TraceAction is one executed action with the field changes it made and,
// for outputs, what became of it.
type TraceAction struct {
	Action  string   `json:"action"`
	Changes []string `json:"changes,omitempty"`
	Result  string   `json:"result,omitempty"`
}

// Outputs returns the trace's outputs.
func (t Trace) Outputs() []Output { return t.Out }

// Trace runs f through s, recording every step. It allocates; it is for
// operators, not for the packet path. Rule counters are not touched.
// Recirculations resume with ct_state=trk|new (see TraceWith).
func (s *Snapshot) Trace(f Fields) Trace { return s.TraceWith(f, TraceOptions{}) }

// TraceWith is Trace with ct actions treated as o says: what the tracker
// would find, or states given by the operator. Recirculations are traced
// in the order they are made, breadth first, at most MaxRecirc deep, as
// the switch would run them (it runs them depth first; the set is the
// same).
func (s *Snapshot) TraceWith(f Fields, o TraceOptions) Trace {
	t := Trace{Bridge: "gvs", Generation: s.gen}
	tc := &traceCtx{opts: o, now: 0}
	if o.Conntrack != nil {
		tc.now = o.Conntrack.Now()
	}
	t.TracePass = s.tracePass(0, f, tc, 0, 0)
	for len(tc.queue) > 0 {
		r := tc.queue[0]
		tc.queue = tc.queue[1:]
		if r.Depth > MaxRecirc {
			r.Drop = true
			r.Flow = FormatFields(r.f)
			r.Datapath = "drop"
			t.Recirc = append(t.Recirc, r.TraceRecirc)
			continue
		}
		r.TracePass = s.tracePass(r.Table, r.f, tc, r.ID, r.Depth)
		t.Recirc = append(t.Recirc, r.TraceRecirc)
	}
	return t
}

// traceCtx is what the passes of one trace share: the options, the
// recirculations still to trace and the next recirculation ID.
type traceCtx struct {
	opts   TraceOptions
	now    conntrack.Time
	queue  []pendingRecirc
	nextID int
}

type pendingRecirc struct {
	TraceRecirc
	f Fields
}

// tracePass runs one pass of a trace from table tid.
func (s *Snapshot) tracePass(tid uint8, f Fields, tc *traceCtx, id, depth int) TracePass {
	p := TracePass{Flow: FormatFields(f)}
	tr := tracer{ctx: tc, pass: id, depth0: depth}
	var v Verdict
	s.run(tid, &f, &v, &tr)
	p.Steps = tr.steps
	p.FinalFlow = FormatFields(f)
	p.Out = append([]Output(nil), v.Outputs[:v.NOut]...)
	if v.NOut == 0 && v.Drop != DropNone {
		p.Drop = v.Drop.String()
		p.DropTable = v.Table
	}
	p.Datapath = datapathActions(&v, tr.recircIDs)
	return p
}

// datapathActions lists what the switch does with the packet after a
// pass: its outputs and, in between, its ct steps (ct(...) as the tracker
// gets it, recirc(ID) for a recirculation, ct_clear).
func datapathActions(v *Verdict, recircIDs []int) string {
	if v.NOut == 0 && v.NCT == 0 {
		return "drop"
	}
	var parts []string
	k := 0
	ctUpTo := func(at int) {
		for ; k < v.NCT && int(v.CT[k].At) <= at; k++ {
			c := &v.CT[k]
			if c.CT == nil {
				parts = append(parts, "ct_clear")
				continue
			}
			parts = append(parts, datapathCT(c))
			if k < len(recircIDs) && recircIDs[k] > 0 {
				parts = append(parts, "recirc("+strconv.Itoa(recircIDs[k])+")")
			}
		}
	}
	for i, o := range v.Outputs[:v.NOut] {
		ctUpTo(i)
		if o.SetEthDst {
			parts = append(parts, "set(eth(dst="+formatMAC(mac64(o.EthDst))+"))")
		}
		if o.TunDst != ([4]byte{}) {
			parts = append(parts, "set(tunnel(tun_id=0x"+strconv.FormatUint(o.TunID, 16)+",dst="+netip.AddrFrom4(o.TunDst).String()+"))")
		}
		parts = append(parts, strconv.FormatUint(uint64(o.Port), 10))
	}
	ctUpTo(v.NOut)
	if len(parts) == 0 {
		return "drop"
	}
	return strings.Join(parts, ",")
}

// datapathCT prints a ct step as the tracker is asked to carry it out:
// ct(commit,zone=5,nat(src=…)) with the zone resolved, no table= and no
// exec (their effect is the recirculation and the connection's mark and
// label), as ofproto/trace's datapath actions show it.
func datapathCT(c *CTStep) string {
	var args []string
	if c.CT.Commit {
		args = append(args, "commit")
	}
	if c.CT.Force {
		args = append(args, "force")
	}
	if c.Zone != 0 {
		args = append(args, "zone="+strconv.Itoa(int(c.Zone)))
	}
	a := c.CT.Action()
	if a.SetMark {
		args = append(args, "mark="+formatHexC(uint64(a.Mark))+"/"+formatHexC(uint64(a.MarkMask)))
	}
	if a.SetLabel {
		args = append(args, "label="+formatHex128(a.Label)+"/"+formatHex128(a.LabelMask))
	}
	if n := c.CT.NAT.String(); n != "" {
		args = append(args, n)
	}
	if len(args) == 0 {
		return "ct"
	}
	return "ct(" + strings.Join(args, ",") + ")"
}

// String renders t like ovs-appctl ofproto/trace: the flow, each table with
// the rule matched and its actions (resubmits indented), the final flow and
// the datapath actions; then each recirculation in a section of its own.
func (t Trace) String() string {
	var b strings.Builder
	t.TracePass.render(&b, t.Bridge, 0)
	for _, r := range t.Recirc {
		b.WriteString("\n" + strings.Repeat("=", 79) + "\n")
		b.WriteString("recirc(" + strconv.Itoa(r.ID) + ") - resume conntrack with ")
		switch r.Source {
		case "default":
			b.WriteString("default ct_state=" + r.State + " (use --ct-next to customize)")
		case "ct-next":
			b.WriteString("ct_state=" + r.State + " (from --ct-next)")
		default:
			b.WriteString("ct_state=" + r.State + " (from the tracker, zone " + strconv.Itoa(int(r.Zone)) + ")")
		}
		b.WriteString("\n")
		if r.Source == "tracker" {
			if r.Conn != "" {
				b.WriteString("Connection: " + r.Conn + "\n")
			} else {
				b.WriteString("Connection: none\n")
			}
		}
		if r.NAT != "" {
			b.WriteString("Simulated NAT: " + r.NAT + "\n")
		}
		b.WriteString(strings.Repeat("=", 79) + "\n\n")
		if r.Drop {
			b.WriteString("Flow: " + r.Flow + "\n\nRecirculated more than " + strconv.Itoa(MaxRecirc) +
				" times: dropped.\nDatapath actions: drop\n")
			continue
		}
		r.TracePass.render(&b, t.Bridge, int(r.Table)+1)
	}
	return b.String()
}

// render writes one pass; resume is 0 for the first pass, else the table
// the recirculation resumes in plus one.
func (p *TracePass) render(b *strings.Builder, bridge string, resume int) {
	b.WriteString("Flow: " + p.Flow + "\n\n")
	b.WriteString("bridge(\"" + bridge + "\")\n")
	b.WriteString(strings.Repeat("-", len(bridge)+10) + "\n")
	if resume > 0 {
		b.WriteString("    thaw\n        Resuming from table " + strconv.Itoa(resume-1) + "\n")
	}
	for _, st := range p.Steps {
		ind := strings.Repeat("    ", st.Depth)
		switch {
		case st.Continued:
		case st.Miss:
			b.WriteString(ind + pad(st.Table) + ". No match.\n" + ind + "    drop\n")
			continue
		case st.Loop:
			b.WriteString(ind + pad(st.Table) + ". Too many tables visited (more than " + strconv.Itoa(MaxHits) + "): dropping.\n")
			continue
		case st.TooManyCT:
			b.WriteString(ind + pad(st.Table) + ". More than " + strconv.Itoa(MaxCT) + " ct actions: dropping.\n")
			continue
		default:
			m := st.Match
			if m != "" {
				m += ", "
			}
			b.WriteString(ind + pad(st.Table) + ". " + m + "priority " + strconv.Itoa(int(st.Priority)))
			if st.Cookie != 0 {
				b.WriteString(", cookie 0x" + strconv.FormatUint(st.Cookie, 16))
			}
			b.WriteString("\n")
			if len(st.Actions) == 0 {
				b.WriteString(ind + "    drop\n")
			}
		}
		for _, a := range st.Actions {
			b.WriteString(ind + "    " + a.Action + "\n")
			for _, c := range a.Changes {
				b.WriteString(ind + "     -> " + c + "\n")
			}
			if a.Result != "" {
				b.WriteString(ind + "     -> " + a.Result + "\n")
			}
		}
	}
	b.WriteString("\nFinal flow: " + p.FinalFlow + "\n")
	b.WriteString("Datapath actions: " + p.Datapath + "\n")
	if p.Drop != "" {
		b.WriteString("Dropped: " + p.Drop + " in table " + strconv.Itoa(int(p.DropTable)) + "\n")
	}
}

func pad(t uint8) string {
	s := strconv.Itoa(int(t))
	if len(s) < 2 {
		s = " " + s
	}
	return s
}

// tracer collects a Trace while the pipeline runs (see Snapshot.run).
type tracer struct {
	ctx       *traceCtx
	pass      int   // this pass's recirculation ID (0: the first pass)
	depth0    int   // how many recirculations deep this pass is
	recircIDs []int // per ct step of the pass: the recirculation it made, 0 for none
	steps     []TraceStep
	depth     int
	cur       int
	cont      *Rule // rule whose actions resume after a resubmit
	prev      Fields
	prevOut   int
}

func (t *tracer) add(st TraceStep) {
	t.steps = append(t.steps, st)
	t.cur = len(t.steps) - 1
	t.cont = nil
}

func (t *tracer) hit(r *Rule) {
	t.add(TraceStep{Depth: t.depth, Table: r.Table, Rule: r.String(), Match: r.Match.String(), Priority: r.Priority, Cookie: r.Cookie})
}

func (t *tracer) miss(tid uint8) { t.add(TraceStep{Depth: t.depth, Table: tid, Miss: true}) }

func (t *tracer) loop(tid uint8) { t.add(TraceStep{Depth: t.depth, Table: tid, Loop: true}) }

func (t *tracer) tooManyCT(tid uint8) { t.add(TraceStep{Depth: t.depth, Table: tid, TooManyCT: true}) }

func (t *tracer) push() { t.depth++ }

func (t *tracer) pop(r *Rule) {
	t.depth--
	t.cont = r
}

func (t *tracer) before(f *Fields, v *Verdict) {
	t.prev = *f
	t.prevOut = v.NOut
}

func (t *tracer) action(a *Action, f *Fields, v *Verdict, st *runState) {
	if t.cont != nil {
		r := t.cont
		t.add(TraceStep{Depth: t.depth, Table: r.Table, Continued: true, Rule: r.String(), Match: r.Match.String(), Priority: r.Priority, Cookie: r.Cookie})
	}
	ta := TraceAction{Action: a.String()}
	p := &t.prev
	for i := range f.Regs {
		if f.Regs[i] != p.Regs[i] {
			ta.Changes = append(ta.Changes, "reg"+strconv.Itoa(i)+"=0x"+strconv.FormatUint(uint64(f.Regs[i]), 16)+" (was 0x"+strconv.FormatUint(uint64(p.Regs[i]), 16)+")")
		}
	}
	if f.TunID != p.TunID {
		ta.Changes = append(ta.Changes, "tun_id=0x"+strconv.FormatUint(f.TunID, 16)+" (was 0x"+strconv.FormatUint(p.TunID, 16)+")")
	}
	if f.TunSrc != p.TunSrc {
		ta.Changes = append(ta.Changes, "tun_src="+netip.AddrFrom4(f.TunSrc).String())
	}
	if f.TunDst != p.TunDst {
		ta.Changes = append(ta.Changes, "tun_dst="+netip.AddrFrom4(f.TunDst).String())
	}
	if f.EthDst != p.EthDst {
		ta.Changes = append(ta.Changes, "eth_dst="+formatMAC(mac64(f.EthDst)))
	}
	switch a.Kind {
	case ActCT, ActCTClear:
		ta.Changes = append(ta.Changes, t.ctStep(v, f)...)
	case ActOutput, ActOutputReg, ActInPort:
		if v.NOut > t.prevOut {
			o := v.Outputs[v.NOut-1]
			ta.Result = "output to port " + strconv.FormatUint(uint64(o.Port), 10)
			if o.TunDst != ([4]byte{}) {
				ta.Result += " (tunnel tun_id=0x" + strconv.FormatUint(o.TunID, 16) + " dst=" + netip.AddrFrom4(o.TunDst).String() + ")"
			}
		} else if st.overflow && v.NOut == MaxOutputs {
			ta.Result = "dropped: more than " + strconv.Itoa(MaxOutputs) + " outputs"
		} else if a.Kind == ActOutputReg && getField(f, a.Src) == 0 {
			ta.Result = "skipped: port 0"
		} else {
			ta.Result = "skipped: output to in_port (only the in_port action sends back)"
		}
	}
	if t.cur >= 0 && t.cur < len(t.steps) {
		t.steps[t.cur].Actions = append(t.steps[t.cur].Actions, ta)
	}
}

const untrackedNote = "Sets the packet to an untracked state, and clears all the conntrack fields."

// ctStep describes the ct or ct_clear step the pass has just recorded
// (the last of v.CT) and, for a ct action with table=, queues the
// recirculation it makes. f is the packet's fields at the action.
func (t *tracer) ctStep(v *Verdict, f *Fields) []string {
	k := v.NCT - 1
	for len(t.recircIDs) <= k {
		t.recircIDs = append(t.recircIDs, 0)
	}
	c := &v.CT[k]
	if c.CT == nil {
		return []string{untrackedNote}
	}
	tc := t.ctx
	zone := "zone " + strconv.Itoa(int(c.Zone))
	var lines []string
	m := conntrack.Meta{State: conntrack.StateTrk | conntrack.StateNew, Zone: c.Zone}
	var found, reply bool
	var e conntrack.Entry
	if tc.opts.Conntrack != nil {
		a := *c.CT.Action()
		a.Zone = c.Zone
		switch {
		case f.EthType != 0x0800:
			m = conntrack.Meta{State: conntrack.StateTrk | conntrack.StateInv, Zone: c.Zone}
			lines = append(lines, "tracker, "+zone+": not IPv4, so +inv")
		default:
			e, reply, found = tc.opts.Conntrack.Peek(tc.now, traceTuple(f), &a, &m)
			state := formatCtState(uint64(m.State), 0xff)
			switch {
			case found && reply:
				lines = append(lines, "tracker, "+zone+": found "+e.String()+" (reply direction): ct_state="+state)
			case found:
				lines = append(lines, "tracker, "+zone+": found "+e.String()+" (original direction): ct_state="+state)
			case c.CT.Commit:
				lines = append(lines, "tracker, "+zone+": no connection: ct_state="+state+"; this commit would make one")
			default:
				lines = append(lines, "tracker, "+zone+": no connection: ct_state="+state)
			}
		}
	}
	if !c.CT.Recirc {
		return append(lines, untrackedNote)
	}
	r := TraceRecirc{From: t.pass, Table: c.CT.Table, Zone: c.Zone, Depth: t.depth0 + 1}
	switch {
	case len(tc.opts.CTNext) > 0:
		st := tc.opts.CTNext[0]
		tc.opts.CTNext = tc.opts.CTNext[1:]
		if tc.opts.Conntrack == nil {
			m = conntrack.Meta{Zone: c.Zone}
		}
		m.State = st
		r.Source = "ct-next"
	case tc.opts.Conntrack != nil:
		r.Source = "tracker"
		if found {
			r.Conn = e.String()
		}
	default:
		r.Source = "default"
	}
	r.State = formatCtState(uint64(m.State), 0xff)
	rf := *f
	rf.Regs, rf.TunID, rf.TunSrc, rf.TunDst = c.Regs, c.TunID, c.TunSrc, c.TunDst
	if c.SetEthDst {
		rf.EthDst = c.EthDst
	}
	rf.SetConntrack(&m)
	if c.CT.NAT.Kind != conntrack.NATNone && m.State&(conntrack.StateSNAT|conntrack.StateDNAT) != 0 {
		r.NAT = simulateNAT(&rf, c.CT, m.State, found && r.Source == "tracker", reply, &e)
	}
	tc.nextID++
	r.ID = tc.nextID
	t.recircIDs[k] = r.ID
	tc.queue = append(tc.queue, pendingRecirc{TraceRecirc: r, f: rf})
	lines = append(lines, "A clone of the packet is forked to recirculate. The forked pipeline will be resumed at table "+
		strconv.Itoa(int(c.CT.Table))+" (recirc("+strconv.Itoa(r.ID)+")).")
	return append(lines, untrackedNote)
}

// traceTuple is the tuple the tracker would see for f (ICMP: its type and
// code; the identifier is not among the fields and is taken as 0).
func traceTuple(f *Fields) conntrack.Tuple {
	return conntrack.Tuple{Src: f.NwSrc, Dst: f.NwDst, Proto: f.NwProto, SrcPort: f.TpSrc, DstPort: f.TpDst}
}

// simulateNAT rewrites the recirculated packet's addresses and ports as
// the ct action's nat would: to the connection's translated tuple when the
// tracker found one, else (as ofproto/trace does) to the first address
// and port of the action's range. It returns what it did, "" for nothing.
func simulateNAT(f *Fields, c *CT, st conntrack.State, fromConn, reply bool, e *conntrack.Entry) string {
	before := conntrack.Tuple{Src: f.NwSrc, Dst: f.NwDst, SrcPort: f.TpSrc, DstPort: f.TpDst, Proto: f.NwProto}
	ports := f.NwProto == 6 || f.NwProto == 17
	if fromConn {
		// A packet leaves translated as the other direction's tuple
		// reversed.
		o := e.Reply
		if reply {
			o = e.Orig
		}
		f.NwSrc, f.NwDst = o.Dst, o.Src
		if ports {
			f.TpSrc, f.TpDst = o.DstPort, o.SrcPort
		}
	} else {
		n := &c.NAT
		if n.MinAddr == ([4]byte{}) {
			return ""
		}
		switch {
		case st&conntrack.StateSNAT != 0 && n.Kind == conntrack.NATSrc:
			f.NwSrc = n.MinAddr
			if ports && n.MinPort != 0 {
				f.TpSrc = n.MinPort
			}
		case st&conntrack.StateDNAT != 0 && n.Kind == conntrack.NATDst:
			f.NwDst = n.MinAddr
			if ports && n.MinPort != 0 {
				f.TpDst = n.MinPort
			}
		default:
			return ""
		}
	}
	after := conntrack.Tuple{Src: f.NwSrc, Dst: f.NwDst, SrcPort: f.TpSrc, DstPort: f.TpDst, Proto: f.NwProto}
	if after == before {
		return ""
	}
	return before.String() + " -> " + after.String()
}

// ParseCTState parses a connection-tracking state as
// ovs-appctl ofproto/trace --ct-next takes it: flags joined by |
// ("trk|est"), flags each after a + ("+trk+est"), or a number ("0x22").
// Errors wrap ErrSyntax.
func ParseCTState(s string) (conntrack.State, error) {
	v, m, err := parseCtState(s)
	if err == nil && (strings.Contains(s, "/") || m != 0xff && v != m) {
		err = errors.New("a state, not a match: no masks, no - flags")
	}
	if err != nil {
		return 0, &SyntaxError{Col: 1, Field: "ct_state", Msg: err.Error()}
	}
	return conntrack.State(v), nil
}

// ParseTrace parses what gvsctl trace sends: a packet description for
// ParseFields whose items may include ct_next=STATE (in ParseCTState's
// syntax; repeated for later recirculations, in order), which become
// TraceOptions.CTNext.
func ParseTrace(desc string) (Fields, TraceOptions, error) {
	var o TraceOptions
	var rest []string
	for _, item := range strings.FieldsFunc(desc, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		v, ok := strings.CutPrefix(item, "ct_next=")
		if !ok {
			rest = append(rest, item)
			continue
		}
		st, err := ParseCTState(v)
		if err != nil {
			return Fields{}, o, err
		}
		o.CTNext = append(o.CTNext, st)
	}
	f, err := ParseFields(strings.Join(rest, ","))
	return f, o, err
}
