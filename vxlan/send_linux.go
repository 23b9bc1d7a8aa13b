//go:build linux

package vxlan

// The send path of the tunnel port: one mechanism for every frame.
//
// Write (any number of goroutines at a time), in rounds of up to
// Config.Batch frames:
//  1. The frames are taken in the order of their send socket (Meta.Hash
//     modulo the number of send sockets; a counting sort that keeps each
//     socket's frames in their order, so one flow is never reordered).
//  2. Each complete frame gets its VXLAN header in its headroom (Encap)
//     and is a datagram where it lies. With UDP GSO, consecutive datagrams
//     for one socket and one destination, each no longer than the first (a
//     shorter one ends it), form one message, a "train": its iovecs point
//     at the frames in place and the kernel cuts it back into datagrams
//     (UDP_SEGMENT), at most 64 datagrams and 65507 bytes.
//  3. A super-frame is cut into segments (packet.Segment, copy and
//     checksum in one pass) in the writer's scratch space, laid out as
//     back-to-back VXLAN datagrams, and becomes messages of up to 64
//     datagrams each (one each without UDP GSO).
//  4. The messages go out with one raw sendmmsg per send socket (more when
//     the kernel takes fewer). A message the kernel refuses is counted and
//     skipped, and the rest still go. A UDP GSO message that the route's
//     device refuses (EIO, EINVAL) turns UDP GSO off for good and is sent
//     again datagram by datagram; one whose datagrams exceed the route's
//     MTU (EMSGSIZE; EINVAL before Linux 6.x) is sent datagram by datagram,
//     for the kernel to fragment.
//
// Nothing is allocated except to report an error: the writer's state
// (txScratch) comes from a sync.Pool.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
	"unsafe"

	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"golang.org/x/sys/unix"
)

// Send sizes.
const (
	gsoMaxSegs     = 64    // UDP_MAX_SEGMENTS on older kernels
	gsoMaxPayload  = 65507 // largest UDP payload of one IPv4 datagram
	maxSegsPerSend = 128   // segments of one super-frame (MSS ≥ 512)
	txMsgs         = 256   // messages one scratch gathers before it sends
	// segSpace holds two super-frames cut into datagrams, their headers
	// repeated (Ethernet and up to 60-byte IP and TCP headers) per segment.
	segSpace = 2 * (packet.MaxSuperFrame + maxSegsPerSend*(HeaderLen+packet.EthernetLen+60+60))
)

// txMsg is what a writer knows of one message it built.
type txMsg struct {
	sock   int     // index into Port.tx
	dst    [4]byte // outer destination
	iov0   int     // its first iovec in txScratch.iovs
	niov   int
	segs   int // datagrams in it
	seg    int // their size (the last may be shorter): the UDP_SEGMENT size
	frames int // frames the message completes when sent
	bytes  int // inner frame bytes in it
	wire   int // UDP payload bytes in it
	open   bool
	// super marks a part of a super-frame; more says parts of the same
	// super-frame follow. A failed part fails the frame, and the parts
	// after it are skipped.
	super, more bool
}

// txScratch is one writer's state, reused through Port.txPool.
type txScratch struct {
	gso   bool // UDP GSO in use for this round
	msgs  []mmsghdr
	info  []txMsg
	names []unix.RawSockaddrInet4
	ctrl  []byte // one UDP_SEGMENT control message per message
	iovs  []unix.Iovec
	nmsg  int
	niov  int
	// The frames of a round in send-socket order.
	order  []int
	sockOf []int
	count  []int
	// Segmentation space for super-frames.
	seg    []byte
	segOff int
	sizes  []int
	// The current sendmmsg, for the RawConn callback.
	cur    []mmsghdr
	rn     int
	rerr   error
	sendFn func(fd uintptr) bool
	// A single-datagram message, for the fallback without UDP GSO.
	one    [1]mmsghdr
	oneIov unix.Iovec
}

// txCtrlLen is the space of one UDP_SEGMENT control message.
var txCtrlLen = unix.CmsgSpace(2)

func (p *Port) newTxScratch() *txScratch {
	s := &txScratch{
		msgs:   make([]mmsghdr, txMsgs),
		info:   make([]txMsg, txMsgs),
		names:  make([]unix.RawSockaddrInet4, txMsgs),
		ctrl:   make([]byte, txMsgs*txCtrlLen),
		iovs:   make([]unix.Iovec, txMsgs+p.batch),
		order:  make([]int, p.batch),
		sockOf: make([]int, p.batch),
		count:  make([]int, len(p.tx)+1),
		seg:    make([]byte, segSpace),
		sizes:  make([]int, maxSegsPerSend),
	}
	for i := range s.msgs {
		n := &s.names[i]
		n.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&n.Port))[:], uint16(p.dstPort))
		h := &s.msgs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(n))
		h.Namelen = unix.SizeofSockaddrInet4
		c := (*unix.Cmsghdr)(unsafe.Pointer(&s.ctrl[i*txCtrlLen]))
		c.Level = unix.SOL_UDP
		c.Type = unix.UDP_SEGMENT
		c.SetLen(unix.CmsgLen(2))
	}
	s.sendFn = s.sendmmsg
	return s
}

// txResult is what one Write did.
type txResult struct {
	frames, failed int    // frames sent, frames lost
	dgrams, bytes  uint64 // datagrams sent, their inner frame bytes
	err            error  // the first error
	closed         bool   // a socket is closed: give up
}

func (r *txResult) setErr(err error) {
	if r.err == nil {
		r.err = fmt.Errorf("vxlan: write: %w", err)
	}
	if errors.Is(err, net.ErrClosed) {
		r.closed = true
	}
}

// Write sends frame i, bufs[i][offset:offset+meta[i].Size], to
// meta[i].Tunnel.Addr on the tunnel's UDP port with VNI meta[i].Tunnel.VNI,
// from the send socket meta[i].Hash picks. A complete frame gets the VXLAN
// header written into bufs[i][offset-HeaderLen:offset] and is sent in
// place (its partial checksum, if meta[i].GSO says so, completed first); a
// TCP or UDP super-frame (meta[i].GSO.Type GSOTCPv4, GSOTCPv6 or
// GSOUDPL4) is cut into segments of meta[i].GSO.Size payload bytes, each
// its own VXLAN datagram. It may be called concurrently.
//
// It returns the number of frames sent. A frame whose send fails is
// counted in Stats().TxErrors and skipped, and the rest are still sent;
// the first such error is returned (wrapped) with the count. After Close
// it gives up at the first failure with an error for which
// errors.Is(err, net.ErrClosed) holds.
func (p *Port) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	if offset < HeaderLen {
		return 0, ErrHeadroom
	}
	n := min(len(bufs), len(meta))
	s := p.txPool.Get().(*txScratch)
	var r txResult
	for start := 0; start < n && !r.closed; start += len(s.order) {
		end := min(n, start+len(s.order))
		s.gso = p.gso.Load()
		p.build(s, bufs[start:end], meta[start:end], offset, &r)
		p.flush(s, &r)
	}
	p.txPool.Put(s)
	if r.dgrams > 0 {
		p.stats.txPackets.Add(r.dgrams)
		p.stats.txBytes.Add(r.bytes)
	}
	if r.failed > 0 {
		p.stats.txErrors.Add(uint64(r.failed))
	}
	return r.frames, r.err
}

// build turns the frames of one round into messages, in send-socket order.
func (p *Port) build(s *txScratch, bufs [][]byte, meta []port.Meta, offset int, r *txResult) {
	count := s.count
	clear(count)
	for i := range meta {
		k := p.socketFor(meta[i].Hash)
		s.sockOf[i] = k
		count[k+1]++
	}
	for k := 1; k < len(count); k++ {
		count[k] += count[k-1]
	}
	for i := range meta {
		k := s.sockOf[i]
		s.order[count[k]] = i
		count[k]++
	}
	for _, i := range s.order[:len(meta)] {
		m := &meta[i]
		b := bufs[i]
		if m.Size < 0 || len(b)-offset < m.Size {
			r.failed++
			r.setErr(ErrHeadroom)
			continue
		}
		if m.GSO.IsGSO() {
			p.addSuper(s, b[offset:offset+m.Size], m, s.sockOf[i], r)
			continue
		}
		if m.GSO.NeedsCsum {
			completeCsum(b[offset:offset+m.Size], m.GSO)
		}
		p.addDatagram(s, Encap(b, offset, m.Size, m.Tunnel.VNI), m, s.sockOf[i], r)
	}
}

// addDatagram adds one complete frame's datagram, to the last message's
// train if it fits there.
func (p *Port) addDatagram(s *txScratch, dg []byte, m *port.Meta, sock int, r *txResult) {
	if s.nmsg == len(s.msgs) || s.niov == len(s.iovs) {
		p.flush(s, r)
	}
	if s.nmsg > 0 {
		t := &s.info[s.nmsg-1]
		if t.open && t.sock == sock && t.dst == m.Tunnel.Addr && t.segs < gsoMaxSegs &&
			len(dg) <= t.seg && t.wire+len(dg) <= gsoMaxPayload {
			s.addIov(t, dg)
			t.segs++
			t.frames++
			t.bytes += m.Size
			t.wire += len(dg)
			t.open = len(dg) == t.seg
			return
		}
	}
	t := s.newMsg(sock, m.Tunnel.Addr)
	*t = txMsg{sock: sock, dst: m.Tunnel.Addr, iov0: s.niov, segs: 1, seg: len(dg), frames: 1,
		bytes: m.Size, wire: len(dg), open: s.gso}
	s.addIov(t, dg)
}

// addSuper cuts a super-frame into datagrams in the scratch space and adds
// them as messages.
func (p *Port) addSuper(s *txScratch, frame []byte, m *port.Meta, sock int, r *txResult) {
	if s.nmsg+maxSegsPerSend > len(s.msgs) || s.niov+maxSegsPerSend > len(s.iovs) {
		p.flush(s, r)
	}
	cnt, err := packet.Segment(s.seg[s.segOff:], frame, m.GSO, HeaderLen, s.sizes)
	if errors.Is(err, packet.ErrGSOSpace) && s.segOff > 0 {
		p.flush(s, r) // frees the whole space
		cnt, err = packet.Segment(s.seg, frame, m.GSO, HeaderLen, s.sizes)
	}
	if err != nil {
		r.failed++
		r.setErr(fmt.Errorf("segment: %w", err))
		return
	}
	start := s.segOff
	off := start
	for k := range cnt {
		PutHeader(s.seg[off:], m.Tunnel.VNI)
		off += HeaderLen + s.sizes[k]
	}
	s.segOff = off
	for k := 0; k < cnt; {
		// A message: segments k..j-1, all of the first one's size except
		// maybe the last, at most gsoMaxSegs and gsoMaxPayload bytes; one
		// segment without UDP GSO.
		dgram := HeaderLen + s.sizes[k]
		j, size := k+1, dgram
		if s.gso {
			for j < cnt && j-k < gsoMaxSegs && size+HeaderLen+s.sizes[j] <= gsoMaxPayload {
				d := HeaderLen + s.sizes[j]
				if d > dgram {
					break
				}
				size += d
				j++
				if d < dgram {
					break
				}
			}
		}
		t := s.newMsg(sock, m.Tunnel.Addr)
		*t = txMsg{sock: sock, dst: m.Tunnel.Addr, iov0: s.niov, segs: j - k, seg: dgram,
			wire: size, bytes: size - (j-k)*HeaderLen, super: true, more: j < cnt}
		if !t.more {
			t.frames = 1
		}
		s.addIov(t, s.seg[start:start+size])
		start += size
		k = j
	}
}

// newMsg starts message s.nmsg to dst; the caller fills its txMsg.
func (s *txScratch) newMsg(sock int, dst [4]byte) *txMsg {
	x := s.nmsg
	s.nmsg++
	s.names[x].Addr = dst
	return &s.info[x]
}

// addIov appends b to message t's iovecs.
func (s *txScratch) addIov(t *txMsg, b []byte) {
	v := &s.iovs[s.niov]
	v.Base = &b[0]
	v.SetLen(len(b))
	s.niov++
	t.niov++
}

// flush sends every message built so far and empties the scratch.
func (p *Port) flush(s *txScratch, r *txResult) {
	for x := range s.nmsg {
		t := &s.info[x]
		h := &s.msgs[x].hdr
		h.Iov = &s.iovs[t.iov0]
		h.SetIovlen(t.niov)
		if t.segs > 1 {
			c := s.ctrl[x*txCtrlLen : (x+1)*txCtrlLen]
			binary.NativeEndian.PutUint16(c[unix.SizeofCmsghdr:], uint16(t.seg))
			h.Control = &c[0]
			h.SetControllen(txCtrlLen)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
	}
	for a := 0; a < s.nmsg; {
		b := a + 1
		for b < s.nmsg && s.info[b].sock == s.info[a].sock {
			b++
		}
		if r.closed {
			for a < b {
				a = s.fail(a, r)
			}
			continue
		}
		p.sendRun(s, a, b, r)
		a = b
	}
	for i := range s.niov {
		s.iovs[i].Base = nil // do not keep the caller's buffers alive
	}
	s.nmsg, s.niov, s.segOff = 0, 0, 0
}

// sendRun sends messages a..b-1, all for one socket.
func (p *Port) sendRun(s *txScratch, a, b int, r *txResult) {
	sock := &p.tx[s.info[a].sock]
	for a < b {
		s.cur = s.msgs[a:b]
		err := sock.rc.Write(s.sendFn)
		s.cur = nil
		if err == nil {
			err = s.rerr
		}
		if err == nil && s.rn <= 0 {
			err = io.ErrShortWrite // never seen; guards against spinning
		}
		if err == nil {
			for x := a; x < a+s.rn; x++ {
				r.sent(&s.info[x])
			}
			a += s.rn
			continue
		}
		if p.closed.Load() {
			// The descriptor's own error after Close is os's "use of
			// closed file"; callers look for net.ErrClosed.
			err = net.ErrClosed
		}
		if errors.Is(err, net.ErrClosed) {
			r.setErr(err)
			for a < b {
				a = s.fail(a, r)
			}
			return
		}
		// sendmmsg reports an error only when the first message of the
		// call fails.
		if s.info[a].segs > 1 {
			switch {
			case errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL):
				// The route's device cannot do UDP GSO: fall back for good.
				if p.gso.CompareAndSwap(true, false) {
					p.log.Warn("vxlan: UDP GSO send failed; sending datagram by datagram from now on", "err", err)
				}
				a = p.sendSplit(sock, s, a, r)
				continue
			case errors.Is(err, unix.EMSGSIZE):
				// Datagrams larger than the route's MTU: UDP GSO does
				// not fragment, a plain send does.
				a = p.sendSplit(sock, s, a, r)
				continue
			}
		}
		r.setErr(err)
		a = s.fail(a, r)
	}
}

// sendSplit sends message x's datagrams one by one and returns the next
// message to send.
func (p *Port) sendSplit(sock *txSocket, s *txScratch, x int, r *txResult) int {
	t := &s.info[x]
	one := &s.one[0].hdr
	one.Name, one.Namelen = s.msgs[x].hdr.Name, unix.SizeofSockaddrInet4
	one.Iov = &s.oneIov
	one.SetIovlen(1)
	one.Control = nil
	one.SetControllen(0)
	defer func() { s.oneIov.Base = nil }()
	for _, v := range s.iovs[t.iov0 : t.iov0+t.niov] {
		b := unsafe.Slice(v.Base, int(v.Len))
		for off := 0; off < len(b); off += t.seg {
			d := b[off:min(off+t.seg, len(b))]
			s.oneIov.Base = &d[0]
			s.oneIov.SetLen(len(d))
			s.cur = s.one[:]
			err := sock.rc.Write(s.sendFn)
			s.cur = nil
			if err == nil {
				err = s.rerr
			}
			if err == nil && s.rn != 1 {
				err = io.ErrShortWrite
			}
			if err != nil {
				r.setErr(err)
				return s.fail(x, r)
			}
		}
	}
	r.sent(t)
	return x + 1
}

// sent counts message t as sent.
func (r *txResult) sent(t *txMsg) {
	r.frames += t.frames
	r.dgrams += uint64(t.segs)
	r.bytes += uint64(t.bytes)
}

// fail counts message x as lost and returns the next message to send:
// past the other parts of its super-frame.
func (s *txScratch) fail(x int, r *txResult) int {
	if !s.info[x].super {
		r.failed += s.info[x].frames
		return x + 1
	}
	r.failed++
	for x < s.nmsg-1 && s.info[x].more {
		x++
	}
	return x + 1
}

// sendmmsg is the RawConn callback of one sendmmsg of s.cur; false means
// wait until the socket is writable.
func (s *txScratch) sendmmsg(fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.cur[0])), uintptr(len(s.cur)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		s.rn, s.rerr = int(n), nil
		switch e {
		case 0:
		case unix.EAGAIN:
			// A blocking socket says EAGAIN only when SO_SNDTIMEO ran out.
			s.rn, s.rerr = 0, errSendTimeout
		default:
			s.rn, s.rerr = 0, e
		}
		return true
	}
}

// sendTimeout bounds how long a send waits for buffer space in the
// kernel (SO_SNDTIMEO); the frames are then counted as lost.
const sendTimeout = time.Second

// errSendTimeout is the error of a send that waited sendTimeout.
var errSendTimeout = fmt.Errorf("no send buffer space for %v: %w", sendTimeout, unix.EAGAIN)

// openTx opens a send socket bound to local:port (0: a port the kernel
// picks), outside Go's netpoller: a
// blocking socket whose sends wait in the kernel for buffer space (at most
// sendTimeout). In the netpoller, every packet buffer the kernel frees
// (sock_wfree, at each hop of the underlay) signals write space to Go's
// epoll set and wakes its poller thread for an event nobody waits on; that
// was ≈ 2 % of the machine under one TCP stream (bench/results/history.md).
func openTx(local [4]byte, port int) (txSocket, error) {
	tv := unix.NsecToTimeval(sendTimeout.Nanoseconds())
	f, rc, err := blockingUDP("vxlan-tx", &unix.SockaddrInet4{Addr: local, Port: port},
		// Nobody reads the send sockets; keep what strays into them small.
		intOpt("SO_RCVBUF", unix.SO_RCVBUF, 1),
		sockOpt{"SO_SNDTIMEO", func(fd int) error { return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv) }})
	if err != nil {
		return txSocket{}, err
	}
	var sa unix.Sockaddr
	if cerr := rc.Control(func(fd uintptr) { sa, err = unix.Getsockname(int(fd)) }); cerr != nil || err != nil {
		f.Close()
		return txSocket{}, fmt.Errorf("getsockname: %w", errors.Join(cerr, err))
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		f.Close()
		return txSocket{}, fmt.Errorf("getsockname: not IPv4: %T", sa)
	}
	return txSocket{f: f, rc: rc, port: uint16(in4.Port)}, nil
}
