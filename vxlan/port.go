//go:build linux

package vxlan

// The tunnel port, vxlan0 (docs/openshift-rules.md "Ports and registers").
//
// Receive path (ReadTunnel, one goroutine at a time):
//  1. A raw recvmmsg on the socket bound to Local:4789 reads up to
//     Batch datagrams into the port's own buffers, the source addresses
//     into preallocated sockaddrs (offload_linux.go).
//  2. Each datagram is checked: not truncated, source in Peers, header
//     valid (Decap), inner frame at least an Ethernet header. A failure is
//     counted under its DropReason and the datagram is skipped.
//  3. Accepted inner frames are copied to bufs[k][offset:], with sizes[k]
//     and eps[k] = {outer source address, VNI}. If every datagram was
//     dropped, it reads again, so ReadTunnel returns at least one frame or
//     an error.
//
// Transmit path (WriteTunnel, any number of goroutines):
//  1. Each frame bufs[i][offset:] gets the VXLAN header written in place in
//     its headroom (Encap) and the destination eps[i].Addr:4789.
//  2. The frame's send socket is picked by flow: SourcePort(frame) modulo
//     the number of send sockets. Each send socket is bound to Local:0, so
//     the kernel gives it its own source port; one flow therefore always
//     leaves with one outer source port, and different flows spread over
//     Config.SendSockets ports (entropy for ECMP, RFC 7348 §5).
//  3. Runs of consecutive frames for the same socket go out in one sendmmsg
//     (ipv4.PacketConn.WriteBatch).
//
// Why a pool of send sockets: a UDP socket has one source port, and the
// receive socket must keep 4789. Setting the source port per packet would
// need a raw socket (and our own IP/UDP headers and checksums) or a UDP
// socket per port; a small fixed pool gives per-flow source ports with
// ordinary sockets. The cost: the wire source port is the kernel-chosen
// port of the picked socket (from net.ipv4.ip_local_port_range), not
// SourcePort(frame) itself, and there are only SendSockets distinct values.
// SourcePortFor reports the port a frame will use.
//
// UDP GSO (UDP_SEGMENT) and UDP GRO (UDP_GRO), probed at Listen with a
// fallback to the plain batches here, are in offload_linux.go.

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
)

// Defaults for Config fields left zero.
const (
	DefaultBatch       = 64
	DefaultSendSockets = 16
	DefaultReadBuffer  = 4 << 20
	maxBatch           = 1024
	maxSendSockets     = 256
	maxReaders         = 64
)

// ErrHeadroom is returned by ReadTunnel and WriteTunnel when offset leaves
// less than HeaderLen bytes in front of the frame.
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
	// Batch is the preferred batch size (BatchSize) and the most
	// datagrams one ReadTunnel or sendmmsg moves; 0 means DefaultBatch.
	Batch int
	// SendSockets is the number of send sockets, i.e. of distinct outer
	// source ports; 0 means DefaultSendSockets.
	SendSockets int
	// ReadBuffer is SO_RCVBUF for each receive socket (the kernel caps it
	// at net.core.rmem_max); 0 means DefaultReadBuffer.
	ReadBuffer int
	// Readers is the number of receive sockets; 0 means 1. With more than
	// one, they share Local:Port with SO_REUSEPORT, the kernel hashing each
	// datagram's outer addresses and ports to one of them (a peer's send
	// sockets give its flows different source ports), and each is read
	// through a Queue of its own (Queues), so several goroutines can
	// receive in parallel.
	Readers int
	// Offload enables UDP GRO on the receive sockets and UDP GSO
	// (UDP_SEGMENT) on the send sockets, each where the kernel has it
	// (probed at Listen; see Offloads). Without it every datagram is read
	// and sent on its own (WriteTunnelGSO still segments super-frames,
	// sending them with sendmmsg).
	Offload bool
	// CoalesceUDP makes ReadTunnelGSO merge consecutive UDP datagrams of
	// one inner flow into UDP super-frames (GSOUDPL4), as it merges TCP
	// segments. Set it only if every port such frames go to takes them:
	// a TAP on Linux 6.2 or later (tap.ProbeUSO, or a TAP's Offloads).
	// SetCoalesceUDP changes it later.
	CoalesceUDP bool
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
	}
	return nil
}

// Port is the VXLAN tunnel port. It implements vswitch.TunnelPort and
// vswitch.OffloadTunnelPort; its reads are those of its first receive
// socket (Queues()[0]).
//
// ReadTunnel must be called by one goroutine at a time (per Queue, with
// Config.Readers > 1); WriteTunnel, Stats, SourcePortFor and the other
// methods are safe for concurrent use.
type Port struct {
	local   [4]byte
	dstPort int
	batch   int
	peers   *Peers
	log     *slog.Logger

	rx []*net.UDPConn // receive sockets (Config.Readers)
	tx []txSocket

	rxs      []*rxState // one per receive socket, each owned by its reader
	txPool   sync.Pool  // of *txScratch
	gsoPool  sync.Pool  // of *gsoScratch
	gso      atomic.Bool
	groOn    bool
	stats    counters
	closeMu  sync.Once
	closeErr error
}

type txSocket struct {
	conn *net.UDPConn
	pc   *ipv4.PacketConn
	rc   syscall.RawConn
	port uint16
}

// txScratch is one writer's per-call state, reused through Port.txPool.
type txScratch struct {
	msgs  []ipv4.Message
	addrs []net.UDPAddr
	sock  []uint8
}

// Listen opens the tunnel port: the receive socket on Local:Port and
// SendSockets send sockets on Local:0. The sockets are created in the
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
		local:   local,
		dstPort: int(cfg.Port),
		batch:   cfg.Batch,
		peers:   cfg.Peers,
		log:     log,
	}
	laddr := &net.UDPAddr{IP: net.IP(local[:]), Port: int(cfg.Port)}
	readers := max(cfg.Readers, 1)
	if readers > 1 {
		// With SO_REUSEPORT the bind would join a group that another
		// process of the same user holds (a second daemon) and share its
		// traffic; a plain bind first fails on a port in use, as with one
		// reader.
		probe, err := net.ListenUDP("udp4", laddr)
		if err != nil {
			return nil, fmt.Errorf("vxlan: listen %v: %w", laddr, err)
		}
		probe.Close()
	}
	for range readers {
		rx, err := listenRx(laddr, readers > 1)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("vxlan: listen %v: %w", laddr, err)
		}
		p.rx = append(p.rx, rx)
		if err := rx.SetReadBuffer(cfg.ReadBuffer); err != nil {
			log.Warn("vxlan: cannot set receive buffer", "size", cfg.ReadBuffer, "err", err)
		}
	}
	for range cfg.SendSockets {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IP(local[:])})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("vxlan: open send socket on %v: %w", cfg.Local, err)
		}
		// Nobody reads the send sockets; keep what strays into them small.
		_ = c.SetReadBuffer(1)
		rc, err := c.SyscallConn()
		if err != nil {
			c.Close()
			p.Close()
			return nil, fmt.Errorf("vxlan: send socket: %w", err)
		}
		p.tx = append(p.tx, txSocket{
			conn: c,
			pc:   ipv4.NewPacketConn(c),
			rc:   rc,
			port: uint16(c.LocalAddr().(*net.UDPAddr).Port),
		})
	}
	if cfg.Offload {
		var gso bool
		p.groOn, gso = p.probeOffloads()
		p.gso.Store(gso)
	}
	if err := p.initRx(p.groOn); err != nil {
		p.Close()
		return nil, err
	}
	p.SetCoalesceUDP(cfg.CoalesceUDP)
	p.txPool.New = func() any { return newTxScratch(cfg.Batch) }
	p.gsoPool.New = func() any { return newGSOScratch() }
	log.Info("vxlan: tunnel port open", "local", laddr.String(), "readers", readers, "send_sockets", len(p.tx), "batch", cfg.Batch,
		"udp_gro", p.groOn, "udp_gso", p.gso.Load(), "coalesce_udp", cfg.CoalesceUDP)
	return p, nil
}

func newTxScratch(n int) *txScratch {
	s := &txScratch{
		msgs:  make([]ipv4.Message, n),
		addrs: make([]net.UDPAddr, n),
		sock:  make([]uint8, n),
	}
	for i := range s.msgs {
		s.msgs[i].Buffers = make([][]byte, 1)
		s.addrs[i].IP = make(net.IP, 4)
		s.msgs[i].Addr = &s.addrs[i]
	}
	return s
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

// SourcePortFor returns the outer UDP source port that WriteTunnel uses for
// frame: that of send socket SourcePort(frame) % len(SourcePorts()).
func (p *Port) SourcePortFor(frame []byte) uint16 {
	return p.tx[p.socketFor(frame)].port
}

func (p *Port) socketFor(frame []byte) int {
	return int(SourcePort(frame)) % len(p.tx)
}

// Stats returns a snapshot of the port's counters.
func (p *Port) Stats() Stats { return p.stats.snapshot() }

// ReadTunnel reads up to min(len(bufs), BatchSize()) frames. For each
// frame k it returns, the inner Ethernet frame is bufs[k][offset:offset+sizes[k]]
// and eps[k] holds the outer source address and the VNI. Dropped
// datagrams are counted in Stats and not returned. It blocks until it has
// at least one frame; after Close it returns an error for which
// errors.Is(err, net.ErrClosed) holds.
//
// Datagrams are read with a raw recvmmsg into the port's own buffers and
// the inner frames copied out (see offload_linux.go); nothing is
// allocated. With Config.Offload, UDP GRO batches are split back into
// datagrams; ReadTunnel never merges frames (ReadTunnelGSO does).
func (p *Port) ReadTunnel(bufs [][]byte, sizes []int, eps []Endpoint, offset int) (int, error) {
	return p.read(p.rxs[0], bufs, sizes, nil, eps, offset)
}

// WriteTunnel sends each frame bufs[i][offset:] to eps[i].Addr on the
// tunnel's UDP port with VNI eps[i].VNI, writing the VXLAN header into
// bufs[i][offset-HeaderLen:offset]. It may be called concurrently.
//
// It returns the number of frames sent. A frame whose send fails is
// counted in Stats().TxErrors and skipped, and the rest are still sent; the
// first such error is returned (wrapped) with the count. After Close it
// stops at the first failure with an error for which
// errors.Is(err, net.ErrClosed) holds.
func (p *Port) WriteTunnel(bufs [][]byte, eps []Endpoint, offset int) (int, error) {
	if offset < HeaderLen {
		return 0, ErrHeadroom
	}
	n := min(len(bufs), len(eps))
	s := p.txPool.Get().(*txScratch)
	defer p.txPool.Put(s)
	var sent, failed, nbytes uint64
	var firstErr error
batches:
	for start := 0; start < n; start += len(s.msgs) {
		cnt := min(n-start, len(s.msgs))
		for j := range cnt {
			b, ep := bufs[start+j], eps[start+j]
			frame := b[offset:]
			s.sock[j] = uint8(p.socketFor(frame))
			s.msgs[j].Buffers[0] = Encap(b, offset, len(frame), ep.VNI)
			copy(s.addrs[j].IP, ep.Addr[:])
			s.addrs[j].Port = p.dstPort
		}
		for i := 0; i < cnt; {
			j := i + 1
			for j < cnt && s.sock[j] == s.sock[i] {
				j++
			}
			r := sendAll(p.tx[s.sock[i]].pc, s.msgs[i:j])
			sent += uint64(r.sent)
			failed += uint64(r.failed)
			nbytes += r.bytes
			if r.err != nil && firstErr == nil {
				firstErr = fmt.Errorf("vxlan: write: %w", r.err)
			}
			if errors.Is(r.err, net.ErrClosed) {
				break batches
			}
			i = j
		}
	}
	for i := range s.msgs {
		s.msgs[i].Buffers[0] = nil // do not keep the caller's buffers alive
	}
	if sent > 0 {
		p.stats.txPackets.Add(sent)
		p.stats.txBytes.Add(nbytes)
	}
	if failed > 0 {
		p.stats.txErrors.Add(failed)
	}
	return int(sent), firstErr
}

// sendResult is what sendAll did.
type sendResult struct {
	sent, failed int
	bytes        uint64 // inner frame bytes sent
	err          error  // the first error
}

// sendAll sends ms with sendmmsg, skipping each message whose send fails.
// The messages sent are a prefix of ms only when none failed. On a closed
// socket it gives up on the rest.
func sendAll(pc *ipv4.PacketConn, ms []ipv4.Message) (r sendResult) {
	for len(ms) > 0 {
		n, err := pc.WriteBatch(ms, 0)
		if n == 0 && err == nil {
			err = io.ErrShortWrite // never seen; guards against spinning
		}
		r.sent += n
		for _, m := range ms[:n] {
			r.bytes += uint64(len(m.Buffers[0]) - HeaderLen)
		}
		ms = ms[n:]
		if err == nil {
			continue
		}
		if r.err == nil {
			r.err = err
		}
		if errors.Is(err, net.ErrClosed) {
			r.failed += len(ms)
			return r
		}
		if len(ms) > 0 {
			// sendmmsg reports an error only when the first message of
			// the call fails; skip it and go on with the rest.
			r.failed++
			ms = ms[1:]
		}
	}
	return r
}

// Close closes the sockets. A blocked ReadTunnel returns an error. Close is
// idempotent.
func (p *Port) Close() error {
	p.closeMu.Do(func() {
		var errs []error
		for _, rx := range p.rx {
			errs = append(errs, rx.Close())
		}
		for _, s := range p.tx {
			errs = append(errs, s.conn.Close())
		}
		p.closeErr = errors.Join(errs...)
		p.log.Info("vxlan: tunnel port closed", "local", p.Addr().String())
	})
	return p.closeErr
}
