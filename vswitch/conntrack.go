package vswitch

// Connection tracking in the worker. A frame whose verdict has ct steps
// (flowtable.Verdict.CT) takes this way instead of route:
//
//  1. Once per batch (process): when the snapshot has ct actions, read the
//     tracker's clock and hand the batch's IPv4 packets to Prefetch, so
//     that the table's cache misses overlap.
//  2. The pass's verdict is carried out in order (runCT): its outputs up to
//     the next ct step are queued with the frame's flow hash; before the
//     step they are copied out (settle), since the frame may change. A
//     ct_clear forgets the packet's tracking (conntrack.Meta.Clear). A ct
//     writes a pending eth_dst into the frame (as OVS commits header
//     changes before ct), then conntrack.Tracker.Process runs on the IPv4
//     packet in the frame (Ethernet stripped; CsumPartial from the
//     virtio header, CsumVerified when the port checked the checksums on
//     reading, port.Meta.CsumVerified: the payload is not summed twice;
//     super-frames whole), which rewrites it in place for
//     NAT; the frame's headers are extracted again when it did.
//  3. A ct with table=N recirculates: the pipeline runs from table N (behind
//     the same cache, keyed by the table and the ct_* fields) with the
//     metadata the step froze and the ct_* fields of the tracker's Meta,
//     and its verdict is carried out the same way, one level deeper (at
//     most flowtable.MaxRecirc). When the pass has more to do after the
//     step, the recirculation works on a copy of the frame and of its
//     Meta (OVS clones the packet); otherwise it takes the frame over.
//  4. When a copy's work is done, and at the end for the frame itself, the
//     queued outputs are routed: the last takes the buffer, the others
//     copies. A frame that produced no output at all is counted once as
//     dropped, for the reason of the last pass that dropped it (a firewall
//     drop in the recirculated table is a drop in that table).
//
// Nothing here allocates; the worker owns every buffer and Meta it uses.

import (
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
)

// maxFrameOutputs is the most outputs one frame may queue across its
// recirculations; more are dropped (DropTooManyOutputs).
const maxFrameOutputs = 4 * flowtable.MaxOutputs

// ctWorker is a worker's connection-tracking state, owned by its goroutine.
type ctWorker struct {
	t   *conntrack.Tracker // nil: the switch has none
	now conntrack.Time     // the batch's time
	pf  [][]byte           // the batch's IPv4 packets, for Prefetch

	// Per recirculation depth: the Meta of the packet (or its copy), the
	// frame's current header fields, and the verdicts of recirculations
	// (vs[d-1] for depth d).
	meta [flowtable.MaxRecirc + 1]conntrack.Meta
	hdr  [flowtable.MaxRecirc + 1]flowtable.Fields
	vs   [flowtable.MaxRecirc]flowtable.Verdict
	rf   flowtable.Fields // a recirculation's fields, consumed by its run
	act  conntrack.Action // a ct action with its zone from a register

	// The frame being handled: outputs queued since the last settle,
	// how many it queued in all, and why it would count as dropped.
	outq      []queuedOutput
	outs      int
	dropped   bool // a pass ended without output and without recirculating
	drop      DropReason
	dropTable uint8
	pipeDrop  bool // drop came from the pipeline (counted by table too)
	// verified: the port that read the frame checked its IPv4 header
	// and L4 checksums (port.Meta.CsumVerified). Its copies for
	// recirculations have the same bytes, and the tracker's NAT keeps
	// the sums valid, so it holds for every ct step of the frame.
	verified bool
}

// queuedOutput is an output of the frame not yet routed, with the flow
// hash of the frame as it was when the output was made.
type queuedOutput struct {
	o    flowtable.Output
	hash uint32
}

func (c *ctWorker) init(t *conntrack.Tracker, batch int) {
	c.t = t
	c.outq = make([]queuedOutput, 0, maxFrameOutputs)
	if t != nil {
		c.pf = make([][]byte, batch)
	}
}

// prefetch reads the tracker's clock for the batch and prefetches the
// connections of its first n frames that are IPv4.
func (w *worker) prefetch(n int) {
	c := &w.ct
	c.now = c.t.Now()
	k := 0
	for i := range n {
		size := w.meta[i].Size
		if size < packet.EthernetLen+packet.IPv4MinLen || size > len(w.bufs[i])-Headroom {
			continue
		}
		frame := w.bufs[i][Headroom : Headroom+size]
		if packet.Ethernet(frame).Type() == packet.EtherTypeIPv4 {
			c.pf[k] = frame[packet.EthernetLen:]
			k++
		}
	}
	c.t.Prefetch(c.pf[:k]...)
	clear(c.pf[:k])
}

// tracked handles frame i, whose first pass (in w.v) has ct steps.
func (w *worker) tracked(snap *flowtable.Snapshot, i, size int) {
	c := &w.ct
	if c.t == nil {
		for k := range w.v.CT[:w.v.NCT] {
			if w.v.CT[k].CT != nil {
				w.hits.Account(&w.v, size)
				w.drop(DropNoConntrack)
				return
			}
		}
	}
	c.outs, c.dropped, c.pipeDrop = 0, false, false
	c.verified = w.meta[i].CsumVerified
	c.outq = c.outq[:0]
	buf := w.bufs[i]
	// The frame's header fields: the pipeline changed none of w.f's but
	// eth_dst (a set_field; the frame still has its own). The other
	// metadata in it does not matter here.
	h := &c.hdr[0]
	*h = *w.f
	copy(h.EthDst[:], buf[Headroom:Headroom+6])
	c.meta[0] = conntrack.Meta{}
	g := w.meta[i].GSO
	w.runCT(snap, 0, buf, size, g, &w.v, &c.meta[0], h)
	w.settle(buf, size, g, true)
	if c.outs == 0 && c.dropped {
		w.drop(c.drop)
		if c.pipeDrop {
			w.s.tableDrops[c.dropTable].Add(1)
		}
	}
}

// runCT carries out verdict v of a pass at recirculation depth d on the
// frame in buf, whose ct metadata is m and current headers hdr.
func (w *worker) runCT(snap *flowtable.Snapshot, d int, buf []byte, size int, g packet.GSO,
	v *flowtable.Verdict, m *conntrack.Meta, hdr *flowtable.Fields) {
	c := &w.ct
	w.hits.Account(v, size)
	if v.NOut == 0 && v.Drop != flowtable.DropNone {
		c.dropped, c.drop, c.dropTable, c.pipeDrop = true, fromPipeline(v.Drop), v.Table, true
	}
	out := 0
	for k := 0; k < v.NCT; k++ {
		st := &v.CT[k]
		w.queue(v.Outputs[out:st.At], hdr)
		out = int(st.At)
		if st.CT == nil {
			m.Clear()
			continue
		}
		w.settle(buf, size, g, false)
		frame := buf[Headroom : Headroom+size]
		if st.SetEthDst {
			copy(frame[:6], st.EthDst[:])
			hdr.EthDst = st.EthDst
		}
		a := st.CT.Action()
		if a.Zone != st.Zone {
			c.act = *a
			c.act.Zone = st.Zone
			a = &c.act
		}
		var pf conntrack.PacketFlags
		if g.NeedsCsum {
			pf = conntrack.CsumPartial
		}
		if c.verified {
			pf |= conntrack.CsumVerified
		}
		c.t.Process(c.now, frame[packet.EthernetLen:], pf, a, m)
		if a.NAT.Kind != conntrack.NATNone && m.State&(conntrack.StateSNAT|conntrack.StateDNAT) != 0 {
			flowtable.Extract(frame, hdr) // translated: new addresses, ports
		}
		if sp, dp, ok := m.FragmentPorts(); ok {
			// A later fragment: the rules see its datagram's ports.
			hdr.TpSrc, hdr.TpDst = sp, dp
		}
		if !st.CT.Recirc {
			continue
		}
		if d == flowtable.MaxRecirc {
			c.dropped, c.drop, c.pipeDrop = true, DropRecirc, false
			continue
		}
		// The recirculation takes over the frame, its Meta and headers,
		// unless the pass goes on after it: then it gets copies.
		fb, cm, ch, rf := buf, m, hdr, &c.rf
		if k < v.NCT-1 || out < v.NOut {
			if fb = w.spareBuf(); fb == nil {
				w.drop(DropNoBuffer)
				continue
			}
			copy(fb[Headroom:Headroom+size], frame)
			cm, ch = &c.meta[d+1], &c.hdr[d+1]
			*cm, *ch = *m, *hdr
		}
		*rf = *hdr
		rf.InPort = w.in.no
		rf.Regs, rf.TunID, rf.TunSrc, rf.TunDst = st.Regs, st.TunID, st.TunSrc, st.TunDst
		rf.SetConntrack(cm)
		rv := &c.vs[d]
		w.nRecircs++
		w.run(snap, st.CT.Table, rf, rv)
		w.runCT(snap, d+1, fb, size, g, rv, cm, ch)
		if &fb[0] != &buf[0] {
			w.settle(fb, size, g, true)
		}
	}
	w.queue(v.Outputs[out:v.NOut], hdr)
}

// queue adds outs to the frame's queued outputs, with the flow hash of
// the frame's headers as they are now.
func (w *worker) queue(outs []flowtable.Output, hdr *flowtable.Fields) {
	if len(outs) == 0 {
		return
	}
	c := &w.ct
	c.outs += len(outs)
	hash := FlowHash(hdr)
	for k := range outs {
		if len(c.outq) == cap(c.outq) {
			w.drop(DropTooManyOutputs)
			continue
		}
		c.outq = append(c.outq, queuedOutput{o: outs[k], hash: hash})
	}
}

// settle routes the queued outputs of the frame in buf. With own, the
// frame is done with: the first output takes buf itself (after the others
// took copies); without, every output takes a copy and buf stays as it is.
func (w *worker) settle(buf []byte, size int, g packet.GSO, own bool) {
	q := w.ct.outq
	for k := len(q) - 1; k >= 0; k-- {
		w.output(buf, size, g, &q[k].o, q[k].hash, k > 0 || !own)
	}
	w.ct.outq = q[:0]
}

// sweep calls the tracker's Sweep every interval until Close.
func (s *Switch) sweep(t *conntrack.Tracker, interval time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	budget := max(t.Cap()/64, 1)
	for {
		select {
		case <-s.sweepStop:
			return
		case <-tick.C:
			if n := t.Sweep(t.Now(), budget); n > 0 {
				s.log.Debug("conntrack: swept expired connections", "removed", n, "entries", t.Len())
			}
		}
	}
}
