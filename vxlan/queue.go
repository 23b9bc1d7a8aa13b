package vxlan

import "github.com/gvswitch/gvs/packet"

// Queue is one receive queue of a Port: it reads from one of the port's
// receive sockets (Config.Readers) and sends through the port's send
// sockets, which all queues share. It implements vswitch.TunnelPort and
// vswitch.OffloadTunnelPort, so a switch can run one reading worker per
// queue (vswitch.Switch.AddTunnelQueues).
//
// Each Queue's reads must come from one goroutine at a time; its writes,
// like the Port's, may be concurrent.
type Queue struct {
	p  *Port
	i  int
	st *rxState
}

// Queues returns the port's receive queues, one per receive socket, in
// socket order. Queue 0 reads what the Port's own ReadTunnel reads, so use
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

// ReadTunnel is Port.ReadTunnel on this queue's receive socket.
func (q *Queue) ReadTunnel(bufs [][]byte, sizes []int, eps []Endpoint, offset int) (int, error) {
	return q.p.read(q.st, bufs, sizes, nil, eps, offset)
}

// ReadTunnelGSO is Port.ReadTunnelGSO on this queue's receive socket.
func (q *Queue) ReadTunnelGSO(bufs [][]byte, sizes []int, gso []packet.GSO, eps []Endpoint, offset int) (int, error) {
	return q.p.read(q.st, bufs, sizes, gso, eps, offset)
}

// WriteTunnel is Port.WriteTunnel.
func (q *Queue) WriteTunnel(bufs [][]byte, eps []Endpoint, offset int) (int, error) {
	return q.p.WriteTunnel(bufs, eps, offset)
}

// WriteTunnelGSO is Port.WriteTunnelGSO.
func (q *Queue) WriteTunnelGSO(bufs [][]byte, gso []packet.GSO, eps []Endpoint, offset int) (int, error) {
	return q.p.WriteTunnelGSO(bufs, gso, eps, offset)
}
