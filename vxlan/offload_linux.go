//go:build linux

package vxlan

// Offloads of the tunnel port (docs/architecture.md "Offloads"): a raw recvmmsg receive path
// that allocates nothing, UDP GRO on the receive socket with GRO-style
// coalescing of the inner TCP segments, and TCP segmentation of
// super-frames with UDP GSO (UDP_SEGMENT) on the send sockets.
//
// Receive (ReadTunnel, ReadTunnelGSO): recvmmsg reads up to rxMsgs
// datagrams into buffers the port owns, with the source address in a
// preallocated sockaddr and, with UDP_GRO, the segment size in a control
// message: one "message" is then up to 64 KiB of equal-size datagrams of
// one outer 4-tuple. Each datagram is checked as before (peer, header,
// length) and its inner frame copied into the caller's buffer; with
// ReadTunnelGSO, consecutive inner TCP segments of one flow are merged
// into one super-frame (packet.TCPCoalescer) described by a GSOTCPv4
// packet.GSO, so a TAP hands the pod one large segment; with
// Config.CoalesceUDP, consecutive UDP datagrams of one flow likewise
// (packet.UDPCoalescer, GSOUDPL4). What does not fit
// in the caller's buffers stays for the next call.
//
// Transmit (WriteTunnelGSO): complete frames go the sendmmsg way of
// WriteTunnel. A TCP super-frame is segmented (packet.SegmentTCP) into a
// per-writer scratch buffer laid out as back-to-back VXLAN datagrams and,
// when the kernel has UDP_SEGMENT, sent with one sendmsg per up to 64
// datagrams / 64 KiB, the kernel cutting it into datagrams; otherwise with
// sendmmsg, one message per segment.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/gvswitch/gvs/packet"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// udpGRO is the UDP_GRO socket option (linux/udp.h), missing from x/sys.
const udpGRO = 104

// Offload sizes.
const (
	groMsgs        = 8     // recvmmsg messages per call with GRO (each up to 64 KiB)
	groBufLen      = 65536 // a GRO message's buffer
	plainBufLen    = 9216 + HeaderLen + 1
	ctrlLen        = 64    // control buffer per message (one int cmsg)
	gsoMaxSegs     = 64    // UDP_MAX_SEGMENTS on older kernels
	gsoMaxPayload  = 65507 // largest UDP payload of one IPv4 datagram
	maxSegsPerSend = 128   // segments of one super-frame (MSS ≥ 512)
)

// mmsghdr is struct mmsghdr of recvmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// rxState is the raw receive path's state, owned by the reader.
type rxState struct {
	rc    syscall.RawConn
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
	fn    func(fd uintptr) bool
	co    packet.Coalescer
	// coalesceUDP is co.UDP as set from outside (SetCoalesceUDP); the
	// reader copies it into co at each read.
	coalesceUDP atomic.Bool
}

// listenRx opens a receive socket on laddr, with SO_REUSEPORT if shared.
func listenRx(laddr *net.UDPAddr, shared bool) (*net.UDPConn, error) {
	var lc net.ListenConfig
	if shared {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("SO_REUSEPORT: %w", serr)
			}
			return nil
		}
	}
	c, err := lc.ListenPacket(context.Background(), "udp4", laddr.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.UDPConn), nil
}

// initRx sets up a receive state for every receive socket.
func (p *Port) initRx(gro bool) error {
	for _, rx := range p.rx {
		rc, err := rx.SyscallConn()
		if err != nil {
			return fmt.Errorf("vxlan: %w", err)
		}
		p.rxs = append(p.rxs, p.newRxState(rc, gro))
	}
	return nil
}

func (p *Port) newRxState(rc syscall.RawConn, gro bool) *rxState {
	n, size := p.batch, plainBufLen
	if gro {
		n, size = min(p.batch, groMsgs), groBufLen
	}
	st := &rxState{
		rc:    rc,
		msgs:  make([]mmsghdr, n),
		iovs:  make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet4, n),
		ctrl:  make([]byte, n*ctrlLen),
		bufs:  make([][]byte, n),
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
	return st
}

// recv is the RawConn callback: one recvmmsg; false means wait.
func (st *rxState) recv(fd uintptr) bool {
	for i := range st.msgs {
		h := &st.msgs[i].hdr
		h.Namelen = unix.SizeofSockaddrInet4
		h.SetControllen(ctrlLen)
		h.Flags = 0
	}
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&st.msgs[0])), uintptr(len(st.msgs)), 0, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return false
		}
		if e != 0 {
			st.rn, st.rerr = 0, e
		} else {
			st.rn, st.rerr = int(r), nil
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

// ReadTunnelGSO is ReadTunnel that also coalesces consecutive inner TCP
// segments of one flow (from one peer and VNI) into super-frames,
// described in gso[k]; other frames get zero metadata. Buffers should hold
// offset + packet.MaxSuperFrame bytes for full-size super-frames (smaller
// ones just stop coalescing earlier). It does not allocate.
func (p *Port) ReadTunnelGSO(bufs [][]byte, sizes []int, gso []packet.GSO, eps []Endpoint, offset int) (int, error) {
	return p.read(p.rxs[0], bufs, sizes, gso, eps, offset)
}

// read reads from the receive socket whose state is st.
func (p *Port) read(st *rxState, bufs [][]byte, sizes []int, gso []packet.GSO, eps []Endpoint, offset int) (int, error) {
	if offset < HeaderLen {
		return 0, ErrHeadroom
	}
	st.co.UDP = st.coalesceUDP.Load()
	limit := min(len(bufs), len(sizes), len(eps))
	if gso != nil {
		limit = min(limit, len(gso))
	}
	if limit == 0 {
		return 0, nil
	}
	var drops [NumDropReasons]uint64
	var nbytes uint64
	k := 0
	for k < limit {
		if st.mi >= st.got {
			if k > 0 {
				break
			}
			// Count this batch's drops before blocking for the next one.
			p.addRx(0, 0, &drops)
			drops = [NumDropReasons]uint64{}
			err := st.rc.Read(st.fn)
			if err == nil {
				err = st.rerr
			}
			if err != nil {
				st.got, st.mi, st.moff = 0, 0, 0
				p.addRx(k, nbytes, &drops)
				return 0, fmt.Errorf("vxlan: read: %w", err)
			}
			st.got, st.mi, st.moff = st.rn, 0, 0
			continue
		}
		i := st.mi
		m := &st.msgs[i]
		total := int(m.len)
		src := st.names[i].Addr
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
		ep := Endpoint{Addr: src, VNI: vni}
		if gso != nil && k > 0 && eps[k-1] == ep {
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
		if gso != nil {
			if k > 0 {
				sizes[k-1], gso[k-1] = st.co.Finish()
			}
			st.co.Start(bufs[k][offset:], inner)
		} else {
			copy(bufs[k][offset:], inner)
		}
		sizes[k] = len(inner)
		eps[k] = ep
		nbytes += uint64(len(inner))
		k++
	}
	if gso != nil && k > 0 {
		sizes[k-1], gso[k-1] = st.co.Finish()
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

// gsoScratch is one writer's segmentation buffer, reused through
// Port.gsoPool.
type gsoScratch struct {
	buf   []byte
	sizes []int
	oob   []byte
	to    unix.SockaddrInet4
	// The current sendmsg, for the RawConn callback.
	pkt  []byte
	n    int
	err  error
	fn   func(fd uintptr) bool
	msgs []ipv4.Message
	addr net.UDPAddr
	// sendIovecs' message.
	hdr   unix.Msghdr
	name  unix.RawSockaddrInet4
	iovs  []unix.Iovec
	iovFn func(fd uintptr) bool
}

func newGSOScratch() *gsoScratch {
	s := &gsoScratch{
		buf:   make([]byte, packet.MaxSuperFrame+maxSegsPerSend*(HeaderLen+packet.EthernetLen+60+60)),
		sizes: make([]int, maxSegsPerSend),
		oob:   make([]byte, unix.CmsgSpace(2)),
		msgs:  make([]ipv4.Message, maxSegsPerSend),
	}
	s.addr.IP = make(net.IP, 4)
	for i := range s.msgs {
		s.msgs[i].Buffers = make([][]byte, 1)
		s.msgs[i].Addr = &s.addr
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&s.oob[0]))
	h.Level = unix.SOL_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	s.fn = s.send
	s.iovFn = s.sendmsgIov
	s.iovs = make([]unix.Iovec, gsoMaxSegs)
	return s
}

// send is the RawConn callback of one UDP GSO sendmsg.
func (s *gsoScratch) send(fd uintptr) bool {
	for {
		n, err := unix.SendmsgN(int(fd), s.pkt, s.oob, &s.to, 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		s.n, s.err = n, err
		return true
	}
}

// WriteTunnelGSO is WriteTunnel for frames with offload metadata: a TCP or
// UDP super-frame (gso[i].Type GSOTCPv4, GSOTCPv6 or GSOUDPL4) is cut into
// segments (datagrams) of gso[i].Size payload bytes, each sent as its own
// VXLAN datagram (with UDP GSO where the kernel has it); a frame with only a partial checksum has
// it completed; other frames are sent as by WriteTunnel. It returns the
// number of frames (not segments) sent.
func (p *Port) WriteTunnelGSO(bufs [][]byte, gso []packet.GSO, eps []Endpoint, offset int) (int, error) {
	if offset < HeaderLen {
		return 0, ErrHeadroom
	}
	n := min(len(bufs), len(eps))
	sent := 0
	var firstErr error
	for i := 0; i < n; {
		// A run of complete frames goes out through WriteTunnel.
		j := i
		for j < n && (j >= len(gso) || !gso[j].IsGSO()) {
			if j < len(gso) && gso[j].NeedsCsum {
				completeCsum(bufs[j][offset:], gso[j])
			}
			j++
		}
		if j > i {
			m, err := p.writeRun(bufs[i:j], eps[i:j], offset)
			sent += m
			if err != nil && firstErr == nil {
				firstErr = err
			}
			i = j
			continue
		}
		if err := p.writeSuper(bufs[i][offset:], gso[i], eps[i]); err != nil {
			p.stats.txErrors.Add(1)
			if firstErr == nil {
				firstErr = err
			}
		} else {
			sent++
		}
		i++
	}
	return sent, firstErr
}

// writeRun sends complete frames. With UDP GSO, consecutive frames of one
// size for one destination and send socket (a burst of one flow, or of
// flows hashed to one socket) go out in one sendmsg whose iovecs point at
// the frames in place, the kernel cutting it into datagrams; the others
// go out through WriteTunnel, in order.
func (p *Port) writeRun(bufs [][]byte, eps []Endpoint, offset int) (int, error) {
	if !p.gso.Load() || len(bufs) < 2 {
		return p.WriteTunnel(bufs, eps, offset)
	}
	s := p.gsoPool.Get().(*gsoScratch)
	defer p.gsoPool.Put(s)
	sent, plain := 0, 0 // frames sent; start of the frames not yet sent
	var firstErr error
	for i := 0; i < len(bufs); {
		frame := bufs[i][offset:]
		dgram := HeaderLen + len(frame)
		sock := p.socketFor(frame)
		j, total := i+1, dgram
		for j < len(bufs) && j-i < gsoMaxSegs && eps[j] == eps[i] {
			f := bufs[j][offset:]
			d := HeaderLen + len(f)
			if d > dgram || total+d > gsoMaxPayload || p.socketFor(f) != sock {
				break
			}
			total += d
			j++
			if d < dgram {
				break
			}
		}
		if j-i < 2 {
			i++
			continue
		}
		sent += p.writePlain(bufs[plain:i], eps[plain:i], offset, &firstErr)
		var nbytes uint64
		for k := i; k < j; k++ {
			b := Encap(bufs[k], offset, len(bufs[k])-offset, eps[k].VNI)
			s.iovs[k-i].Base = &b[0]
			s.iovs[k-i].SetLen(len(b))
			nbytes += uint64(len(b) - HeaderLen)
		}
		err := p.sendIovecs(&p.tx[sock], s, j-i, dgram, eps[i])
		for k := range j - i {
			s.iovs[k].Base = nil
		}
		if errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) {
			// The route's device cannot do UDP GSO: fall back for good.
			p.gso.Store(false)
			p.log.Warn("vxlan: UDP GSO send failed; falling back to sendmmsg", "err", err)
			sent += p.writePlain(bufs[i:j], eps[i:j], offset, &firstErr)
		} else if err != nil {
			p.stats.txErrors.Add(uint64(j - i))
			if firstErr == nil {
				firstErr = err
			}
		} else {
			sent += j - i
			p.stats.txPackets.Add(uint64(j - i))
			p.stats.txBytes.Add(nbytes)
		}
		i, plain = j, j
	}
	sent += p.writePlain(bufs[plain:], eps[plain:], offset, &firstErr)
	return sent, firstErr
}

// writePlain sends frames through WriteTunnel, keeping the first error.
func (p *Port) writePlain(bufs [][]byte, eps []Endpoint, offset int, firstErr *error) int {
	if len(bufs) == 0 {
		return 0
	}
	m, err := p.WriteTunnel(bufs, eps, offset)
	if err != nil && *firstErr == nil {
		*firstErr = err
	}
	return m
}

// sendIovecs sends s.iovs[:n] as one UDP GSO sendmsg of datagrams of
// dgram bytes to ep.
func (p *Port) sendIovecs(sock *txSocket, s *gsoScratch, n, dgram int, ep Endpoint) error {
	s.name.Family = unix.AF_INET
	s.name.Addr = ep.Addr
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&s.name.Port))[:], uint16(p.dstPort))
	binary.NativeEndian.PutUint16(s.oob[unix.SizeofCmsghdr:], uint16(dgram))
	h := &s.hdr
	h.Name = (*byte)(unsafe.Pointer(&s.name))
	h.Namelen = unix.SizeofSockaddrInet4
	h.Iov = &s.iovs[0]
	h.SetIovlen(n)
	h.Control = &s.oob[0]
	h.SetControllen(len(s.oob))
	err := sock.rc.Write(s.iovFn)
	if err == nil {
		err = s.err
	}
	if err != nil {
		return fmt.Errorf("vxlan: write: %w", err)
	}
	return nil
}

// sendmsgIov is the RawConn callback of sendIovecs.
func (s *gsoScratch) sendmsgIov(fd uintptr) bool {
	for {
		_, _, e := unix.Syscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&s.hdr)), 0)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			return false
		}
		s.err = nil
		if e != 0 {
			s.err = e
		}
		return true
	}
}

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

// writeSuper segments one super-frame and sends it.
func (p *Port) writeSuper(frame []byte, g packet.GSO, ep Endpoint) error {
	s := p.gsoPool.Get().(*gsoScratch)
	defer p.gsoPool.Put(s)
	cnt, err := packet.Segment(s.buf, frame, g, HeaderLen, s.sizes)
	if err != nil {
		return fmt.Errorf("vxlan: segment: %w", err)
	}
	off := 0
	for k := range cnt {
		PutHeader(s.buf[off:], ep.VNI)
		off += HeaderLen + s.sizes[k]
	}
	sock := &p.tx[p.socketFor(frame)]
	var nbytes uint64
	start := 0
	for k := 0; k < cnt; {
		// A send: segments k..j-1, all of the first one's size except
		// possibly the last, at most gsoMaxSegs and gsoMaxPayload bytes.
		dgram := HeaderLen + s.sizes[k]
		j, size := k, 0
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
		pkt := s.buf[start : start+size]
		if err := p.sendSegments(sock, s, pkt, dgram, j-k, ep); err != nil {
			return err
		}
		for x := k; x < j; x++ {
			nbytes += uint64(s.sizes[x])
		}
		p.stats.txPackets.Add(uint64(j - k))
		start += size
		k = j
	}
	p.stats.txBytes.Add(nbytes)
	return nil
}

// sendSegments sends pkt, cnt datagrams of dgram bytes (the last maybe
// shorter), to ep: one UDP GSO sendmsg, or sendmmsg without GSO.
func (p *Port) sendSegments(sock *txSocket, s *gsoScratch, pkt []byte, dgram, cnt int, ep Endpoint) error {
	if p.gso.Load() && cnt > 1 {
		s.to.Port = p.dstPort
		s.to.Addr = ep.Addr
		binary.NativeEndian.PutUint16(s.oob[unix.SizeofCmsghdr:], uint16(dgram))
		s.pkt = pkt
		err := sock.rc.Write(s.fn)
		s.pkt = nil
		if err == nil {
			err = s.err
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EIO) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("vxlan: write: %w", err)
		}
		// The route's device cannot do UDP GSO: fall back for good.
		p.gso.Store(false)
		p.log.Warn("vxlan: UDP GSO send failed; falling back to sendmmsg", "err", err)
	}
	copy(s.addr.IP, ep.Addr[:])
	s.addr.Port = p.dstPort
	for x := range cnt {
		b := pkt[x*dgram : min((x+1)*dgram, len(pkt))]
		s.msgs[x].Buffers[0] = b
	}
	r := sendAll(sock.pc, s.msgs[:cnt])
	for x := range cnt {
		s.msgs[x].Buffers[0] = nil
	}
	return r.err
}

// probeOffloads enables UDP GRO on the receive sockets (in use only if
// every one takes it) and checks for UDP GSO on the first send socket.
func (p *Port) probeOffloads() (gro, gso bool) {
	gro = true
	for _, rx := range p.rx {
		ok := false
		if rc, err := rx.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				ok = unix.SetsockoptInt(int(fd), unix.SOL_UDP, udpGRO, 1) == nil
			})
		}
		gro = gro && ok
	}
	if !gro {
		// All or none: a socket left with GRO would hand its reader
		// batches larger than the plain buffers.
		for _, rx := range p.rx {
			if rc, err := rx.SyscallConn(); err == nil {
				_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_UDP, udpGRO, 0) })
			}
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
