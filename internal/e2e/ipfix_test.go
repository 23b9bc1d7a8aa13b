package e2e

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/ipfix"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// TestIPFIX: gvs-switchd exports its connections as IPFIX, and a
// collector gvs did not write reads them back. Node 1 exports to the
// external host, where Debian's nfcapd (nfdump) collects on UDP 4739 and
// a decoder of this test's on 4740 (for gvs's own elements, which nfdump
// does not show). The cluster runs in networkpolicy mode, where every
// connection a pod makes is committed to the tracker. From n1-p1:
//
//   - a TCP transfer to a pod on the other node: nfdump's records of
//     each direction carry the pods' addresses and ports, and bytes and
//     packets within 3 % of what the client pod's eth0 counted (gvs counts
//     IPv4 bytes, eth0 counts frames: 14 bytes each are taken off);
//   - a UDP exchange with a pod on the same node: 20 datagrams each way,
//     counted exactly;
//   - a TCP connection refused by a closed port: the SYN and the RST, one
//     packet each way.
//
// The records come on the idle timeout (1 s); the templates are sent every
// second, so the collector, started after the daemons, learns them.
func TestIPFIX(t *testing.T) {
	if _, err := exec.LookPath("nfcapd"); err != nil {
		t.Skip("nfcapd is not installed (make deps installs nfdump)")
	}
	c := up(t, "ix", cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"default", "alpha"}, External: true},
		Mode:         "networkpolicy",
		ControlPlane: cluster.ControlPlaneEmbedded,
		CNI:          true,
		Configure: func(c *cluster.Cluster, i int, cfg *daemon.Config) {
			if i != 0 {
				return
			}
			x := c.Lab.External.IP.String()
			cfg.IPFIX = &daemon.IPFIXConfig{Collectors: []string{x + ":4739", x + ":4740"},
				IdleTimeout: "1s", ActiveTimeout: "1m", TemplateRefresh: "1s", ObservationDomain: 1}
		},
	})
	ext := c.Lab.External
	client, tcpServer := c.Nodes[0].Pods[0], c.Nodes[1].Pods[0]
	udpServer, closedPod := c.Nodes[0].Pods[1], c.Nodes[1].Pods[1]

	capDir := t.TempDir()
	nfcapdLog := filepath.Join(t.TempDir(), "nfcapd.log")
	nfcapd, err := c.Lab.Start(ctx(t), ext.NS, nfcapdLog, "nfcapd", "-p", "4739", "-w", capDir, "-t", "60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nfcapd.Stop() })
	own := listenIPFIX(t, ext.NSPath, netip.AddrPortFrom(ext.IP, 4740))

	// The TCP transfer, with the client pod's eth0 counters around it.
	before := ethCounters(t, c, client)
	const size = 4 << 20
	tcpLocal := ixTCPTransfer(t, client, tcpServer, 5301, size)
	after := ethCounters(t, c, client)
	tx, rx := after.sub(before)

	udpLocal := ixUDPExchange(t, client, udpServer, 5302, 20, 500)
	refusedLocal := ixRefused(t, client, netip.AddrPortFrom(closedPod.IP, 5999))

	tcpKey := flowKey{tcpLocal, netip.AddrPortFrom(tcpServer.IP, 5301), 6}
	udpKey := flowKey{udpLocal, netip.AddrPortFrom(udpServer.IP, 5302), 17}
	refusedKey := flowKey{refusedLocal, netip.AddrPortFrom(closedPod.IP, 5999), 6}
	want := []flowKey{tcpKey, tcpKey.reverse(), udpKey, udpKey.reverse(), refusedKey, refusedKey.reverse()}
	if err := testutil.Poll(30*time.Second, "the exporter's records of the three connections", func() (bool, error) {
		got := own.sums()
		for _, k := range want {
			if got[k].packets == 0 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		var lines []string
		for _, l := range strings.Split(httpGet(t, c.Nodes[0].NSPath, "127.0.0.1:9101", "/metrics"), "\n") {
			if strings.HasPrefix(l, "gvs_ipfix") || strings.HasPrefix(l, "gvs_conntrack_created") || strings.HasPrefix(l, "gvs_conntrack_entries{") {
				lines = append(lines, l)
			}
		}
		ct, _ := c.Ctl(ctx(t), 0, "dump-conntrack")
		flows, _ := c.Ctl(ctx(t), 0, "dump-flows")
		nflog, _ := os.ReadFile(nfcapdLog)
		t.Logf("node 1's connections:\n%s\nflows:\n%s\nnfcapd:\n%s", ct, flows, nflog)
		t.Fatalf("%v; want %v; the test's collector has %+v from %d messages (%d templates, %d records, %d sets of unknown templates); node 1's metrics:\n%s", err, want, own.sums(),
			own.messages.Load(), own.templates.Load(), own.records.Load(), own.unknown.Load(), strings.Join(lines, "\n"))
	}
	// Stopping nfcapd makes it write its file; then nfdump reads it. It
	// stops without draining its socket: first let it read what was sent.
	nstest.WaitUDPRead(t, ext.NS, 4739, 10*time.Second)
	if err := nfcapd.Stop(); err != nil {
		t.Fatal(err)
	}
	flows := readNfdump(t, capDir)
	t.Logf("nfdump read %d records", len(flows))

	t.Run("tcp", func(t *testing.T) {
		out, back := flows[tcpKey], flows[tcpKey.reverse()]
		if out.bytes < size {
			t.Errorf("client → server: nfdump has %d bytes, fewer than the %d sent", out.bytes, size)
		}
		ixWithin(t, "client → server bytes", out.bytes, tx.bytes, 0.03)
		ixWithin(t, "client → server packets", out.packets, tx.packets, 0.03)
		ixWithin(t, "server → client bytes", back.bytes, rx.bytes, 0.03)
		ixWithin(t, "server → client packets", back.packets, rx.packets, 0.03)
	})
	t.Run("udp", func(t *testing.T) {
		for _, k := range []flowKey{udpKey, udpKey.reverse()} {
			if f := flows[k]; f.packets != 20 || f.bytes != 20*(500+28) {
				t.Errorf("%v: nfdump has %d packets, %d bytes; want 20 and %d", k, f.packets, f.bytes, 20*(500+28))
			}
		}
	})
	t.Run("refused", func(t *testing.T) {
		syn, rst := flows[refusedKey], flows[refusedKey.reverse()]
		if syn.packets != 1 || rst.packets != 1 || rst.bytes != 40 {
			t.Errorf("the SYN: %d packets; the RST: %d packets of %d bytes; want one each, the RST 40 bytes", syn.packets, rst.packets, rst.bytes)
		}
	})
	// gvs's own elements, which nfdump skips: the pods' names and VNIDs.
	t.Run("pods", func(t *testing.T) {
		r := own.sums()[tcpKey]
		if r.srcPod != client.Project+"/"+client.Name || r.srcVNID != client.VNID {
			t.Errorf("the TCP client's record names pod %q VNID %d, want %q VNID %d", r.srcPod, r.srcVNID,
				client.Project+"/"+client.Name, client.VNID)
		}
		if r.dstPod != "" || r.dstVNID != ipfix.NoVNID {
			t.Errorf("a pod of the other node is named %q VNID %d: only this node's pods are known", r.dstPod, r.dstVNID)
		}
		u := own.sums()[udpKey]
		if u.dstPod != udpServer.Project+"/"+udpServer.Name {
			t.Errorf("the UDP server is named %q, want %q", u.dstPod, udpServer.Project+"/"+udpServer.Name)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		body := httpGet(t, c.Nodes[0].NSPath, "127.0.0.1:9101", "/metrics")
		if n := metricValue(t, body, "gvs_ipfix_records_sent_total"); n < float64(len(want)) {
			t.Errorf("gvs_ipfix_records_sent_total %v, want at least %d", n, len(want))
		}
		if n := metricValue(t, body, "gvs_ipfix_records_dropped_total"); n != 0 {
			t.Errorf("gvs_ipfix_records_dropped_total %v, want 0", n)
		}
	})
}

// flowKey is one direction of a connection.
type flowKey struct {
	src, dst netip.AddrPort
	proto    uint8
}

func (k flowKey) reverse() flowKey { return flowKey{k.dst, k.src, k.proto} }

func (k flowKey) String() string { return fmt.Sprintf("%v→%v/%d", k.src, k.dst, k.proto) }

// flowSum adds up one direction's records.
type flowSum struct {
	packets, bytes   uint64
	srcPod, dstPod   string
	srcVNID, dstVNID uint32
}

// ixWithin fails t unless got is within frac of want.
func ixWithin(t *testing.T, what string, got, want uint64, frac float64) {
	t.Helper()
	if d := float64(got) - float64(want); d > frac*float64(want) || -d > frac*float64(want) || want == 0 {
		t.Errorf("%s: %d exported, %d counted by eth0: more than %.0f%% apart", what, got, want, 100*frac)
	} else {
		t.Logf("%s: %d exported, %d counted by eth0", what, got, want)
	}
}

// readNfdump reads what nfcapd wrote in dir with nfdump, as JSON, and
// adds up the records of each direction.
func readNfdump(t *testing.T, dir string) map[flowKey]flowSum {
	t.Helper()
	out, err := exec.Command("nfdump", "-R", dir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("nfdump -R %s: %v\n%s", dir, err, out)
	}
	var recs []struct {
		Src     string `json:"src4_addr"`
		Dst     string `json:"dst4_addr"`
		SrcPort uint16 `json:"src_port"`
		DstPort uint16 `json:"dst_port"`
		Proto   uint8  `json:"proto"`
		Packets uint64 `json:"in_packets"`
		Bytes   uint64 `json:"in_bytes"`
	}
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatalf("nfdump's JSON: %v\n%s", err, out)
	}
	sums := map[flowKey]flowSum{}
	for _, r := range recs {
		src, err1 := netip.ParseAddr(r.Src)
		dst, err2 := netip.ParseAddr(r.Dst)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("nfdump record %+v: %v", r, err)
		}
		k := flowKey{netip.AddrPortFrom(src, r.SrcPort), netip.AddrPortFrom(dst, r.DstPort), r.Proto}
		s := sums[k]
		s.packets += r.Packets
		s.bytes += r.Bytes
		sums[k] = s
	}
	return sums
}

// ipfixListener is the test's own collector: it decodes what arrives
// with package ipfix's Decoder and adds up the records.
type ipfixListener struct {
	messages, templates, records, unknown atomic.Int64
	mu                                    sync.Mutex
	recs                                  map[flowKey]flowSum
}

func (l *ipfixListener) sums() map[flowKey]flowSum {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[flowKey]flowSum, len(l.recs))
	for k, v := range l.recs {
		out[k] = v
	}
	return out
}

// listenIPFIX listens on addr in the namespace at nsPath until the test
// ends.
func listenIPFIX(t *testing.T, nsPath string, addr netip.AddrPort) *ipfixListener {
	t.Helper()
	var conn *net.UDPConn
	if err := netconf.Do(nsPath, func() (err error) {
		conn, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	l := &ipfixListener{recs: map[flowKey]flowSum{}}
	done := make(chan struct{})
	t.Cleanup(func() { conn.Close(); <-done })
	go func() {
		defer close(done)
		var d ipfix.Decoder
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			l.messages.Add(1)
			m, err := d.Decode(buf[:n])
			if err != nil {
				t.Errorf("the exporter sent a message its own decoder refuses: %v", err)
				continue
			}
			l.templates.Add(int64(len(m.Templates)))
			l.records.Add(int64(len(m.Records)))
			l.unknown.Add(int64(m.Unknown))
			l.add(m)
		}
	}()
	return l
}

func (l *ipfixListener) add(m *ipfix.Decoded) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range m.Records {
		t := ipfix.Templates(ipfix.DocumentationPEN)[r.Template-ipfix.TemplateFlow]
		v := func(id uint16, pen uint32) []byte {
			for i, f := range t.Fields {
				if f.ID == id && f.Enterprise == pen {
					return r.Values[i]
				}
			}
			return nil
		}
		k := flowKey{
			netip.AddrPortFrom(netip.AddrFrom4([4]byte(v(ipfix.IESourceIPv4Address, 0))), binary.BigEndian.Uint16(v(ipfix.IESourceTransportPort, 0))),
			netip.AddrPortFrom(netip.AddrFrom4([4]byte(v(ipfix.IEDestinationIPv4Address, 0))), binary.BigEndian.Uint16(v(ipfix.IEDestinationTransportPort, 0))),
			v(ipfix.IEProtocolIdentifier, 0)[0],
		}
		s := l.recs[k]
		s.packets += binary.BigEndian.Uint64(v(ipfix.IEPacketDeltaCount, 0))
		s.bytes += binary.BigEndian.Uint64(v(ipfix.IEOctetDeltaCount, 0))
		s.srcPod, s.dstPod = string(v(ipfix.IESourcePodName, ipfix.DocumentationPEN)), string(v(ipfix.IEDestinationPodName, ipfix.DocumentationPEN))
		s.srcVNID = binary.BigEndian.Uint32(v(ipfix.IESourceVNID, ipfix.DocumentationPEN))
		s.dstVNID = binary.BigEndian.Uint32(v(ipfix.IEDestinationVNID, ipfix.DocumentationPEN))
		l.recs[k] = s
	}
}

// ethStats are a pod's eth0 counters; dirStats one direction's.
type ethStats struct{ tx, rx dirStats }
type dirStats struct{ packets, bytes uint64 }

// sub returns what each direction carried between b and a, in IPv4
// bytes (a frame's Ethernet header, 14 bytes, taken off).
func (a ethStats) sub(b ethStats) (tx, rx dirStats) {
	d := func(x, y dirStats) dirStats {
		p := x.packets - y.packets
		return dirStats{p, x.bytes - y.bytes - 14*p}
	}
	return d(a.tx, b.tx), d(a.rx, b.rx)
}

// ethCounters reads pod p's eth0 counters.
func ethCounters(t *testing.T, c *cluster.Cluster, p cluster.Pod) ethStats {
	t.Helper()
	out, err := c.Lab.Exec(ctx(t), p.NS, "sh", "-c",
		"cd /sys/class/net/eth0/statistics && cat tx_packets tx_bytes rx_packets rx_bytes")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 4 {
		t.Fatalf("eth0 counters: %q", out)
	}
	var n [4]uint64
	for i := range n {
		if n[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	return ethStats{dirStats{n[0], n[1]}, dirStats{n[2], n[3]}}
}

// ixTCPTransfer sends size bytes from pod p to a server it starts in pod
// srv on port and waits until the server has read them all and the
// connection is closed both ways. It returns the client's address.
func ixTCPTransfer(t *testing.T, p, srv cluster.Pod, port uint16, size int) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	dst := netip.AddrPortFrom(srv.IP, port)
	if err := netconf.Do(srv.NSPath, func() (err error) {
		ln, err = net.Listen("tcp4", dst.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		n, _ := io.Copy(io.Discard, conn)
		got <- n
	}()
	var conn net.Conn
	if err := netconf.Do(p.NSPath, func() (err error) {
		conn, err = net.DialTimeout("tcp4", dst.String(), 10*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != int64(size) {
		t.Fatalf("the server read %d bytes of %d", n, size)
	}
	// The server has closed: read its FIN, so that the exchange is over
	// before the counters are read.
	if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the server closed: %v, want EOF", err)
	}
	return netip.MustParseAddrPort(conn.LocalAddr().String())
}

// ixUDPExchange sends n datagrams of size bytes from pod p to an echo
// server it starts in pod echo on port and reads the n replies. It
// returns the client's address.
func ixUDPExchange(t *testing.T, p, echo cluster.Pod, port uint16, n, size int) netip.AddrPort {
	t.Helper()
	var srv, cl *net.UDPConn
	dst := netip.AddrPortFrom(echo.IP, port)
	if err := netconf.Do(echo.NSPath, func() (err error) {
		srv, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			m, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteToUDPAddrPort(buf[:m], from)
		}
	}()
	if err := netconf.Do(p.NSPath, func() (err error) {
		cl, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	buf := make([]byte, 2048)
	for i := range n {
		if _, err := cl.Write(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
		_ = cl.SetReadDeadline(time.Now().Add(10 * time.Second))
		if m, err := cl.Read(buf); err != nil || m != size {
			t.Fatalf("reply %d: %d bytes, %v", i, m, err)
		}
	}
	return netip.MustParseAddrPort(cl.LocalAddr().String())
}

// ixRefused connects from pod p to dst, where nothing listens, and checks
// that the connection is refused. It returns the client's address.
func ixRefused(t *testing.T, p cluster.Pod, dst netip.AddrPort) netip.AddrPort {
	t.Helper()
	var local netip.AddrPort
	err := netconf.Do(p.NSPath, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		// Take a free port first, so that the port is known when the dial
		// fails.
		l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: p.IP.AsSlice()})
		if err != nil {
			return err
		}
		local = netip.MustParseAddrPort(l.Addr().String())
		l.Close()
		d.LocalAddr = net.TCPAddrFromAddrPort(local)
		conn, err := d.Dial("tcp4", dst.String())
		if err == nil {
			conn.Close()
			return errors.New("connected")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("connecting to the closed port %v: %v, want connection refused", dst, err)
	}
	return local
}
