package vxlan

import "github.com/gvswitch/gvs/port"

// Queue is one receive queue of a Port: one of its readers
// (Config.Readers), which reads from its own receive sockets
// (Config.FlowQueues), and it sends through the port's send
// sockets, which all queues share. It is a vswitch.Port (and
// vswitch.Framer) of its own, so a switch runs one reading worker per
// queue (vswitch.Switch.AddPortQueues); frames the switch spreads over the
// queues by flow all leave through the shared send sockets.
//
// Each Queue's reads must come from one goroutine at a time; its writes,
// like the Port's, may be concurrent.
type Queue struct {
	p  *Port
	i  int
	st *rxState
}

// Queues returns the port's receive queues, one per reader, in reader
// order. Queue 0 reads what the Port's own Read reads, so use
// either the Port or its queues, not both.
func (p *Port) Queues() []*Queue {
	qs := make([]*Queue, len(p.rxs))
	for i, st := range p.rxs {
		qs[i] = &Queue{p: p, i: i, st: st}
	}
	return qs
}

// Port returns the port the queue belongs to.
func (q *Queue) Port() *Port { return q.p }

// Name returns the port's name, "vxlan0".
func (q *Queue) Name() string { return q.p.Name() }

// Caps returns the port's Caps.
func (q *Queue) Caps() port.Caps { return q.p.Caps() }

// BatchSize returns the port's batch size.
func (q *Queue) BatchSize() int { return q.p.BatchSize() }

// Close closes the whole port (every queue): a blocked read of any queue
// returns an error. It is idempotent. Queue 0 returns the port's Close
// error, the others nil, so that closing every queue reports it once.
func (q *Queue) Close() error {
	err := q.p.Close()
	if q.i > 0 {
		return nil
	}
	return err
}

// Read is Port.Read on this queue's receive sockets.
func (q *Queue) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	return q.p.read(q.st, bufs, meta, offset)
}

// Write is Port.Write.
func (q *Queue) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	return q.p.Write(bufs, meta, offset)
}

// WireHeaderLen is Port.WireHeaderLen.
func (q *Queue) WireHeaderLen() int { return q.p.WireHeaderLen() }

// PutWireHeader is Port.PutWireHeader.
func (q *Queue) PutWireHeader(b []byte, m *port.Meta, received bool) {
	q.p.PutWireHeader(b, m, received)
}
