package ctdiff

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"golang.org/x/sys/unix"
)

// What a pod sees of the traffic is recorded as observations, key ->
// value ("A>B tcp connect" -> "ok"); both sides must record the same.
type observations map[string]string

// blockedWait is how long a pod waits for what a rule set may drop.
const blockedWait = 1500 * time.Millisecond

// in runs fn in p's namespace (sockets it opens stay there).
func in(p pod, fn func() error) error { return netconf.Do(netconf.NsPath(p.ns), fn) }

// listen opens a listening socket of network ("tcp" or "udp") on p's
// address and port, in p's namespace.
func listen(p pod, network string, port int) (io.Closer, error) {
	addr := netip.AddrPortFrom(p.ip, uint16(port)).String()
	var c io.Closer
	err := in(p, func() (err error) {
		if network == "udp" {
			c, err = net.ListenPacket(network, addr)
		} else {
			c, err = net.Listen(network, addr)
		}
		return err
	})
	return c, err
}

// dial connects from p's namespace to dst (TCP: within blockedWait).
func dial(p pod, network string, dst netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := in(p, func() (err error) {
		c, err = net.DialTimeout(network, dst.String(), blockedWait)
		return err
	})
	return c, err
}

// kind classifies an error as the pods see it.
func kind(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return err.Error()
}

// tcpEcho: server listens on lport; client connects to dst, sends 200 KB
// (TSO super-frames on the gvs side) and a FIN, and reads the echo back
// to its end. Records the connect, whether the echo came back whole and
// how it ended, and the address the server saw the client from.
func tcpEcho(ctx context.Context, o observations, key string, client, server pod, dst netip.AddrPort, lport int) error {
	l, err := listen(server, "tcp", lport)
	if err != nil {
		return err
	}
	defer l.Close()
	ln := l.(net.Listener)
	peer := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			peer <- "none"
			return
		}
		defer c.Close()
		peer <- netip.MustParseAddrPort(c.RemoteAddr().String()).Addr().String()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.Copy(c, c)
		c.(*net.TCPConn).CloseWrite()
	}()
	c, err := dial(client, "tcp", dst)
	o[key+" tcp connect"] = kind(err)
	if err != nil {
		return nil
	}
	defer c.Close()
	msg := make([]byte, 200<<10)
	rand.Read(msg)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	o[key+" tcp echo"] = strconv.FormatBool(err == nil && bytes.Equal(got, msg))
	o[key+" tcp write"] = kind(<-werr)
	o[key+" tcp end"] = kind(err) // ReadAll: nil at the peer's FIN
	select {
	case p := <-peer:
		o[key+" tcp peer"] = p
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// tcpRefused: client connects to a port nobody listens on.
func tcpRefused(o observations, key string, client pod, dst netip.AddrPort) error {
	c, err := dial(client, "tcp", dst)
	if err == nil {
		c.Close()
	}
	o[key+" tcp closed port"] = kind(err)
	return nil
}

// tcpAbort: client connects and aborts the connection with a RST
// (SO_LINGER 0); records what the server's read gets.
func tcpAbort(o observations, key string, client, server pod, dst netip.AddrPort, lport int) error {
	l, err := listen(server, "tcp", lport)
	if err != nil {
		return err
	}
	defer l.Close()
	ln := l.(net.Listener)
	c, err := dial(client, "tcp", dst)
	if err != nil {
		o[key+" tcp abort"] = "connect " + kind(err)
		return nil
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(blockedWait))
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		o[key+" tcp abort"] = "accept " + kind(err)
		return nil
	}
	defer s.Close()
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	s.SetReadDeadline(time.Now().Add(blockedWait))
	_, err = s.Read(make([]byte, 1))
	o[key+" tcp abort"] = kind(err)
	return nil
}

// udpEcho: server answers one datagram; client sends to dst from a
// connected socket and reads the answer (which must come from dst).
// Records the answer and the address the server saw.
func udpEcho(o observations, key string, client, server pod, dst netip.AddrPort, lport int) error {
	l, err := listen(server, "udp", lport)
	if err != nil {
		return err
	}
	defer l.Close()
	sc := l.(net.PacketConn)
	peer := make(chan string, 1)
	go func() {
		sc.SetReadDeadline(time.Now().Add(2 * blockedWait))
		b := make([]byte, 2048)
		n, from, err := sc.ReadFrom(b)
		if err != nil {
			peer <- "none"
			return
		}
		peer <- netip.MustParseAddrPort(from.String()).Addr().String()
		sc.WriteTo(b[:n], from)
	}()
	c, err := dial(client, "udp", dst)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(blockedWait))
	_, err = c.Write([]byte("ping over udp"))
	if err == nil {
		b := make([]byte, 64)
		var n int
		n, err = c.Read(b)
		if err == nil && string(b[:n]) != "ping over udp" {
			err = errors.New("wrong answer")
		}
	}
	o[key+" udp answer"] = kind(err)
	o[key+" udp peer"] = <-peer
	return nil
}

// udpClosed: client sends to a closed port; a port unreachable that
// reaches it makes its read fail with "refused".
func udpClosed(o observations, key string, client pod, dst netip.AddrPort) error {
	c, err := dial(client, "udp", dst)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(blockedWait))
	_, err = c.Write([]byte("anyone?"))
	if err == nil {
		_, err = c.Read(make([]byte, 16))
	}
	o[key+" udp closed port"] = kind(err)
	return nil
}

var receivedRE = regexp.MustCompile(`(\d+) received`)

// ping sends 3 echo requests of size bytes of payload; records how many
// replies came back.
func ping(ctx context.Context, s *side, o observations, key string, client pod, dst netip.Addr, size int) error {
	out, _ := s.exec(ctx, client, "ping", "-n", "-q", "-c", "3", "-i", "0.2", "-W", "1", "-s", strconv.Itoa(size), dst.String())
	m := receivedRE.FindSubmatch(out)
	if m == nil {
		return fmt.Errorf("ping %s from %s: %s", dst, client.name, out)
	}
	o[key+" ping "+strconv.Itoa(size)] = string(m[1])
	return nil
}

// packetSocket is an AF_PACKET socket on a pod's eth0, to see the frames
// that reach it and to write frames of our own.
type packetSocket struct {
	fd      int
	ifindex int
}

func openPacket(p pod) (*packetSocket, error) {
	s := &packetSocket{fd: -1}
	err := in(p, func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		s.ifindex = ifi.Index
		// ETH_P_ALL: a socket bound to one protocol sees only what comes
		// in, and the client's own segments are needed too.
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		s.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil && s.fd >= 0 {
		unix.Close(s.fd)
	}
	return s, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (s *packetSocket) Close() error { return unix.Close(s.fd) }

// drain discards the frames already queued.
func (s *packetSocket) drain() {
	b := make([]byte, 70000)
	for {
		if _, _, err := unix.Recvfrom(s.fd, b, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

func (s *packetSocket) write(frame []byte) error {
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.ifindex, Halen: 6})
}

// waitFor reads frames until match accepts one (true) or d passes (false).
func (s *packetSocket) waitFor(d time.Duration, match func(f []byte) bool) (bool, error) {
	deadline := time.Now().Add(d)
	b := make([]byte, 70000)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return false, err
		}
		n, _, err := unix.Recvfrom(s.fd, b, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, err
		}
		if match(b[:n]) {
			return true, nil
		}
	}
}

// probeWindow is the window of the segments tcpWindow writes, which tells
// them from the kernel's.
const probeWindow = 1234

// tcpSeg is what waitFor and craft need of a TCP segment.
type tcpSeg struct {
	src, dst     netip.AddrPort
	seq, ack     uint32
	flags        uint8
	win          uint16
	payload      int
	srcMAC, dMAC net.HardwareAddr
}

func parseTCP(f []byte) (tcpSeg, bool) {
	if len(f) < 54 || binary.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != packet.ProtoTCP {
		return tcpSeg{}, false
	}
	ip := f[14:]
	ihl := int(ip[0]&15) * 4
	tl := int(binary.BigEndian.Uint16(ip[2:]))
	if tl > len(ip) || ihl+20 > tl {
		return tcpSeg{}, false
	}
	tcp := ip[ihl:tl]
	return tcpSeg{
		src:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(tcp[0:])),
		dst:     netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(tcp[2:])),
		seq:     binary.BigEndian.Uint32(tcp[4:]),
		ack:     binary.BigEndian.Uint32(tcp[8:]),
		flags:   tcp[13],
		win:     binary.BigEndian.Uint16(tcp[14:]),
		payload: tl - ihl - int(tcp[12]>>4)*4,
	}, true
}

// craft builds an Ethernet/IPv4/TCP frame for s with correct checksums.
func craft(s tcpSeg) []byte {
	f := make([]byte, 14+20+20+s.payload)
	copy(f[0:6], s.dMAC)
	copy(f[6:12], s.srcMAC)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, packet.ProtoTCP
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	a, b := s.src.Addr().As4(), s.dst.Addr().As4()
	copy(ip[12:], a[:])
	copy(ip[16:], b[:])
	binary.BigEndian.PutUint16(ip[10:], ^packet.Checksum(ip[:20], 0))
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], s.src.Port())
	binary.BigEndian.PutUint16(tcp[2:], s.dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], s.seq)
	binary.BigEndian.PutUint32(tcp[8:], s.ack)
	tcp[12], tcp[13] = 5<<4, s.flags
	binary.BigEndian.PutUint16(tcp[14:], probeWindow)
	binary.BigEndian.PutUint16(tcp[16:], ^packet.Checksum(tcp, packet.PseudoHeaderSum(a[:], b[:], packet.ProtoTCP, len(tcp))))
	return f
}

// tcpWindow opens a connection from client to server, then writes
// segments of that connection as raw frames from the client and records
// which of them reach the server's interface: a pure ACK inside the
// window, data far outside it, data acknowledging what the server never
// sent, and SYN+FIN (an impossible combination).
func tcpWindow(o observations, key string, client, server pod, lport int) error {
	capC, err := openPacket(client)
	if err != nil {
		return err
	}
	defer capC.Close()
	capS, err := openPacket(server)
	if err != nil {
		return err
	}
	defer capS.Close()
	l, err := listen(server, "tcp", lport)
	if err != nil {
		return err
	}
	defer l.Close()
	ln := l.(net.Listener)
	c, err := dial(client, "tcp", netip.AddrPortFrom(server.ip, uint16(lport)))
	if err != nil {
		o[key+" tcp window"] = "connect " + kind(err)
		return nil
	}
	defer c.Close()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(blockedWait))
	s, err := ln.Accept()
	if err != nil {
		return err
	}
	defer s.Close()
	// One exchange of data, and the last segment the client sends with
	// the server's acknowledgement of it: the connection's state.
	if _, err := c.Write([]byte("hello")); err != nil {
		return err
	}
	s.SetReadDeadline(time.Now().Add(blockedWait))
	if _, err := io.ReadFull(s, make([]byte, 5)); err != nil {
		return err
	}
	local := netip.MustParseAddrPort(c.LocalAddr().String())
	var last tcpSeg
	if _, err := s.Write([]byte("world")); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(blockedWait))
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		return err
	}
	// The client's ACK of "world" is its latest segment: find the
	// server's segment of "world" among what the client's socket saw,
	// then the client's pure ACK of it.
	server4 := netip.AddrPortFrom(server.ip, uint16(lport))
	var worldEnd uint32
	seen := false
	ok, err := capC.waitFor(blockedWait, func(f []byte) bool {
		t, ok := parseTCP(f)
		switch {
		case !ok:
		case t.src == server4 && t.dst == local && t.payload == 5:
			worldEnd, seen = t.seq+5, true
		case seen && t.src == local && t.payload == 0 && t.ack == worldEnd:
			last = t
			return true
		}
		return false
	})
	if err != nil || !ok {
		return fmt.Errorf("the client's ACK was not seen (%v)", err)
	}
	base := tcpSeg{src: local, dst: last.dst, seq: last.seq, ack: last.ack, srcMAC: client.mac, dMAC: server.mac}
	probes := []struct {
		name string
		seg  tcpSeg
	}{
		{"in-window ack", tcpSeg{flags: packet.TCPFlagACK}},
		{"out-of-window data", tcpSeg{flags: packet.TCPFlagACK | packet.TCPFlagPSH, payload: 100, seq: 1 << 30}},
		{"ack of unsent data", tcpSeg{flags: packet.TCPFlagACK | packet.TCPFlagPSH, payload: 10, ack: 1 << 30}},
		{"syn+fin", tcpSeg{flags: packet.TCPFlagSYN | packet.TCPFlagFIN}},
	}
	for _, p := range probes {
		seg := base
		seg.flags, seg.payload = p.seg.flags, p.seg.payload
		seg.seq += p.seg.seq
		seg.ack += p.seg.ack
		capS.drain()
		if err := capC.write(craft(seg)); err != nil {
			return err
		}
		got, err := capS.waitFor(blockedWait/2, func(f []byte) bool {
			t, ok := parseTCP(f)
			return ok && t.src == local && t.seq == seg.seq && t.ack == seg.ack && t.flags == seg.flags && t.win == probeWindow
		})
		if err != nil {
			return err
		}
		o[key+" tcp "+p.name] = map[bool]string{true: "delivered", false: "dropped"}[got]
	}
	return nil
}
