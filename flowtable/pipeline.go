package flowtable

// A packet's way through the pipeline (Snapshot.Run):
//
//  1. Start in table 0 with the Fields the caller extracted (in_port,
//     tunnel metadata, headers; registers zero).
//  2. In each table, find the highest-priority matching rule (see
//     snapshot.go) and record it in Verdict.Hits. No match: the packet is
//     dropped there (DropTableMiss), or, inside a resubmit, the resubmit
//     does nothing.
//  3. Execute the rule's actions in order. load, move and set_field write
//     the Fields; output appends an Output that captures the tunnel
//     metadata (and a rewritten eth_dst) at that moment; resubmit(,N) runs
//     table N as in step 2 and then carries on with the next action;
//     goto_table:N (always last) continues in table N.
//  4. Stop when a rule's actions end without goto_table. No outputs: drop
//     (DropAction). More than MaxHits rules: drop everything (DropLoop).

// runState is the per-run state that is not in Fields or Verdict.
type runState struct {
	ethSet    bool // a set_field/load/move wrote eth_dst
	missed    bool
	loop      bool
	overflow  bool
	missTable uint8
	lastTable uint8
}

// Run runs f through the pipeline of s and leaves the outcome in v (which
// it resets first). f's registers and tunnel fields are modified. Run does
// not allocate and is safe for concurrent use with distinct f and v.
func (s *Snapshot) Run(f *Fields, v *Verdict) { s.run(f, v, nil) }

func (s *Snapshot) run(f *Fields, v *Verdict, tr *tracer) {
	v.NOut, v.NHits, v.Drop, v.Table = 0, 0, DropNone, 0
	var st runState
	s.runTable(0, f, v, &st, tr)
	switch {
	case st.loop:
		v.NOut = 0
		v.Drop = DropLoop
		v.Table = st.lastTable
	case v.NOut > 0:
		if st.overflow {
			v.Drop = DropTooManyOutputs
		}
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
		if !jump || st.loop {
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
			if st.loop {
				return 0, false
			}
			continue
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
