package tap_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	"golang.org/x/sys/unix"
)

// headroom matches vswitch.Headroom (not imported to keep this test
// independent of the switch package).
const headroom = 64

var (
	kernelIP  = netip.MustParseAddr("10.99.0.1") // the TAP's address in the ns
	peerIP    = netip.MustParseAddr("10.99.0.2") // the "pod" gvs plays
	kernelMAC = packet.PodMAC(kernelIP.As4())
	peerMAC   = packet.PodMAC(peerIP.As4())
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// testNS creates the namespace gvst-tap-<pid>-<suffix>, removed at cleanup.
func testNS(t *testing.T, suffix string) (name, path string) {
	t.Helper()
	name = fmt.Sprintf("gvst-tap-%d-%s", os.Getpid(), suffix)
	path, err := netconf.CreateNamedNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netconf.DeleteNamedNS(name); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	return name, path
}

// createIn creates a TAP inside the namespace at nsPath.
func createIn(t *testing.T, nsPath string, cfg tap.Config) *tap.Device {
	t.Helper()
	var dev *tap.Device
	err := netconf.Do(nsPath, func() (err error) {
		dev, err = tap.Create(cfg)
		return err
	})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// upTAP creates a TAP with kernelIP/24 and kernelMAC in a fresh namespace.
func upTAP(t *testing.T, suffix string, cfg tap.Config) (dev *tap.Device, nsName, nsPath string) {
	t.Helper()
	nsName, nsPath = testNS(t, suffix)
	dev = createIn(t, nsPath, cfg)
	err := netconf.ConfigureLink(nsPath, netconf.LinkConfig{
		Name: dev.Name(), MAC: kernelMAC[:], MTU: 1500,
		Addrs: []netip.Prefix{netip.PrefixFrom(kernelIP, 24)}, Up: true,
	})
	if err != nil {
		t.Fatalf("ConfigureLink: %v", err)
	}
	return dev, nsName, nsPath
}

func newBufs(n int) ([][]byte, []port.Meta) {
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, headroom+2048)
	}
	return bufs, make([]port.Meta, n)
}

// sized describes bufs for Write: frame i is bufs[i][headroom:], complete.
func sized(bufs [][]byte) []port.Meta {
	m := make([]port.Meta, len(bufs))
	for i, b := range bufs {
		m[i].Size = len(b) - headroom
	}
	return m
}

// readFrame reads until a frame matches, skipping others (IPv6 router
// solicitations and the like), and returns a copy of it.
func readFrame(t *testing.T, dev *tap.Device, what string, match func(f []byte) bool) []byte {
	t.Helper()
	bufs, meta := newBufs(8)
	if err := dev.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	defer dev.SetReadDeadline(time.Time{})
	for {
		n, err := dev.Read(bufs, meta, headroom)
		if err != nil {
			t.Fatalf("waiting for %s: Read: %v", what, err)
		}
		for i := range n {
			f := bufs[i][headroom : headroom+meta[i].Size]
			if match(f) {
				return bytes.Clone(f)
			}
		}
	}
}

// ipv4Frame returns the IPv4 packet of an Ethernet frame, or nil.
func ipv4Frame(f []byte) packet.IPv4 {
	e := packet.Ethernet(f)
	if !e.Valid() || e.Type() != packet.EtherTypeIPv4 {
		return nil
	}
	ip := packet.IPv4(e.Payload())
	if !ip.Valid() {
		return nil
	}
	return ip
}

// pseudoSum is the IPv4 pseudo-header sum for an L4 segment.
func pseudoSum(ip packet.IPv4, proto uint8, l4len int) uint16 {
	s := tap.Checksum(ip[12:20], 0)
	return tap.Checksum([]byte{0, proto, byte(l4len >> 8), byte(l4len)}, s)
}

// frame writes Ethernet (peerMAC → kernelMAC) + IPv4 (peer → kernel) +
// payload at b[headroom:] and returns the buffer cut to the frame's end.
func ipFrame(b []byte, proto uint8, l4 []byte) []byte {
	f := b[headroom:]
	e := packet.Ethernet(f)
	e.SetDst(kernelMAC)
	e.SetSrc(peerMAC)
	e.SetType(packet.EtherTypeIPv4)
	ip := f[14:]
	total := 20 + len(l4)
	copy(ip, []byte{0x45, 0, byte(total >> 8), byte(total), 0, 1, 0x40, 0, 64, proto, 0, 0})
	src, dst := peerIP.As4(), kernelIP.As4()
	copy(ip[12:], src[:])
	copy(ip[16:], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^tap.Checksum(ip[:20], 0))
	copy(ip[20:], l4)
	return b[:headroom+14+total]
}

// arpFrame writes an ARP packet from peerIP/peerMAC to kernelIP at
// b[headroom:]: a request (op 1, to broadcast) or a reply (op 2, to dst).
func arpFrame(b []byte, op uint16, dst [6]byte) []byte {
	f := b[headroom:]
	e := packet.Ethernet(f)
	e.SetDst(dst)
	e.SetSrc(peerMAC)
	e.SetType(packet.EtherTypeARP)
	arp := f[14:]
	copy(arp, []byte{0, 1, 8, 0, 6, 4, 0, byte(op)})
	pip, kip := peerIP.As4(), kernelIP.As4()
	copy(arp[8:], peerMAC[:])
	copy(arp[14:], pip[:])
	tha := dst
	if op == 1 {
		tha = [6]byte{}
	}
	copy(arp[18:], tha[:])
	copy(arp[24:], kip[:])
	return b[:headroom+14+28]
}

func udpFrame(b []byte, srcPort, dstPort uint16, payload []byte) []byte {
	l4 := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(l4[0:], srcPort)
	binary.BigEndian.PutUint16(l4[2:], dstPort)
	binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	copy(l4[8:], payload)
	out := ipFrame(b, packet.ProtoUDP, l4)
	ip := packet.IPv4(out[headroom+14:])
	u := ip[20:]
	binary.BigEndian.PutUint16(u[6:], ^tap.Checksum(u, pseudoSum(ip, packet.ProtoUDP, len(u))))
	return out
}

func TestTAPTraffic(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name     string
		offloads uint
	}{{"no-offload", 0}, {"csum-offload", unix.TUN_F_CSUM}} {
		t.Run(tc.name, func(t *testing.T) { testTraffic(t, tc.offloads) })
	}
}

func testTraffic(t *testing.T, offloads uint) {
	dev, nsName, nsPath := upTAP(t, "tr"+fmt.Sprint(offloads), tap.Config{Name: "gvst-tap0", Offloads: offloads})
	if dev.Name() != "gvst-tap0" || dev.BatchSize() != tap.DefaultBatchSize || dev.Fd() < 0 {
		t.Fatalf("Name %q BatchSize %d Fd %d", dev.Name(), dev.BatchSize(), dev.Fd())
	}

	// A UDP socket in the namespace; its datagram to peerIP first makes the
	// kernel ARP for peerIP.
	var conn *net.UDPConn
	err := netconf.Do(nsPath, func() (err error) {
		conn, err = net.ListenUDP("udp4", &net.UDPAddr{IP: kernelIP.AsSlice()})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	kernelPort := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	if _, err := conn.WriteToUDP([]byte("ping"), &net.UDPAddr{IP: peerIP.AsSlice(), Port: 7777}); err != nil {
		t.Fatal(err)
	}

	// 1. ARP request from the kernel.
	req := readFrame(t, dev, "ARP request", func(f []byte) bool {
		e := packet.Ethernet(f)
		a := packet.ARP(e.Payload())
		return e.Valid() && e.Type() == packet.EtherTypeARP && a.Valid() && a.Op() == 1 && a.TPA() == peerIP.As4()
	})
	if e, a := packet.Ethernet(req), packet.ARP(req[14:]); e.Dst() != [6]byte{255, 255, 255, 255, 255, 255} ||
		e.Src() != kernelMAC || a.SHA() != kernelMAC || a.SPA() != kernelIP.As4() {
		t.Fatalf("ARP request: % x", req)
	}

	// 2. Our ARP reply.
	bufs, _ := newBufs(4)
	bufs[0] = arpFrame(bufs[0], 2, kernelMAC)
	if n, err := dev.Write(bufs[:1], sized(bufs[:1]), headroom); n != 1 || err != nil {
		t.Fatalf("Write ARP reply: %d, %v", n, err)
	}

	// 3. The kernel's UDP datagram, now addressed to peerMAC.
	udp := readFrame(t, dev, "UDP datagram", func(f []byte) bool {
		ip := ipv4Frame(f)
		return ip != nil && ip.Protocol() == packet.ProtoUDP && ip.Dst() == peerIP.As4()
	})
	ip := ipv4Frame(udp)
	u := packet.UDP(ip.Payload())
	if packet.Ethernet(udp).Dst() != peerMAC || u.DstPort() != 7777 || u.SrcPort() != kernelPort ||
		string(u[8:]) != "ping" {
		t.Fatalf("UDP frame: % x", udp)
	}
	if s := tap.Checksum(ip[:ip.HeaderLen()], 0); s != 0xffff {
		t.Errorf("IPv4 header checksum does not verify: %#x", s)
	}
	if s := tap.Checksum(u, pseudoSum(ip, packet.ProtoUDP, len(u))); s != 0xffff {
		t.Errorf("UDP checksum %#04x does not verify (sum %#x)", u.Checksum(), s)
	}

	// 4. Our UDP reply reaches the socket.
	bufs[0] = udpFrame(bufs[0][:cap(bufs[0])], 7777, kernelPort, []byte("pong"))
	bufs[1] = udpFrame(bufs[1], 7777, kernelPort, []byte("pong2"))
	if n, err := dev.Write(bufs[:2], sized(bufs[:2]), headroom); n != 2 || err != nil {
		t.Fatalf("Write UDP: %d, %v", n, err)
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, 64)
	for _, want := range []string{"pong", "pong2"} {
		n, from, err := conn.ReadFromUDP(got)
		if err != nil {
			t.Fatalf("kernel socket did not get %q: %v (stats %+v)", want, err, dev.Stats())
		}
		if string(got[:n]) != want || from.Port != 7777 || !from.IP.Equal(peerIP.AsSlice()) {
			t.Fatalf("kernel socket got %q from %v, want %q", got[:n], from, want)
		}
	}

	// 5. ping from the namespace; we answer the echo request.
	cmd := exec.Command("ip", "netns", "exec", nsName, "ping", "-c1", "-W3", peerIP.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	defer func() {
		if !done {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	echo := readFrame(t, dev, "ICMP echo request", func(f []byte) bool {
		ip := ipv4Frame(f)
		return ip != nil && ip.Protocol() == packet.ProtoICMP && ip.Payload()[0] == 8
	})
	icmp := bytes.Clone(ipv4Frame(echo).Payload())
	icmp[0] = 0 // echo reply
	binary.BigEndian.PutUint16(icmp[2:], 0)
	binary.BigEndian.PutUint16(icmp[2:], ^tap.Checksum(icmp, 0))
	bufs[0] = ipFrame(bufs[0][:cap(bufs[0])], packet.ProtoICMP, icmp)
	if n, err := dev.Write(bufs[:1], sized(bufs[:1]), headroom); n != 1 || err != nil {
		t.Fatalf("Write ICMP: %d, %v", n, err)
	}
	err = cmd.Wait()
	done = true
	if err != nil {
		t.Fatalf("ping failed: %v\n%s", err, out.Bytes())
	}

	st := dev.Stats()
	if st.RxPackets < 3 || st.TxPackets != 4 || st.TxErrors != 0 || st.RxDropped() != 0 {
		t.Errorf("stats %+v", st)
	}
	if offloads&unix.TUN_F_CSUM != 0 && st.RxCsumCompleted == 0 {
		t.Errorf("checksum offload on, but no partial checksum was completed: %+v", st)
	}
	if offloads == 0 && st.RxCsumCompleted != 0 {
		t.Errorf("checksum offload off, but Read completed checksums: %+v", st)
	}
}

// TestTAPSteadyStateAllocs writes echo requests to the kernel and reads
// what comes back: neither Write nor Read may allocate.
func TestTAPSteadyStateAllocs(t *testing.T) {
	needRoot(t)
	dev, _, _ := upTAP(t, "al", tap.Config{Name: "gvst-tap1"})
	wbufs, _ := newBufs(1)
	icmp := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1, 'g', 'v', 's'}
	binary.BigEndian.PutUint16(icmp[2:], ^tap.Checksum(icmp, 0))
	wbufs[0] = ipFrame(wbufs[0], packet.ProtoICMP, icmp)
	frame := bytes.Clone(wbufs[0])
	wmeta := sized(wbufs)
	rbufs, rmeta := newBufs(8)
	if err := dev.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	// An ARP request from the peer gives the kernel a neighbour entry for
	// it, so that it answers the echo requests without ARPing first.
	arp, _ := newBufs(1)
	arp[0] = arpFrame(arp[0], 1, [6]byte{255, 255, 255, 255, 255, 255})
	if _, err := dev.Write(arp, sized(arp), headroom); err != nil {
		t.Fatal(err)
	}
	readFrame(t, dev, "ARP reply", func(f []byte) bool {
		e := packet.Ethernet(f)
		return e.Type() == packet.EtherTypeARP && packet.ARP(e.Payload()).Op() == 2
	})
	if err := dev.SetReadDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var rerr, werr error
	step := func() {
		copy(wbufs[0], frame)
		if _, err := dev.Write(wbufs, wmeta, headroom); err != nil {
			werr = err
		}
		if _, err := dev.Read(rbufs, rmeta, headroom); err != nil {
			rerr = err
		}
	}
	step()
	allocs := testing.AllocsPerRun(100, step)
	if werr != nil || rerr != nil {
		t.Fatalf("write %v, read %v", werr, rerr)
	}
	if allocs != 0 {
		t.Fatalf("Read+Write allocate %v times per round", allocs)
	}
	if st := dev.Stats(); st.TxPackets != 103 || st.RxPackets < 100 {
		t.Errorf("stats %+v", st)
	}
}

// TestTAPCloseUnblocksRead: a Read waiting in the poller (seen by its
// RxWaits count, not guessed by a sleep) returns ErrClosed once the device
// is closed, and nothing earlier.
func TestTAPCloseUnblocksRead(t *testing.T) {
	needRoot(t)
	_, nsPath := testNS(t, "cl")
	dev := createIn(t, nsPath, tap.Config{})
	bufs, meta := newBufs(2)
	errc := make(chan error, 1)
	go func() {
		_, err := dev.Read(bufs, meta, headroom)
		errc <- err
	}()
	testutil.WaitFor(t, 5*time.Second, "Read to wait for a frame", func() (bool, error) { return dev.Stats().RxWaits > 0, nil })
	select {
	case err := <-errc:
		t.Fatalf("Read returned before Close: %v", err)
	default:
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, tap.ErrClosed) {
			t.Fatalf("Read after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	if _, err := dev.Write(bufs, sized(bufs), headroom); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if err := dev.Close(); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// Wake makes a Read blocked for a frame return port.ErrWoken, once; the
// next Read waits again, and Close still unblocks it.
func TestTAPWake(t *testing.T) {
	needRoot(t)
	_, nsPath := testNS(t, "wk")
	dev := createIn(t, nsPath, tap.Config{})
	bufs, meta := newBufs(2)
	read := func() chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := dev.Read(bufs, meta, headroom)
			errc <- err
		}()
		return errc
	}
	waits := dev.Stats().RxWaits
	errc := read()
	testutil.WaitFor(t, 5*time.Second, "Read to wait for a frame", func() (bool, error) { return dev.Stats().RxWaits > waits, nil })
	dev.Wake()
	select {
	case err := <-errc:
		if !errors.Is(err, port.ErrWoken) {
			t.Fatalf("Read after Wake: %v, want port.ErrWoken", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not unblock Read")
	}
	errc = read()
	select {
	case err := <-errc:
		t.Fatalf("the Read after a wake-up returned at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	// The caller's own deadline survives a wake-up and still ends a Read
	// with os.ErrDeadlineExceeded, not ErrWoken.
	if err := dev.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the caller's deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	dev.Wake()
	if err := <-read(); !errors.Is(err, port.ErrWoken) {
		t.Fatalf("Read after a second Wake: %v, want port.ErrWoken", err)
	}
	errc = read()
	if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after the wake-up, the caller's deadline restored: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := dev.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	errc = read()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, tap.ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}
}

// TestTAPWakeStorm: Wakes from several goroutines at once, racing the
// reader's own handling of the last one, only ever end a Read with
// port.ErrWoken. A Wake used to set its flag and its past deadline in two
// steps, so a Read could consume the flag between them and the next Read
// found the deadline without a wake-up: "i/o timeout", on which a switch
// worker stops reading its port for good.
func TestTAPWakeStorm(t *testing.T) {
	needRoot(t)
	_, nsPath := testNS(t, "ws")
	dev := createIn(t, nsPath, tap.Config{})
	bufs, meta := newBufs(2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				dev.Wake()
				runtime.Gosched()
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	woken := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		_, err := dev.Read(bufs, meta, headroom)
		if err != nil && !errors.Is(err, port.ErrWoken) {
			t.Fatalf("Read %d during a storm of Wakes: %v, want port.ErrWoken", woken, err)
		}
		woken++
	}
	t.Logf("%d reads ended by a Wake", woken)
}

// TestTAPSetPolled: out of Go's netpoller a device still writes (its
// descriptor unchanged), Read says ErrNotPolled, and what came meanwhile
// — frames, a Wake — is read once it is back in; Close works either way.
func TestTAPSetPolled(t *testing.T) {
	needRoot(t)
	dev, _, _ := upTAP(t, "po", tap.Config{})
	fd := dev.Fd()
	if !dev.Polled() {
		t.Fatal("a new device is not in the netpoller")
	}
	if err := dev.SetPolled(false); err != nil {
		t.Fatal(err)
	}
	if dev.Polled() || dev.Fd() != fd {
		t.Fatalf("after SetPolled(false): polled %v, Fd %d (was %d)", dev.Polled(), dev.Fd(), fd)
	}
	bufs, meta := newBufs(2)
	if _, err := dev.Read(bufs, meta, headroom); !errors.Is(err, tap.ErrNotPolled) {
		t.Fatalf("Read out of the netpoller: %v, want ErrNotPolled", err)
	}
	// An ARP request for the kernel's address, written out of the
	// netpoller; the kernel's reply is read back in it.
	req := [][]byte{arpFrame(make([]byte, headroom+64), 1, [6]byte{255, 255, 255, 255, 255, 255})}
	if n, err := dev.Write(req, sized(req), headroom); n != 1 || err != nil {
		t.Fatalf("Write out of the netpoller: %d, %v", n, err)
	}
	dev.Wake() // also out of it: reported once back in
	if err := dev.SetPolled(true); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.Read(bufs, meta, headroom); !errors.Is(err, port.ErrWoken) {
		t.Fatalf("Read after a Wake out of the netpoller: %v, want port.ErrWoken", err)
	}
	readFrame(t, dev, "the ARP reply", func(f []byte) bool {
		e := packet.Ethernet(f)
		a := packet.ARP(e.Payload())
		return e.Valid() && e.Type() == packet.EtherTypeARP && a.Valid() && a.Op() == 2 && a.SPA() == kernelIP.As4()
	})
	if err := dev.SetPolled(false); err != nil {
		t.Fatal(err)
	}
	if err := dev.Close(); err != nil {
		t.Fatalf("Close out of the netpoller: %v", err)
	}
	if _, err := dev.Write(req, sized(req), headroom); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if _, err := dev.Read(bufs, meta, headroom); !errors.Is(err, tap.ErrClosed) {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
	if err := dev.SetPolled(true); err != nil || dev.Polled() {
		t.Errorf("SetPolled(true) after Close: %v, polled %v", err, dev.Polled())
	}
}

func TestTAPPersistOpenMultiQueue(t *testing.T) {
	needRoot(t)
	_, nsPath := testNS(t, "po")
	err := netconf.Do(nsPath, func() error {
		if _, err := tap.Open(tap.Config{Name: "gvst-none"}); !errors.Is(err, tap.ErrNotFound) {
			return fmt.Errorf("Open of a missing TAP: %v, want ErrNotFound", err)
		}
		d, err := tap.Create(tap.Config{Name: "gvst-p0"})
		if err != nil {
			return err
		}
		if _, err := tap.Create(tap.Config{Name: "gvst-p0"}); !errors.Is(err, tap.ErrExists) {
			return fmt.Errorf("second Create: %v, want ErrExists", err)
		}
		if err := d.SetPersist(true); err != nil {
			return err
		}
		d.Close()
		d, err = tap.Open(tap.Config{Name: "gvst-p0"})
		if err != nil {
			return fmt.Errorf("Open of a persistent TAP: %w", err)
		}
		if err := d.SetPersist(false); err != nil {
			return err
		}
		d.Close()
		if _, err := net.InterfaceByName("gvst-p0"); err == nil {
			return errors.New("non-persistent TAP outlived its fd")
		}

		q0, err := tap.Create(tap.Config{Name: "gvst-mq", MultiQueue: true})
		if err != nil {
			return err
		}
		defer q0.Close()
		q1, err := tap.Open(tap.Config{Name: "gvst-mq", MultiQueue: true})
		if err != nil {
			return fmt.Errorf("second queue: %w", err)
		}
		return q1.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []tap.Config{
		{Name: "0123456789abcdef"},
		{Offloads: unix.TUN_F_CSUM | unix.TUN_F_USO4},
		{BatchSize: -1},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", c)
		}
	}
	if err := (tap.Config{Offloads: unix.TUN_F_CSUM}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (tap.Config{Offloads: tap.OffloadsTSO}).Validate(); err != nil {
		t.Errorf("TSO: %v", err)
	}
	if err := (tap.Config{Offloads: unix.TUN_F_USO4}).Validate(); !errors.Is(err, tap.ErrUnsupportedOffload) {
		t.Errorf("USO4 without USO6: %v", err)
	}
	if err := (tap.Config{Offloads: tap.OffloadsTSO | tap.OffloadsUSO}).Validate(); err != nil {
		t.Errorf("TSO and USO: %v", err)
	}
	if err := (tap.Config{Offloads: unix.TUN_F_UFO}).Validate(); !errors.Is(err, tap.ErrUnsupportedOffload) {
		t.Errorf("UFO: %v", err)
	}
	if err := (tap.Config{Offloads: tap.OffloadsUSO}).Validate(); !errors.Is(err, tap.ErrUnsupportedOffload) {
		t.Errorf("USO without TUN_F_CSUM: %v", err)
	}
}

// TestTAPTruncated reads a frame into a buffer too small for it: Read must
// drop and count it, not return it cut short.
func TestTAPTruncated(t *testing.T) {
	needRoot(t)
	dev, _, _ := upTAP(t, "tc", tap.Config{Name: "gvst-tap2"})
	// The peer's ARP request makes the kernel answer with a 42-byte ARP
	// reply; buffers with room for 30 bytes cannot hold it.
	arp, _ := newBufs(1)
	arp[0] = arpFrame(arp[0], 1, [6]byte{255, 255, 255, 255, 255, 255})
	if _, err := dev.Write(arp, sized(arp), headroom); err != nil {
		t.Fatal(err)
	}
	small := [][]byte{make([]byte, headroom+30)}
	meta := make([]port.Meta, 1)
	dev.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	for {
		n, err := dev.Read(small, meta, headroom)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if n == 1 && meta[0].Size >= 30 {
			t.Fatalf("Read returned a %d-byte frame in a 30-byte buffer", meta[0].Size)
		}
	}
	if st := dev.Stats(); st.RxDrops[tap.DropTruncated] == 0 {
		t.Fatalf("no truncated frame counted: %+v", st)
	}
}
