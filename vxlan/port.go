//go:build linux

package vxlan

// The tunnel port, vxlan0 (docs/architecture.md). It is a vswitch.Port
// whose Caps have Tunnel and Offload.
//
// Receive path (Read, one goroutine at a time per queue):
//  1. A raw recvmmsg on one of the reader's sockets bound to Local:4789
//     (the next ready one in round robin: flowq_linux.go) reads up to
//     Batch datagrams into the port's own buffers, the source addresses
//     into preallocated sockaddrs (offload_linux.go).
//  2. Each datagram is checked: not truncated, source in Peers, header
//     valid (Decap), inner frame at least an Ethernet header. A failure is
//     counted under its DropReason and the datagram is skipped.
//  3. Accepted inner frames are copied to bufs[k][offset:], with meta[k]
//     holding the size and the endpoint {outer source address and port,
//     VNI}; with Config.Offload, consecutive TCP segments (UDP datagrams
//     with CoalesceUDP) of one flow are merged into a super-frame. If
//     every datagram was dropped, it reads again, so Read returns at least
//     one frame or an error.
//
// Transmit path (Write, any number of goroutines; send_linux.go):
//  1. Each frame's send socket is picked by its flow hash, Meta.Hash, which
//     the switch computed already: Hash modulo the number of send sockets.
//     The send sockets hold a block of consecutive ports (steer_linux.go),
//     so one flow always leaves with one outer source port, and different
//     flows spread over Config.SendSockets ports (entropy for ECMP, RFC
//     7348 §5) that a receiving gvs puts in different flow queues.
//  2. Each frame gets the VXLAN header written in place in its headroom
//     (Encap), or, a super-frame, is cut into VXLAN datagrams; they go out
//     in one sendmmsg per send socket (UDP GSO trains where the kernel has
//     UDP_SEGMENT).
//
// Why a pool of send sockets: a UDP socket has one source port, and the
// receive socket must keep 4789. Setting the source port per packet would
// need a raw socket (and our own IP/UDP headers and checksums) or a UDP
// socket per port; a small fixed pool gives per-flow source ports with
// ordinary sockets. The cost: there are only SendSockets distinct source
// ports, a block of the ephemeral range (net.ipv4.ip_local_port_range,
// outside ip_local_reserved_ports; ports the kernel picks if no block is
// free). SourcePortFor reports the port a flow hash leads to.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
)

// Defaults for Config fields left zero.
const (
	DefaultBatch       = 64
	DefaultSendSockets = 16
	DefaultReadBuffer  = 4 << 20
	maxBatch           = 1024
	maxSendSockets     = 256
	maxReaders         = 64
	// DefaultFlowQueues is Config.FlowQueues left zero.
	DefaultFlowQueues = 16
	// MaxFlowQueues is the most Config.FlowQueues may be.
	MaxFlowQueues = 64
)

// ErrHeadroom is returned by Read and Write when offset leaves less than
// HeaderLen bytes in front of the frame, and by Write for a frame whose
// buffer is shorter than offset plus its size.
var ErrHeadroom = errors.New("vxlan: offset smaller than the VXLAN header")

// Config configures a tunnel port. Zero values of the optional fields pick
// the defaults.
type Config struct {
	// Local is the node's underlay IPv4 address (required). Both the
	// receive socket and the send sockets are bound to it.
	Local netip.Addr
	// Port is the UDP port to receive on and to send to; 0 means UDPPort
	// (4789).
	Port uint16
	// Peers is the set of node addresses accepted as VXLAN sources
	// (required). The port reads it on every datagram; update it any time.
	Peers *Peers
	// Batch is the preferred batch size (BatchSize), the most datagrams
	// one Read takes and the most frames Write gathers for one round of
	// sendmmsg calls; 0 means DefaultBatch.
	Batch int
	// SendSockets is the number of send sockets, i.e. of distinct outer
	// source ports; 0 means DefaultSendSockets.
	SendSockets int
	// ReadBuffer is SO_RCVBUF for each receive socket (the kernel caps it
	// at net.core.rmem_max); 0 means DefaultReadBuffer.
	ReadBuffer int
	// Readers is the number of readers, each with FlowQueues receive
	// sockets; 0 means 1. All the sockets share Local:Port with
	// SO_REUSEPORT, the kernel hashing each datagram's outer addresses and
	// ports to one of them (a peer's send sockets give its flows different
	// source ports), and each reader is a Queue of its own (Queues), so
	// several goroutines can receive in parallel.
	Readers int
	// FlowQueues is the number of receive sockets of each reader, all in
	// the SO_REUSEPORT group: each datagram goes to the socket its outer
	// source port picks (steer_linux.go; one per inner flow of a peer,
	// a gvs peer's send sockets each to another socket while there are
	// at least as many sockets as a peer's SendSockets), and the
	// reader drains the sockets in round robin, so that a sparse flow (a
	// ping, a DNS query) does not wait behind a bulk flow's backlog
	// (flowq_linux.go). 0 means DefaultFlowQueues; 1 gives one socket per
	// reader.
	FlowQueues int
	// Offload enables UDP GRO on the receive sockets and UDP GSO
	// (UDP_SEGMENT) on the send sockets, each where the kernel has it
	// (probed at Listen; see Offloads), and makes Read merge consecutive
	// TCP segments of one inner flow into super-frames (GSOTCPv4). Without
	// it every datagram is read and sent on its own, and Read returns
	// complete frames only (Write still takes super-frames, cutting them
	// into datagrams).
	Offload bool
	// CoalesceUDP makes Read merge consecutive UDP datagrams of one inner
	// flow into UDP super-frames (GSOUDPL4), as it merges TCP segments
	// (with Offload only). Set it only if every port such frames go to
	// takes them: a TAP on Linux 6.2 or later (tap.ProbeUSO, or a TAP's
	// Offloads). SetCoalesceUDP changes it later.
	CoalesceUDP bool
	// BusyPoll, when not nil, lets each reader poll its receive sockets
	// within an adaptive window (package busypoll) before it waits in
	// the netpoller. The Poller may be shared with other ports' readers.
	BusyPoll *busypoll.Poller
	// Sockets, when not nil, are the sockets of a port another process
	// opened (Port.Fds; handoff_linux.go): Listen takes them instead of
	// binding new ones. Their number must match Readers × FlowQueues.
	Sockets *Sockets
	// Logger receives setup and teardown messages, never per-packet ones;
	// nil discards them.
	Logger *slog.Logger
}

// Validate reports whether c is usable, after defaults.
func (c *Config) Validate() error {
	l := c.Local.Unmap()
	switch {
	case !l.IsValid():
		return errors.New("vxlan: Config.Local is required")
	case !l.Is4():
		return fmt.Errorf("vxlan: Config.Local %v: %w", c.Local, ErrNotIPv4)
	case l.IsUnspecified() || l.IsMulticast():
		return fmt.Errorf("vxlan: Config.Local %v is not a unicast address", c.Local)
	case c.Peers == nil:
		return errors.New("vxlan: Config.Peers is required")
	case c.Batch < 0 || c.Batch > maxBatch:
		return fmt.Errorf("vxlan: Config.Batch %d out of range 0..%d", c.Batch, maxBatch)
	case c.SendSockets < 0 || c.SendSockets > maxSendSockets:
		return fmt.Errorf("vxlan: Config.SendSockets %d out of range 0..%d", c.SendSockets, maxSendSockets)
	case c.ReadBuffer < 0:
		return fmt.Errorf("vxlan: Config.ReadBuffer %d is negative", c.ReadBuffer)
	case c.Readers < 0 || c.Readers > maxReaders:
		return fmt.Errorf("vxlan: Config.Readers %d out of range 0..%d", c.Readers, maxReaders)
	case c.FlowQueues < 0 || c.FlowQueues > MaxFlowQueues:
		return fmt.Errorf("vxlan: Config.FlowQueues %d out of range 0..%d", c.FlowQueues, MaxFlowQueues)
	}
	return nil
}

// Port is the VXLAN tunnel port. It implements vswitch.Port (Caps: Tunnel
// and Offload) and vswitch.Framer; its reads are those of its first
// reader (Queues()[0]).
//
// Read must be called by one goroutine at a time (per Queue, with
// Config.Readers > 1); Write, Stats, SourcePortFor and the other methods
// are safe for concurrent use.
type Port struct {
	local    [4]byte
	dstPort  int
	batch    int
	peers    *Peers
	log      *slog.Logger
	coalesce bool // Config.Offload: Read merges segments into super-frames

	rx []rxSocket // receive sockets, Config.FlowQueues per reader
	tx []txSocket

	steered     bool // rx steered by outer source port (steer_linux.go)
	consecutive bool // tx on consecutive ports (steer_linux.go)

	rxs      []*rxState // one per reader, each owned by it
	txPool   sync.Pool  // of *txScratch (send_linux.go)
	gso      atomic.Bool
	groOn    bool
	stats    counters
	closed   atomic.Bool
	closeMu  sync.Once
	closeErr error
}

// txSocket is a send socket (openTx).
type txSocket struct {
	f    *os.File
	rc   syscall.RawConn
	port uint16 // its local port: the outer UDP source port
}

// Listen opens the tunnel port: the receive sockets on Local:Port and
// SendSockets send sockets on a block of consecutive ports of Local
// (steer_linux.go). The sockets are created in the
// calling thread's network namespace and stay there.
func Listen(cfg Config) (*Port, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Port == 0 {
		cfg.Port = UDPPort
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.SendSockets == 0 {
		cfg.SendSockets = DefaultSendSockets
	}
	if cfg.ReadBuffer == 0 {
		cfg.ReadBuffer = DefaultReadBuffer
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	local := cfg.Local.Unmap().As4()
	p := &Port{
		local:    local,
		dstPort:  int(cfg.Port),
		batch:    cfg.Batch,
		peers:    cfg.Peers,
		log:      log,
		coalesce: cfg.Offload,
	}
	laddr := &net.UDPAddr{IP: net.IP(local[:]), Port: int(cfg.Port)}
	readers := max(cfg.Readers, 1)
	flowQueues := cfg.FlowQueues
	if flowQueues == 0 {
		flowQueues = DefaultFlowQueues
	}
	shared := readers*flowQueues > 1
	if cfg.Sockets != nil {
		if err := p.adopt(cfg.Sockets, local, int(cfg.Port), readers*flowQueues); err != nil {
			p.Close()
			for _, f := range slices.Concat(cfg.Sockets.Rx[len(p.rx):], cfg.Sockets.Tx[len(p.tx):]) {
				f.Close()
			}
			return nil, err
		}
	} else if err := p.open(laddr, shared, readers*flowQueues, cfg.ReadBuffer, cfg.SendSockets); err != nil {
		return nil, err
	}
	if cfg.Offload {
		var gso bool
		p.groOn, gso = p.probeOffloads()
		p.gso.Store(gso)
	}
	if err := p.initRx(readers, p.groOn, cfg.BusyPoll); err != nil {
		p.Close()
		return nil, err
	}
	p.SetCoalesceUDP(cfg.CoalesceUDP)
	p.txPool.New = func() any { return p.newTxScratch() }
	log.Info("vxlan: tunnel port open", "local", laddr.String(), "readers", readers, "flow_queues", flowQueues, "send_sockets", len(p.tx), "batch", cfg.Batch,
		"steered_by_port", p.steered, "consecutive_send_ports", p.consecutive,
		"udp_gro", p.groOn, "udp_gso", p.gso.Load(), "coalesce_udp", cfg.CoalesceUDP)
	return p, nil
}

// open binds the port's n receive sockets on laddr and its send sockets
// (Listen without Config.Sockets); on failure the port is closed.
func (p *Port) open(laddr *net.UDPAddr, shared bool, n, rcvbuf, sendSockets int) error {
	if shared {
		// With SO_REUSEPORT the bind would join a group that another
		// process of the same user holds (a second daemon) and share its
		// traffic; a plain bind first fails on a port in use, as with one
		// socket.
		probe, err := net.ListenUDP("udp4", laddr)
		if err != nil {
			return fmt.Errorf("vxlan: listen %v: %w", laddr, err)
		}
		probe.Close()
	}
	for range n {
		rx, err := openRx(laddr, shared, rcvbuf)
		if err != nil {
			p.Close()
			return fmt.Errorf("vxlan: listen %v: %w", laddr, err)
		}
		p.rx = append(p.rx, rx)
	}
	if shared {
		// Steer by outer source port (steer_linux.go); without it the
		// kernel's hash places the datagrams, as before.
		if err := steer(p.rx); err != nil {
			p.log.Warn("vxlan: receive sockets not steered by source port; the kernel's hash places flows", "err", err)
		} else {
			p.steered = true
		}
	}
	tx, consecutive, err := openTxSockets(p.local, sendSockets)
	if err != nil {
		p.Close()
		return fmt.Errorf("vxlan: open send socket on %v: %w", laddr.IP, err)
	}
	p.tx, p.consecutive = tx, consecutive
	if !consecutive {
		p.log.Warn("vxlan: no free block of consecutive send ports; the kernel picked them", "send_sockets", len(p.tx))
	}
	return nil
}

// SetCoalesceUDP turns the merging of UDP datagrams toward the pods
// (Config.CoalesceUDP) on or off; the next read applies it.
func (p *Port) SetCoalesceUDP(on bool) {
	for _, st := range p.rxs {
		st.coalesceUDP.Store(on)
	}
}

// Name returns "vxlan0".
func (p *Port) Name() string { return "vxlan0" }

// Caps reports a tunnel port that takes super-frames (it cuts them into
// datagrams) and, with Config.Offload, reads them (merged segments).
func (p *Port) Caps() port.Caps { return port.Caps{Tunnel: true, Offload: true} }

// BatchSize returns Config.Batch (or its default).
func (p *Port) BatchSize() int { return p.batch }

// Addr returns the local address and port the port receives on.
func (p *Port) Addr() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4(p.local), uint16(p.dstPort))
}

// SourcePorts returns the outer UDP source ports of the send sockets, in
// socket order.
func (p *Port) SourcePorts() []uint16 {
	out := make([]uint16, len(p.tx))
	for i, s := range p.tx {
		out[i] = s.port
	}
	return out
}

// Steering reports how flows spread over the receive sockets
// (steer_linux.go): steered is whether the receive sockets' SO_REUSEPORT
// group picks a socket by outer source port (false with a single socket,
// or where the kernel refused the program: then its hash picks), and
// consecutive whether the send sockets hold a block of consecutive ports
// (false where no free block was found).
func (p *Port) Steering() (steered, consecutive bool) { return p.steered, p.consecutive }

// ReceiveSockets returns the number of receive sockets: Config.Readers ×
// Config.FlowQueues, after defaults.
func (p *Port) ReceiveSockets() int { return len(p.rx) }

// SourcePortFor returns the outer UDP source port Write uses for a frame
// whose port.Meta.Hash is hash: that of send socket hash %
// len(SourcePorts()).
func (p *Port) SourcePortFor(hash uint32) uint16 {
	return p.tx[p.socketFor(hash)].port
}

func (p *Port) socketFor(hash uint32) int {
	return int(hash % uint32(len(p.tx)))
}

// Stats returns a snapshot of the port's counters.
func (p *Port) Stats() Stats { return p.stats.snapshot() }

// Read reads up to min(len(bufs), BatchSize()) frames. For each frame k
// it returns, the inner Ethernet frame is bufs[k][offset:offset+meta[k].Size]
// and meta[k].Tunnel holds the outer source address and port and the VNI.
// With Config.Offload, consecutive TCP segments of one flow from one
// endpoint (UDP datagrams too with CoalesceUDP) are merged into one
// super-frame described by meta[k].GSO; buffers should then hold offset +
// packet.MaxSuperFrame bytes for full-size super-frames (smaller ones just
// stop merging earlier). Dropped datagrams are counted in Stats and not
// returned. It blocks until it has at least one frame; after Close it
// returns an error for which errors.Is(err, net.ErrClosed) holds.
//
// Datagrams are read with a raw recvmmsg into the port's own buffers and
// the inner frames copied out (see offload_linux.go); nothing is
// allocated. With Config.Offload, UDP GRO batches are split back into
// datagrams first.
func (p *Port) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	return p.read(p.rxs[0], bufs, meta, offset)
}

// Close closes the sockets. A blocked Read returns an error. Close is
// idempotent.
func (p *Port) Close() error {
	p.closeMu.Do(func() {
		p.closed.Store(true)
		var errs []error
		for _, st := range p.rxs {
			errs = append(errs, st.ep.Close())
		}
		for _, rx := range p.rx {
			errs = append(errs, rx.f.Close())
		}
		for _, s := range p.tx {
			errs = append(errs, s.f.Close())
		}
		p.closeErr = errors.Join(errs...)
		p.log.Info("vxlan: tunnel port closed", "local", p.Addr().String())
	})
	return p.closeErr
}
