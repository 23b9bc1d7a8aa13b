package flowtable

// A packet's way through the pipeline (Snapshot.Run, RunFrom):
//
//  1. Start in table 0 with the Fields the caller extracted (in_port,
//     tunnel metadata, headers; registers zero, untracked), or, for a
//     recirculation after ct(table=N), in table N with the metadata the
//     ct action froze and the ct_* fields the tracker gave (RunFrom).
//  2. In each table, find the highest-priority matching rule (see
//     snapshot.go) and record it in Verdict.Hits. No match: the packet is
//     dropped there (DropTableMiss), or, inside a resubmit, the resubmit
//     does nothing.
//  3. Execute the rule's actions in order. load, move and set_field write
//     the Fields; output appends an Output that captures the tunnel
//     metadata (and a rewritten eth_dst) at that moment; resubmit(,N) runs
//     table N as in step 2 and then carries on with the next action;
//     goto_table:N (always last) continues in table N.
//     ct and ct_clear are recorded in Verdict.CT, with the outputs before
//     them and (for ct) the zone and the metadata a recirculation resumes
//     with; then the packet's ct_* fields are cleared, as OVS's
//     translation does after every ct action: what the tracker finds is
//     seen only by the recirculation (ovs-actions(7): ct forks the
//     pipeline). The run itself never calls the tracker, so its outcome
//     depends on Fields alone and the exact-match cache may keep it; the
//     caller runs the tracker for each step (see package vswitch).
//  4. Stop when a rule's actions end without goto_table. No outputs: drop
//     (DropAction), unless a ct action recirculated the packet. More than
//     MaxHits rules: drop everything (DropLoop); more than MaxCT ct
//     actions: drop everything (DropTooManyCT).

// runState is the per-run state that is not in Fields or Verdict.
type runState struct {
	ethSet    bool // a set_field/load/move wrote eth_dst
	missed    bool
	loop      bool
	overflow  bool
	ctFull    bool // more than MaxCT ct actions
	missTable uint8
	lastTable uint8
}

// Run runs f through the pipeline of s from table 0 and leaves the outcome
// in v (which it resets first). f's registers, tunnel fields and ct_*
// fields are modified. Run does not allocate and is safe for concurrent
// use with distinct f and v.
func (s *Snapshot) Run(f *Fields, v *Verdict) { s.run(0, f, v, nil) }

// RunFrom is Run starting in table t: a recirculation after ct(table=t),
// with f holding the metadata the ct step froze and the ct_* fields the
// tracker gave (Fields.SetConntrack).
func (s *Snapshot) RunFrom(t uint8, f *Fields, v *Verdict) { s.run(t, f, v, nil) }

func (s *Snapshot) run(t uint8, f *Fields, v *Verdict, tr *tracer) {
	v.NOut, v.NHits, v.NCT, v.Drop, v.Table = 0, 0, 0, DropNone, 0
	var st runState
	s.runTable(t, f, v, &st, tr)
	switch {
	case st.loop:
		v.NOut, v.NCT = 0, 0
		v.Drop = DropLoop
		v.Table = st.lastTable
	case st.ctFull:
		v.NOut, v.NCT = 0, 0
		v.Drop = DropTooManyCT
		v.Table = st.lastTable
	case v.NOut > 0:
		if st.overflow {
			v.Drop = DropTooManyOutputs
		}
	case v.Recirculates():
	case st.missed:
		v.Drop = DropTableMiss
		v.Table = st.missTable
	default:
		v.Drop = DropAction
		v.Table = st.lastTable
	}
}

// runTable looks up table tid and follows goto_table from there.
func (s *Snapshot) runTable(tid uint8, f *Fields, v *Verdict, st *runState, tr *tracer) {
	for {
		r := s.lookup(tid, f)
		if r == nil {
			st.missed = true
			st.missTable = tid
			if tr != nil {
				tr.miss(tid)
			}
			return
		}
		if v.NHits == MaxHits {
			st.loop = true
			st.lastTable = tid
			if tr != nil {
				tr.loop(tid)
			}
			return
		}
		v.Hits[v.NHits] = r
		v.NHits++
		st.lastTable = tid
		if tr != nil {
			tr.hit(r)
		}
		next, jump := s.exec(r, f, v, st, tr)
		if !jump || st.loop || st.ctFull {
			return
		}
		tid = next
	}
}

// exec runs r's actions; it returns the goto_table target, if any.
func (s *Snapshot) exec(r *Rule, f *Fields, v *Verdict, st *runState, tr *tracer) (uint8, bool) {
	acts := r.Actions
	for i := range acts {
		a := &acts[i]
		if tr != nil {
			tr.before(f, v)
		}
		switch a.Kind {
		case ActOutput:
			st.output(f, v, a.Port, false)
		case ActOutputReg:
			st.output(f, v, uint32(getField(f, a.Src)), false)
		case ActInPort:
			st.output(f, v, f.InPort, true)
		case ActGotoTable:
			if tr != nil {
				tr.action(a, f, v, st)
			}
			return a.Table, true
		case ActResubmit:
			if tr != nil {
				tr.action(a, f, v, st)
				tr.push()
			}
			s.runTable(a.Table, f, v, st, tr)
			if tr != nil {
				tr.pop(r)
			}
			if st.loop || st.ctFull {
				return 0, false
			}
			continue
		case ActCT, ActCTClear:
			if v.NCT == MaxCT {
				st.ctFull = true
				st.lastTable = r.Table
				if tr != nil {
					tr.tooManyCT(r.Table)
				}
				return 0, false
			}
			st.ctStep(a, f, v)
		case ActLoad, ActSetField:
			setField(f, a.Dst, a.Value)
			if a.Dst.Field == FieldEthDst {
				st.ethSet = true
			}
		case ActMove:
			setField(f, a.Dst, getField(f, a.Src))
			if a.Dst.Field == FieldEthDst {
				st.ethSet = true
			}
		}
		if tr != nil {
			tr.action(a, f, v, st)
		}
	}
	return 0, false
}

// ctStep records a ct or ct_clear action in v and clears f's ct_* fields:
// after a ct action the pipeline goes on untracked (the tracker's answer
// reaches only a recirculation).
func (st *runState) ctStep(a *Action, f *Fields, v *Verdict) {
	c := &v.CT[v.NCT]
	v.NCT++
	c.At = uint8(v.NOut)
	c.CT = nil
	if a.Kind == ActCT {
		c.CT = a.CT
		c.Zone = a.CT.Zone
		if a.CT.ZoneField.Field != FieldNone {
			c.Zone = uint16(getField(f, a.CT.ZoneField))
		}
		c.SetEthDst, c.EthDst = st.ethSet, f.EthDst
		c.TunSrc, c.TunDst, c.TunID, c.Regs = f.TunSrc, f.TunDst, f.TunID, f.Regs
	}
	f.ClearConntrack()
}

// output appends an output to v unless port is none, or is the input port
// and force (the in_port action) is not set.
func (st *runState) output(f *Fields, v *Verdict, port uint32, force bool) {
	if port == PortNone || (port == f.InPort && !force) {
		return
	}
	if v.NOut == MaxOutputs {
		st.overflow = true
		return
	}
	o := &v.Outputs[v.NOut]
	v.NOut++
	o.Port = port
	o.TunID = f.TunID
	o.TunDst = f.TunDst
	o.SetEthDst = st.ethSet
	if st.ethSet {
		o.EthDst = f.EthDst
	} else {
		o.EthDst = [6]byte{}
	}
}

// Account adds one packet of the given size to the counters of every rule
// the run hit. It is safe for concurrent use.
func (v *Verdict) Account(bytes int) {
	for _, r := range v.Hits[:v.NHits] {
		r.packets.Add(1)
		r.bytes.Add(uint64(bytes))
	}
}

// counterSlots is the size of a Counters' table (a power of two).
const counterSlots = 64

// Counters gathers rule hits for a batch of packets and adds them to the
// rules' counters in Flush: a packet costs a few plain additions instead
// of two atomic ones per rule it hit (packets of one flow hit the same
// rules). A hit whose slot holds another rule flushes that rule first.
// The counters a dump shows lag by at most a batch. Not safe for
// concurrent use: one per worker.
type Counters struct {
	slots [counterSlots]struct {
		r              *Rule
		packets, bytes uint64
	}
	used [counterSlots]uint8 // the slots in use, in order
	n    int
}

// Account records one packet of the given size for every rule v hit.
func (c *Counters) Account(v *Verdict, bytes int) {
	for _, r := range v.Hits[:v.NHits] {
		i := int(r.slot)
		s := &c.slots[i]
		if s.r != r {
			if s.r != nil {
				s.r.packets.Add(s.packets)
				s.r.bytes.Add(s.bytes)
			} else {
				c.used[c.n] = uint8(i)
				c.n++
			}
			s.r, s.packets, s.bytes = r, 0, 0
		}
		s.packets++
		s.bytes += uint64(bytes)
	}
}

// Flush adds what was gathered to the rules' counters.
func (c *Counters) Flush() {
	for _, i := range c.used[:c.n] {
		s := &c.slots[i]
		s.r.packets.Add(s.packets)
		s.r.bytes.Add(s.bytes)
		s.r = nil
	}
	c.n = 0
}
