package flowtable

import (
	"net/netip"
	"strconv"
	"strings"
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
	}
	return "DropReason(" + strconv.Itoa(int(d)) + ")"
}

// Trace is the record of one packet's way through a snapshot, as
// Snapshot.Trace makes it. It marshals to JSON as is; String renders it in
// the manner of ovs-appctl ofproto/trace.
type Trace struct {
	Bridge     string      `json:"bridge"`
	Generation uint64      `json:"generation"`
	Flow       string      `json:"flow"`
	Steps      []TraceStep `json:"steps"`
	FinalFlow  string      `json:"final_flow"`
	Out        []Output    `json:"outputs,omitempty"`
	Drop       string      `json:"drop,omitempty"`       // drop reason when nothing is output
	DropTable  uint8       `json:"drop_table,omitempty"` // table of the drop
	Datapath   string      `json:"datapath_actions"`
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
func (s *Snapshot) Trace(f Fields) Trace {
	t := Trace{Bridge: "gvs", Generation: s.gen, Flow: FormatFields(f)}
	var tr tracer
	var v Verdict
	s.run(&f, &v, &tr)
	t.Steps = tr.steps
	t.FinalFlow = FormatFields(f)
	t.Out = append([]Output(nil), v.Outputs[:v.NOut]...)
	if v.NOut == 0 {
		t.Drop = v.Drop.String()
		t.DropTable = v.Table
	}
	t.Datapath = datapathActions(&v)
	return t
}

func datapathActions(v *Verdict) string {
	if v.NOut == 0 {
		return "drop"
	}
	var parts []string
	for _, o := range v.Outputs[:v.NOut] {
		if o.SetEthDst {
			parts = append(parts, "set(eth(dst="+formatMAC(mac64(o.EthDst))+"))")
		}
		if o.TunDst != ([4]byte{}) {
			parts = append(parts, "set(tunnel(tun_id=0x"+strconv.FormatUint(o.TunID, 16)+",dst="+netip.AddrFrom4(o.TunDst).String()+"))")
		}
		parts = append(parts, strconv.FormatUint(uint64(o.Port), 10))
	}
	return strings.Join(parts, ",")
}

// String renders t like ovs-appctl ofproto/trace: the flow, each table with
// the rule matched and its actions (resubmits indented), the final flow and
// the datapath actions.
func (t Trace) String() string {
	var b strings.Builder
	b.WriteString("Flow: " + t.Flow + "\n\n")
	b.WriteString("bridge(\"" + t.Bridge + "\")\n")
	b.WriteString(strings.Repeat("-", len(t.Bridge)+10) + "\n")
	for _, st := range t.Steps {
		ind := strings.Repeat("    ", st.Depth)
		switch {
		case st.Continued:
		case st.Miss:
			b.WriteString(ind + pad(st.Table) + ". No match.\n" + ind + "    drop\n")
			continue
		case st.Loop:
			b.WriteString(ind + pad(st.Table) + ". Too many tables visited (more than " + strconv.Itoa(MaxHits) + "): dropping.\n")
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
	b.WriteString("\nFinal flow: " + t.FinalFlow + "\n")
	b.WriteString("Datapath actions: " + t.Datapath + "\n")
	if t.Drop != "" {
		b.WriteString("Dropped: " + t.Drop + " in table " + strconv.Itoa(int(t.DropTable)) + "\n")
	}
	return b.String()
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
	steps   []TraceStep
	depth   int
	cur     int
	cont    *Rule // rule whose actions resume after a resubmit
	prev    Fields
	prevOut int
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
