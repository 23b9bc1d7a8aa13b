//go:build linux

package vxlan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
)

// Addresses of the test topology, all inside namespaces the tests create:
//
//	ns A: va 192.0.2.1/24 — our Port on 192.0.2.1:4789
//	ns B: vb 192.0.2.2/24 (known peer), 192.0.2.3/24 (unknown peer);
//	      vx0 (kernel vxlan, VNI 42, remote 192.0.2.1) 10.99.0.2/24, MAC vx0MAC;
//	      static neighbor 10.99.0.1 → gvsMAC
var (
	addrA     = netip.MustParseAddr("192.0.2.1")
	addrB     = netip.MustParseAddr("192.0.2.2")
	addrB2    = netip.MustParseAddr("192.0.2.3")
	overlayA  = [4]byte{10, 99, 0, 1}
	overlayB  = [4]byte{10, 99, 0, 2}
	gvsMAC    = [6]byte{2, 0, 0, 0, 0, 1}
	vx0MAC    = [6]byte{2, 0, 0, 0, 0, 2}
	nsCounter atomic.Int32
)

const headroom = 64

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
}

// testNet is two namespaces joined by a veth pair.
type testNet struct{ a, b string }

func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// newTestNet creates the topology above; with kernelVXLAN false, ns B has
// no vx0 (so a test can bind 4789 there itself).
func newTestNet(t testing.TB, kernelVXLAN bool) *testNet {
	t.Helper()
	n := nsCounter.Add(1)
	tn := &testNet{
		a: fmt.Sprintf("gvst-vx-%d-%d-a", os.Getpid(), n),
		b: fmt.Sprintf("gvst-vx-%d-%d-b", os.Getpid(), n),
	}
	for _, ns := range []string{tn.a, tn.b} {
		ip(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v\n%s", ns, err, out)
			}
		})
		ip(t, "-n", ns, "link", "set", "lo", "up")
	}
	ip(t, "-n", tn.a, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", tn.b)
	ip(t, "-n", tn.a, "addr", "add", addrA.String()+"/24", "dev", "va")
	ip(t, "-n", tn.a, "link", "set", "va", "up")
	ip(t, "-n", tn.b, "addr", "add", addrB.String()+"/24", "dev", "vb")
	ip(t, "-n", tn.b, "addr", "add", addrB2.String()+"/24", "dev", "vb")
	ip(t, "-n", tn.b, "link", "set", "vb", "up")
	if kernelVXLAN {
		ip(t, "-n", tn.b, "link", "add", "vx0", "type", "vxlan", "id", "42",
			"remote", addrA.String(), "local", addrB.String(), "dstport", "4789", "dev", "vb")
		ip(t, "-n", tn.b, "link", "set", "vx0", "address", net.HardwareAddr(vx0MAC[:]).String())
		ip(t, "-n", tn.b, "addr", "add", "10.99.0.2/24", "dev", "vx0")
		// No IPv6 on vx0: its MLD reports and neighbour solicitations
		// would reach gvs ahead of the frames the tests wait for.
		ip(t, "netns", "exec", tn.b, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/vx0/disable_ipv6")
		ip(t, "-n", tn.b, "link", "set", "vx0", "up")
		ip(t, "-n", tn.b, "neigh", "add", "10.99.0.1", "lladdr", net.HardwareAddr(gvsMAC[:]).String(),
			"dev", "vx0", "nud", "permanent")
	}
	return tn
}

// inNS runs fn on a locked OS thread switched into the named namespace.
// Sockets fn opens stay in that namespace.
func inNS(t testing.TB, name string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			runtime.LockOSThread()
			orig, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				return err
			}
			defer orig.Close()
			target, err := os.Open("/run/netns/" + name)
			if err != nil {
				runtime.UnlockOSThread()
				return err
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				return fmt.Errorf("setns %s: %w", name, err)
			}
			ferr := fn()
			if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
				// Leave the thread locked: it dies with this goroutine.
				return fmt.Errorf("restore netns: %w", err)
			}
			runtime.UnlockOSThread()
			return ferr
		}()
	}()
	if err := <-errc; err != nil {
		t.Fatalf("in netns %s: %v", name, err)
	}
}

func listenIn(t testing.TB, ns string, cfg Config) *Port {
	t.Helper()
	var p *Port
	inNS(t, ns, func() (err error) {
		p, err = Listen(cfg)
		return err
	})
	t.Cleanup(func() { p.Close() })
	return p
}

func udpIn(t testing.TB, ns string, laddr string) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	inNS(t, ns, func() (err error) {
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(laddr)))
		return err
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// ipDelivered returns namespace ns's count of IP datagrams handed to their
// protocol (Ip InDelivers in /proc/net/snmp). The kernel counts one after
// UDP has queued the datagram on its socket (or dropped it), so a test that
// sent n datagrams waits for the count to grow by n (waitQueued) rather
// than sleeping until they are all there.
func ipDelivered(t testing.TB, ns string) uint64 {
	t.Helper()
	var n uint64
	inNS(t, ns, func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		n, err = snmpValue(string(b), "Ip:", "InDelivers")
		return err
	})
	return n
}

// snmpValue returns the value of field in /proc/net/snmp's lines that
// start with prefix (a line of names, then a line of values).
func snmpValue(snmp, prefix, field string) (uint64, error) {
	var names []string
	for _, line := range strings.Split(snmp, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != prefix {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		if i := slices.Index(names, field); i > 0 && i < len(f) {
			return strconv.ParseUint(f[i], 10, 64)
		}
		break
	}
	return 0, fmt.Errorf("no %s %s in /proc/net/snmp", prefix, field)
}

// waitQueued waits until namespace ns has delivered n IP datagrams more
// than from (ipDelivered): the ones a test sent are all queued on their
// sockets.
func waitQueued(t testing.TB, ns string, from uint64, n int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, fmt.Sprintf("%d datagrams queued in %s", n, ns), func() (bool, error) {
		d := ipDelivered(t, ns) - from
		return d >= uint64(n), fmt.Errorf("%d delivered", d)
	})
}

// batch holds n buffers with headroom, as the switch hands them to ports.
type batch struct {
	bufs [][]byte
	meta []port.Meta
}

func newBatch(n int) *batch {
	b := &batch{bufs: make([][]byte, n), meta: make([]port.Meta, n)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, headroom+2048)
	}
	return b
}

func (b *batch) frame(i int) []byte { return b.bufs[i][headroom : headroom+b.meta[i].Size] }

// withFrame returns a buffer holding frame after the headroom.
func withFrame(frame []byte) []byte {
	buf := make([]byte, headroom+len(frame))
	copy(buf[headroom:], frame)
	return buf
}

// metas describes buffers made by withFrame for Write: frame i goes to ep,
// with gso[i] if given (a complete frame otherwise), its Hash that of
// testHash.
func metas(bufs [][]byte, ep port.Endpoint, gso ...packet.GSO) []port.Meta {
	m := make([]port.Meta, len(bufs))
	for i, b := range bufs {
		m[i] = port.Meta{Size: len(b) - headroom, Tunnel: ep, Hash: testHash(b[headroom:])}
		if i < len(gso) {
			m[i].GSO = gso[i]
		}
	}
	return m
}

// testHash stands in for the switch's flow hash (vswitch.FlowHash): a hash
// of an IPv4 frame's addresses and ports.
func testHash(frame []byte) uint32 {
	if len(frame) < 38 {
		return 0
	}
	return crc32.ChecksumIEEE(frame[26:38])
}

// addrVNI is e without its UDP port, which the sender's kernel picked.
func addrVNI(e port.Endpoint) port.Endpoint {
	e.Port = 0
	return e
}

// readFrames reads until it has want frames or the deadline passes.
func readFrames(t *testing.T, p *Port, b *batch, want int) []port.Endpoint {
	t.Helper()
	if err := p.setReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var eps []port.Endpoint
	var frames [][]byte
	for len(frames) < want {
		n, err := p.Read(b.bufs, b.meta, headroom)
		if err != nil {
			t.Fatalf("Read after %d of %d frames: %v (stats %+v)", len(frames), want, err, p.Stats())
		}
		if n == 0 {
			t.Fatal("Read returned 0 frames without an error")
		}
		for i := range n {
			frames = append(frames, bytes.Clone(b.frame(i)))
			eps = append(eps, b.meta[i].Tunnel)
		}
	}
	// Hand back the frames in b's first slots for the caller.
	for i, f := range frames {
		copy(b.bufs[i][headroom:], f)
		b.meta[i] = port.Meta{Size: len(f), Tunnel: eps[i]}
	}
	return eps
}

func TestKernelInterop(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, true)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: 8, SendSockets: 4})
	ep := port.Endpoint{Addr: addrB.As4(), VNI: 42}
	sockB := udpIn(t, tn.b, "10.99.0.2:7777")

	t.Run("gvs to kernel", func(t *testing.T) {
		msg := []byte("hello from gvs")
		f := udpFrame(vx0MAC, gvsMAC, overlayA, overlayB, 5555, 7777, msg)
		bufs := [][]byte{withFrame(f)}
		n, err := p.Write(bufs, metas(bufs, ep), headroom)
		if n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		sockB.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		m, from, err := sockB.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("kernel did not deliver the frame: %v", err)
		}
		if !bytes.Equal(buf[:m], msg) || from != netip.MustParseAddrPort("10.99.0.1:5555") {
			t.Errorf("got %q from %v", buf[:m], from)
		}
		if s := p.Stats(); s.TxPackets != 1 || s.TxBytes != uint64(len(f)) || s.TxErrors != 0 {
			t.Errorf("stats %+v", s)
		}
	})

	t.Run("kernel to gvs", func(t *testing.T) {
		msg := []byte("hello from the kernel")
		if _, err := sockB.WriteToUDPAddrPort(msg, netip.MustParseAddrPort("10.99.0.1:6666")); err != nil {
			t.Fatal(err)
		}
		b := newBatch(8)
		eps := readFrames(t, p, b, 1)
		if addrVNI(eps[0]) != ep || eps[0].Port == 0 {
			t.Errorf("endpoint = %+v, want %+v and the kernel's source port", eps[0], ep)
		}
		f := b.frame(0)
		eth := packet.Ethernet(f)
		ipv4 := packet.IPv4(eth.Payload())
		if eth.Dst() != gvsMAC || eth.Src() != vx0MAC || !ipv4.Valid() || ipv4.Src() != overlayB || ipv4.Dst() != overlayA {
			t.Fatalf("inner frame %x", f)
		}
		udp := packet.UDP(ipv4.Payload())
		if udp.SrcPort() != 7777 || udp.DstPort() != 6666 || !bytes.Equal(udp[8:], msg) {
			t.Errorf("inner UDP %x", []byte(udp))
		}
	})

	t.Run("ping through the kernel", func(t *testing.T) {
		echo := make([]byte, 8+32)
		echo[0] = 8 // echo request
		binary.BigEndian.PutUint16(echo[4:], 0x4756)
		binary.BigEndian.PutUint16(echo[6:], 1)
		copy(echo[8:], "gvs vxlan ping payload 0123456")
		binary.BigEndian.PutUint16(echo[2:], ipChecksum(echo))
		f := ipv4Frame(vx0MAC, gvsMAC, overlayA, overlayB, packet.ProtoICMP, echo)
		bufs := [][]byte{withFrame(f)}
		if n, err := p.Write(bufs, metas(bufs, ep), headroom); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		b := newBatch(8)
		readFrames(t, p, b, 1)
		ipv4 := packet.IPv4(packet.Ethernet(b.frame(0)).Payload())
		if !ipv4.Valid() || ipv4.Protocol() != packet.ProtoICMP || ipv4.Src() != overlayB {
			t.Fatalf("reply %x", b.frame(0))
		}
		reply := ipv4.Payload()
		if reply[0] != 0 || !bytes.Equal(reply[4:], echo[4:]) {
			t.Errorf("echo reply %x, request %x", reply, echo)
		}
		if addrVNI(b.meta[0].Tunnel) != ep {
			t.Errorf("endpoint %+v", b.meta[0].Tunnel)
		}
	})
}

func TestDropsAndCompaction(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: 16})
	known := udpIn(t, tn.b, "192.0.2.2:0")
	unknown := udpIn(t, tn.b, "192.0.2.3:0")
	dst := netip.AddrPortFrom(addrA, UDPPort)

	vx := func(vni uint32, frame []byte) []byte {
		b := make([]byte, HeaderLen+len(frame))
		PutHeader(b, vni)
		copy(b[HeaderLen:], frame)
		return b
	}
	frame := func(tag byte) []byte {
		return udpFrame(gvsMAC, vx0MAC, overlayB, overlayA, 1000, 2000, []byte{tag, tag, tag})
	}
	badFlags := vx(1, frame('x'))
	badFlags[0] = 0
	reserved := vx(1, frame('y'))
	reserved[7] = 1
	sends := []struct {
		c       *net.UDPConn
		payload []byte
	}{
		{unknown, vx(1, frame('u'))},             // unknown_peer
		{known, vx(1, frame('a'))},               // accepted, slot 0
		{known, []byte{8, 0, 0, 0}},              // malformed
		{known, badFlags},                        // bad_flags
		{known, reserved},                        // bad_flags
		{known, vx(3, make([]byte, 13))},         // short_inner
		{known, vx(MaxVNI, frame('b'))},          // accepted, compacted to slot 1
		{known, vx(0, frame('c')[:MinInnerLen])}, // accepted: a bare Ethernet header
		{known, vx(5, make([]byte, 2048))},       // truncated: the buffers below hold 2040
	}
	from := ipDelivered(t, tn.a)
	for _, s := range sends {
		if _, err := s.c.WriteToUDPAddrPort(s.payload, dst); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, tn.a, from, len(sends)) // all queued, so that one recvmmsg sees them
	b := newBatch(16)
	for i := range b.bufs {
		// Room for HeaderLen+2040 bytes, less than the 2056-byte datagram.
		b.bufs[i] = b.bufs[i][:headroom+2040]
	}
	eps := readFrames(t, p, b, 3)
	want := []port.Endpoint{{Addr: addrB.As4(), VNI: 1}, {Addr: addrB.As4(), VNI: MaxVNI}, {Addr: addrB.As4(), VNI: 0}}
	for i := range want {
		if addrVNI(eps[i]) != want[i] {
			t.Errorf("frame %d endpoint %+v, want %+v", i, eps[i], want[i])
		}
	}
	if !bytes.Equal(b.frame(0), frame('a')) || !bytes.Equal(b.frame(1), frame('b')) ||
		!bytes.Equal(b.frame(2), frame('c')[:MinInnerLen]) {
		t.Errorf("frames %x / %x / %x", b.frame(0), b.frame(1), b.frame(2))
	}
	// The truncated datagram comes last; give the port a chance to drop it.
	known.WriteToUDPAddrPort(vx(9, frame('z')), dst)
	readFrames(t, p, b, 1)
	s := p.Stats()
	wantDrops := [NumDropReasons]uint64{
		DropUnknownPeer: 1, DropMalformed: 1, DropBadFlags: 2, DropShortInner: 1, DropTruncated: 1,
	}
	if s.Drops != wantDrops {
		for r := range NumDropReasons {
			t.Logf("%s: got %d want %d", r, s.Drops[r], wantDrops[r])
		}
		t.Error("drop counters wrong")
	}
	if s.RxPackets != 4 {
		t.Errorf("RxPackets = %d, want 4", s.RxPackets)
	}

	// A peer added at run time is accepted from then on.
	peers.Add(addrB2)
	unknown.WriteToUDPAddrPort(vx(77, frame('n')), dst)
	if eps := readFrames(t, p, b, 1); addrVNI(eps[0]) != (port.Endpoint{Addr: addrB2.As4(), VNI: 77}) {
		t.Errorf("new peer endpoint %+v", eps[0])
	}
}

func TestWriteSourcePorts(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: 8, SendSockets: 4})
	sink := udpIn(t, tn.b, "192.0.2.2:4789")
	ports := p.SourcePorts()
	if len(ports) != 4 {
		t.Fatalf("SourcePorts = %v", ports)
	}
	// 20 frames of 10 flows, two rounds, more than one WriteBatch chunk.
	var bufs [][]byte
	var frames [][]byte
	for round := range 2 {
		for flow := range 10 {
			f := udpFrame(vx0MAC, gvsMAC, overlayA, overlayB, uint16(40000+flow), 53, []byte{byte(round), byte(flow)})
			frames = append(frames, f)
			bufs = append(bufs, withFrame(f))
		}
	}
	meta := metas(bufs, port.Endpoint{Addr: addrB.As4()})
	for i := range meta {
		meta[i].Tunnel.VNI = uint32(i % 10)
	}
	n, err := p.Write(bufs, meta, headroom)
	if n != len(bufs) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := map[[2]byte]uint16{}
	used := map[uint16]bool{}
	wire := make([]byte, p.WireHeaderLen())
	sink.SetReadDeadline(time.Now().Add(5 * time.Second))
	for range bufs {
		buf := make([]byte, 2048)
		m, from, err := sink.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		inner, vni, err := Decap(buf[:m])
		if err != nil {
			t.Fatal(err)
		}
		payload := inner[len(inner)-2:]
		i := int(payload[0])*10 + int(payload[1])
		if !bytes.Equal(inner, frames[i]) || vni != uint32(payload[1]) || from.Addr() != addrA {
			t.Errorf("datagram %d: vni %d from %v, inner %x", i, vni, from, inner)
		}
		if want := p.SourcePortFor(meta[i].Hash); from.Port() != want {
			t.Errorf("flow %d: source port %d, want %d", payload[1], from.Port(), want)
		}
		// The outer headers a capture shows are the wire's.
		p.PutWireHeader(wire, &meta[i], false)
		ip := packet.IPv4(wire[packet.EthernetLen:])
		udp := wire[packet.EthernetLen+20:]
		if ip.Src() != from.Addr().As4() || ip.Dst() != addrB.As4() ||
			binary.BigEndian.Uint16(udp) != from.Port() || binary.BigEndian.Uint16(udp[2:]) != UDPPort ||
			int(binary.BigEndian.Uint16(udp[4:])) != 8+m || !bytes.Equal(udp[8:8+HeaderLen], buf[:HeaderLen]) {
			t.Errorf("datagram %d from %v: PutWireHeader gave %x", i, from, wire)
		}
		used[from.Port()] = true
		got[[2]byte(payload)] = from.Port()
	}
	for flow := range byte(10) {
		if got[[2]byte{0, flow}] != got[[2]byte{1, flow}] {
			t.Errorf("flow %d changed source port between rounds", flow)
		}
	}
	if len(used) < 2 {
		t.Errorf("10 flows used only source ports %v", used)
	}
	if s := p.Stats(); s.TxPackets != 20 || s.TxErrors != 0 {
		t.Errorf("stats %+v", s)
	}

	// Steady-state sends allocate nothing.
	if raceEnabled {
		return
	}
	allocs := testing.AllocsPerRun(50, func() {
		for i := range bufs[:8] {
			copy(bufs[i][headroom:], frames[i])
		}
		if n, err := p.Write(bufs[:8], meta[:8], headroom); n != 8 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("Write: %v allocs per batch, want 0", allocs)
	}
}

// TestSendSocketsBlocking: the send sockets stay out of Go's netpoller
// (blocking descriptors, so the kernel's write-space signals wake no
// poller thread), with their wait for buffer space bounded.
func TestSendSocketsBlocking(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, SendSockets: 2})
	if len(p.tx) != 2 {
		t.Fatalf("%d send sockets, want 2", len(p.tx))
	}
	for i, s := range p.tx {
		err := s.rc.Control(func(fd uintptr) {
			if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK != 0 {
				t.Errorf("send socket %d: flags %#x (%v), want a blocking descriptor", i, fl, err)
			}
			tv, err := unix.GetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_SNDTIMEO)
			if err != nil || time.Duration(tv.Nano()) != sendTimeout {
				t.Errorf("send socket %d: SO_SNDTIMEO %v (%v), want %v", i, time.Duration(tv.Nano()), err, sendTimeout)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCloseUnblocksRead: a Read waiting in the poller returns
// net.ErrClosed once the port is closed, and nothing earlier; a second
// Close is harmless and a Write after it fails.
func TestCloseUnblocksRead(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers})
	closeEndsRead(t, p, newBatch(4))
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	bufs := [][]byte{withFrame(make([]byte, 14))}
	n, err := p.Write(bufs, metas(bufs, port.Endpoint{Addr: addrB.As4(), VNI: 1}), headroom)
	if n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close = %d, %v", n, err)
	}
}

// closeEndsRead starts a Read on p, waits until it sleeps in the
// netpoller (seen by the port's RxWaits count, not guessed by a sleep;
// with busy polling, after its window), closes p and checks that the
// Read returns net.ErrClosed then, and not before.
func closeEndsRead(t *testing.T, p *Port, b *batch) {
	t.Helper()
	if err := p.setReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	before := p.Stats().RxWaits
	errc := make(chan error, 1)
	go func() {
		_, err := p.Read(b.bufs, b.meta, headroom)
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "Read to wait for a datagram", func() (bool, error) { return p.Stats().RxWaits > before, nil })
	select {
	case err := <-errc:
		t.Fatalf("Read returned before Close: %v", err)
	default:
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
}

// TestReadAllocs measures Read's allocations per datagram: the raw
// recvmmsg path allocates none.
func TestReadAllocs(t *testing.T) {
	requireRoot(t)
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	tn := newTestNet(t, false)
	peers, _ := NewPeers(addrB)
	p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, Batch: 32})
	known := udpIn(t, tn.b, "192.0.2.2:0")
	payload := make([]byte, HeaderLen+100)
	PutHeader(payload, 1)
	dst := netip.AddrPortFrom(addrA, UDPPort)
	b := newBatch(32)
	// Warm up: the first datagram also resolves the underlay neighbor, which
	// would otherwise queue (and drop) most of the burst.
	if _, err := known.WriteToUDPAddrPort(payload, dst); err != nil {
		t.Fatal(err)
	}
	readFrames(t, p, b, 1)
	const total = 128 // stays under a default-sized receive buffer
	from := ipDelivered(t, tn.a)
	for range total {
		if _, err := known.WriteToUDPAddrPort(payload, dst); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, tn.a, from, total)
	got := 0
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for got < total {
		n, err := p.Read(b.bufs, b.meta, headroom)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	runtime.ReadMemStats(&after)
	perFrame := float64(after.Mallocs-before.Mallocs) / float64(total)
	t.Logf("Read: %.2f allocs per datagram", perFrame)
	if perFrame > 0.05 {
		t.Errorf("Read: %.2f allocs per datagram, want 0", perFrame)
	}
}

// setReadDeadline sets the read deadline of every reader of p (on its
// epoll set, where a read waits).
func (p *Port) setReadDeadline(t time.Time) error {
	for _, st := range p.rxs {
		if err := st.ep.SetReadDeadline(t); err != nil {
			return err
		}
	}
	return nil
}
