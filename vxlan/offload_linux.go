//go:build linux

package vxlan

// The receive path of the tunnel port and its offloads: a raw recvmmsg
// that allocates nothing, UDP GRO on the receive sockets with GRO-style
// coalescing of the inner TCP segments (UDP datagrams with CoalesceUDP),
// and the probe of UDP GRO and UDP GSO (UDP_SEGMENT, used by the send path
// in send_linux.go).
//
// Receive (Read): recvmmsg reads up to rxMsgs datagrams into buffers the
// port owns, with the source address in a preallocated sockaddr and, with
// UDP_GRO, the segment size in a control message: one "message" is then up
// to 64 KiB of equal-size datagrams of one outer 4-tuple. Each datagram is
// checked (peer, header, length) and its inner frame copied into the
// caller's buffer; with Config.Offload, consecutive inner TCP segments of
// one flow are merged into one super-frame (packet.TCPCoalescer) described
// by a GSOTCPv4 packet.GSO, so a TAP hands the pod one large segment; with
// Config.CoalesceUDP, consecutive UDP datagrams of one flow likewise
// (packet.UDPCoalescer, GSOUDPL4). What does not fit in the caller's
// buffers stays for the next call.

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"golang.org/x/sys/unix"
)

// udpGRO is the UDP_GRO socket option (linux/udp.h), missing from x/sys.
const udpGRO = 104

// Receive sizes.
const (
	groMsgs     = 8     // recvmmsg messages per call with GRO (each up to 64 KiB)
	groBufLen   = 65536 // a GRO message's buffer
	plainBufLen = 9216 + HeaderLen + 1
	ctrlLen     = 64 // control buffer per message (one int cmsg)
)

// mmsghdr is struct mmsghdr of recvmmsg(2) and sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// rxState is the raw receive path's state, owned by the reader.
type rxState struct {
	// intrMu guards interrupted and the epoll set's read deadline
	// (Queue.Interrupt, handoff_linux.go).
	intrMu      sync.Mutex
	interrupted bool
	socks       []rxSocket // the reader's sockets (Config.FlowQueues)
	ep          *os.File   // epoll set of socks, in the netpoller
	eprc        syscall.RawConn
	events      []unix.EpollEvent // the current round's ready sockets
	nev         int               // how many
	ei          int               // the next one to read
	vlen        int               // messages the next recvmmsg may take
	bulk        []bool            // per socket: its last read was bulk (fill)
	// wasBulk: this round served a bulk socket's share (fill).
	wasBulk bool
	pollFn  func(fd uintptr) bool
	// busy is the reader's busy-polling window (nil: off); tryFn is
	// st.try, peekFn st.peek; slept tells that the netpoller did wait
	// (flowq_linux.go).
	busy   *busypoll.Reader
	tryFn  func() bool
	peekFn func(fd uintptr) bool
	slept  bool

	msgs  []mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet4
	ctrl  []byte
	bufs  [][]byte
	got   int // messages of the last recvmmsg
	mi    int // next message to take datagrams from
	moff  int // offset of the next datagram in message mi
	rn    int
	rerr  error
	held  error // a read error of a batch's gathering, for the next fill
	fn    func(fd uintptr) bool
	waits *counter // the port's rxWaits
	co    packet.Coalescer
	// coalesceUDP is co.UDP as set from outside (SetCoalesceUDP); the
	// reader copies it into co at each read.
	coalesceUDP atomic.Bool
}

// initRx sets up each reader's receive state: its share of the receive
// sockets and an epoll set of them.
func (p *Port) initRx(readers int, gro bool, busy *busypoll.Poller) error {
	per := len(p.rx) / readers
	for r := range readers {
		st := p.newRxState(gro)
		st.busy = busy.Reader()
		// Reader r takes every readers-th socket from r: the group picks
		// socket (source port mod len(p.rx)) (steer_linux.go), so a
		// peer's consecutive send ports go round the readers.
		for i := r; i < len(p.rx); i += readers {
			st.socks = append(st.socks, p.rx[i])
		}
		ep, eprc, err := newEpoll(st.socks)
		if err != nil {
			return fmt.Errorf("vxlan: %w", err)
		}
		st.ep, st.eprc = ep, eprc
		st.events = make([]unix.EpollEvent, per)
		st.bulk = make([]bool, per)
		p.rxs = append(p.rxs, st)
	}
	return nil
}

func (p *Port) newRxState(gro bool) *rxState {
	n, size := p.batch, plainBufLen
	if gro {
		n, size = min(p.batch, groMsgs), groBufLen
	}
	st := &rxState{
		msgs:  make([]mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n),
		ctrl:  make([]byte, n*ctrlLen),
		bufs:  make([][]byte, n),
		waits: &p.stats.rxWaits,
	}
	for i := range st.bufs {
		st.bufs[i] = make([]byte, size)
		st.iovs[i].Base = &st.bufs[i][0]
		st.iovs[i].SetLen(size)
		h := &st.msgs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&st.names[i]))
		h.Iov = &st.iovs[i]
		h.SetIovlen(1)
		h.Control = &st.ctrl[i*ctrlLen]
	}
	st.fn = st.recv
	st.pollFn = st.poll
	st.tryFn, st.peekFn = st.try, st.peek
	return st
}

// recv is a receive socket's RawConn callback: one recvmmsg of at most
// st.vlen messages that does not wait (st.rn is 0 if the socket had
// nothing).
func (st *rxState) recv(fd uintptr) bool {
	for i := range st.vlen {
		h := &st.msgs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet4
		h.SetControllen(ctrlLen)
		h.Flags = 0
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&st.msgs[0])), uintptr(st.vlen), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			st.rn, st.rerr = 0, nil
		case 0:
			st.rn, st.rerr = int(r), nil
		default:
			st.rn, st.rerr = 0, e
		}
		return true
	}
}

// groSize returns the segment size from message i's UDP_GRO control
// message, or 0.
func (st *rxState) groSize(i int) int {
	h := &st.msgs[i].hdr
	c := st.ctrl[i*ctrlLen : i*ctrlLen+int(h.Controllen)]
	for len(c) >= unix.SizeofCmsghdr {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
		l := int(cm.Len)
		if l < unix.SizeofCmsghdr || l > len(c) {
			return 0
		}
		if cm.Level == unix.SOL_UDP && cm.Type == udpGRO && l >= unix.SizeofCmsghdr+4 {
			return int(binary.NativeEndian.Uint32(c[unix.SizeofCmsghdr:]))
		}
		l = (l + 7) &^ 7
		if l > len(c) {
			return 0
		}
		c = c[l:]
	}
	return 0
}

// read reads from the receive sockets of the reader whose state is st.
func (p *Port) read(st *rxState, bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	if offset < HeaderLen {
		return 0, ErrHeadroom
	}
	st.co.UDP = st.coalesceUDP.Load()
	coalesce := p.coalesce
	limit := min(len(bufs), len(meta))
	if limit == 0 {
		return 0, nil
	}
	var drops [NumDropReasons]uint64
	var nbytes uint64
	k := 0
	for k < limit {
		if st.mi >= st.got {
			if k > 0 {
				// Small frames of other flows that are ready already
				// (other sockets of this round) join the batch: one
				// pass of the switch and one write per destination
				// for them all, instead of a batch each. A bulk
				// socket's share is left for the next batch.
				if k == limit || nbytes >= gatherBytes {
					break
				}
				ok, err := st.next(limit-k, true)
				if err != nil {
					st.held = err // the next fill returns it
				}
				if !ok {
					break
				}
				st.got, st.mi, st.moff = st.rn, 0, 0
				continue
			}
			// Count this batch's drops before blocking for the next one.
			p.addRx(0, 0, &drops)
			drops = [NumDropReasons]uint64{}
			if err := st.fill(); err != nil {
				st.got, st.mi, st.moff = 0, 0, 0
				p.addRx(k, nbytes, &drops)
				if st.takeInterrupt(err) {
					return 0, port.ErrWoken
				}
				if p.closed.Load() {
					err = net.ErrClosed
				}
				return 0, fmt.Errorf("vxlan: read: %w", err)
			}
			st.got, st.mi, st.moff = st.rn, 0, 0
			continue
		}
		i := st.mi
		m := &st.msgs[i]
		total := int(m.len)
		src := st.names[i].Addr
		srcPort := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&st.names[i].Port))[:])
		seg := total
		if gs := st.groSize(i); gs > 0 {
			seg = gs
		}
		if m.hdr.Flags&unix.MSG_TRUNC != 0 || !p.peers.Contains(src) || total == 0 {
			if m.hdr.Flags&unix.MSG_TRUNC != 0 {
				drops[DropTruncated]++
			} else if total > 0 {
				// One drop per datagram of a GRO batch.
				drops[DropUnknownPeer] += uint64((total - st.moff + seg - 1) / seg)
			}
			st.mi, st.moff = st.mi+1, 0
			continue
		}
		dg := st.bufs[i][st.moff:min(st.moff+seg, total)]
		st.moff += len(dg)
		if st.moff >= total {
			st.mi, st.moff = st.mi+1, 0
		}
		inner, vni, err := Decap(dg)
		switch {
		case err == ErrShort:
			drops[DropMalformed]++
			continue
		case err != nil:
			drops[DropBadFlags]++
			continue
		case len(inner) < MinInnerLen:
			drops[DropShortInner]++
			continue
		}
		ep := port.Endpoint{Addr: src, Port: srcPort, VNI: vni}
		if coalesce && k > 0 && meta[k-1].Tunnel == ep {
			prev := st.co.Len()
			if st.co.Append(inner) {
				nbytes += uint64(st.co.Len() - prev)
				continue
			}
		}
		if len(bufs[k]) < offset+len(inner) {
			drops[DropTruncated]++
			continue
		}
		if coalesce {
			if k > 0 {
				meta[k-1].Size, meta[k-1].GSO = st.co.Finish()
				meta[k-1].CsumVerified = st.co.Verified()
			}
			st.co.Start(bufs[k][offset:], inner)
		} else {
			copy(bufs[k][offset:], inner)
		}
		meta[k] = port.Meta{Size: len(inner), Tunnel: ep}
		nbytes += uint64(len(inner))
		k++
	}
	if coalesce && k > 0 {
		meta[k-1].Size, meta[k-1].GSO = st.co.Finish()
		meta[k-1].CsumVerified = st.co.Verified()
	}
	p.addRx(k, nbytes, &drops)
	return k, nil
}

func (p *Port) addRx(k int, nbytes uint64, drops *[NumDropReasons]uint64) {
	if k > 0 {
		p.stats.rxPackets.Add(uint64(k))
		p.stats.rxBytes.Add(nbytes)
	}
	for r, d := range drops {
		if d != 0 {
			p.stats.drops[r].Add(d)
		}
	}
}

// completeCsum completes the partial L4 checksum of frame that g
// locates.
func completeCsum(frame []byte, g packet.GSO) {
	start, off := int(g.CsumStart), int(g.CsumOffset)
	if start+off+2 > len(frame) {
		return
	}
	c := ^packet.Checksum(frame[start:], 0)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(frame[start+off:], c)
}

// probeOffloads enables UDP GRO on the receive sockets (in use only if
// every one takes it) and checks for UDP GSO on the first send socket.
func (p *Port) probeOffloads() (gro, gso bool) {
	gro = true
	for _, rx := range p.rx {
		gro = gro && rx.control(func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_UDP, udpGRO, 1) }) == nil
	}
	if !gro {
		// All or none: a socket left with GRO would hand its reader
		// batches larger than the plain buffers.
		for _, rx := range p.rx {
			_ = rx.control(func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_UDP, udpGRO, 0) })
		}
	}
	if len(p.tx) > 0 {
		_ = p.tx[0].rc.Control(func(fd uintptr) {
			_, err := unix.GetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT)
			gso = err == nil
		})
	}
	return gro, gso
}

// Offloads reports whether UDP GRO (receive) and UDP GSO (send) are in use.
func (p *Port) Offloads() (gro, gso bool) { return p.groOn, p.gso.Load() }

// GSOSegments returns how many full-size inner frames of an overlay with
// the given MTU (the IP packet size on a pod interface) one UDP GSO send
// carries: min(64, 65507 / (HeaderLen + 14 + mtu)), 44 for MTU 1450, or 0
// for a non-positive MTU. A TCP super-frame of more segments is sent with
// two sendmsg calls (the second one short), so the daemon caps the pod
// interface's gso_max_segs at this number: one sendmsg per super-frame.
func GSOSegments(mtu int) int {
	if mtu <= 0 {
		return 0
	}
	return max(1, min(gsoMaxSegs, gsoMaxPayload/(HeaderLen+packet.EthernetLen+mtu)))
}
