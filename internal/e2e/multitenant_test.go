package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/vxlan"
)

// TestMultitenant runs one 2-node multitenant cluster (3 pods a node in
// projects default, alpha and beta, plus an external host) through the
// foundation's checks.
func TestMultitenant(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	c := up(t, "mt", cluster.Spec{
		Lab:   lab.Spec{Nodes: 2, PodsPerNode: 3, Projects: []string{"default", "alpha", "beta"}, External: true},
		Mode:  "multitenant",
		VNIDs: map[string]uint32{"alpha": 10, "beta": 11},
	})
	n1, n2 := c.Nodes[0], c.Nodes[1]
	def1, alpha1, beta1 := n1.Pods[0], n1.Pods[1], n1.Pods[2]
	alpha2, beta2 := n2.Pods[1], n2.Pods[2]

	t.Run("reachability", func(t *testing.T) {
		m := c.Reachability(ctx(t))
		var b strings.Builder
		m.Print(&b)
		t.Logf("reachability:\n%s", b.String())
		for _, s := range m.Mismatches() {
			t.Error(s)
		}
		// The matrix must show both outcomes, or it proves nothing.
		var yes, no int
		for i := range m.Got {
			for j := range m.Got[i] {
				if i != j && m.Got[i][j] {
					yes++
				} else if i != j {
					no++
				}
			}
		}
		if yes == 0 || no == 0 {
			t.Errorf("matrix has %d reachable and %d blocked pairs; want both", yes, no)
		}
	})

	t.Run("ping-sizes", func(t *testing.T) {
		for _, size := range []int{56, 1400, 3000} {
			for _, dst := range []cluster.Pod{alpha2, def1} {
				if ok, out := ping(t, c.Lab, alpha1.NS, dst.IP, size); !ok {
					t.Errorf("ping -s %d %s → %s failed:\n%s", size, alpha1.Name, dst.Name, out)
				}
			}
		}
	})

	t.Run("tcp-10MB", func(t *testing.T) {
		for _, dst := range []cluster.Pod{alpha2, def1} {
			res := tcpTransfer(t, c.Lab, alpha1, dst.NS, dst.IP.String(), 10<<20)
			if !strings.Contains(res, "intact=true") {
				t.Errorf("10 MB %s → %s: %s", alpha1.Name, dst.Name, res)
			}
		}
	})

	t.Run("vxlan-on-the-wire", func(t *testing.T) {
		pcap, dump := startTcpdump(t, c.Lab, n1.NS, "udp", "port", "4789")
		ping(t, c.Lab, alpha1.NS, alpha2.IP, 56)
		ping(t, c.Lab, beta1.NS, beta2.IP, 56)
		// -U writes each packet as it is captured: wait until both pings'
		// VXLAN packets are in the file.
		testutil.Eventually(5*time.Second, func() bool {
			vnis, _, err := readVNIs(pcap)
			_, a := vnis[alpha1.IP.String()]
			_, b := vnis[beta1.IP.String()]
			return err == nil && a && b
		})
		dump.Stop()
		if out, err := exec.Command("tcpdump", "-nr", pcap).CombinedOutput(); err != nil {
			t.Errorf("tcpdump cannot read the capture: %v\n%s", err, out)
		} else {
			t.Logf("tcpdump -nr %s:\n%s", pcap, out)
		}
		vnis := vnisBySource(t, pcap)
		if got := vnis[alpha1.IP.String()]; got != 10 {
			t.Errorf("VXLAN from %s (alpha) carried VNI %d, want 10 (all: %v)", alpha1.IP, got, vnis)
		}
		if got := vnis[beta1.IP.String()]; got != 11 {
			t.Errorf("VXLAN from %s (beta) carried VNI %d, want 11 (all: %v)", beta1.IP, got, vnis)
		}
	})

	t.Run("anti-spoofing", func(t *testing.T) {
		// Everything the target pod receives meanwhile is captured, so a
		// failure says which frame got through.
		pcap, dump := startTcpdump(t, c.Lab, def1.NS, "inbound")
		before := tableDrops(t, c, 0, 20)
		txBefore := portTx(t, c, 0, def1)
		// Before each identity is given back, the attacker's neighbour
		// cache is flushed: an unresolved entry keeps soliciting, and once
		// the forged address is gone the kernel solicits from the pod's
		// own, which is legitimate and would reach the target.
		forget := func() { mustExec(t, c.Lab, alpha1.NS, "ip", "neigh", "flush", "dev", "eth0") }
		// A forged source address, with a static neighbour so IP packets
		// leave even though ARP for it is refused.
		mustExec(t, c.Lab, alpha1.NS, "ip", "addr", "add", forgedIP+"/32", "dev", "eth0")
		mustExec(t, c.Lab, alpha1.NS, "ip", "neigh", "replace", def1.IP.String(), "lladdr", macOf(def1), "dev", "eth0")
		if ok, _ := ping(t, c.Lab, alpha1.NS, def1.IP, 56, "-I", forgedIP); ok {
			t.Error("a ping with a forged source address got through")
		}
		mustExec(t, c.Lab, alpha1.NS, "ip", "neigh", "del", def1.IP.String(), "dev", "eth0")
		forget()
		mustExec(t, c.Lab, alpha1.NS, "ip", "addr", "del", forgedIP+"/32", "dev", "eth0")
		// ARP as another pod's address.
		mustExec(t, c.Lab, alpha1.NS, "ip", "addr", "add", beta1.IP.String()+"/32", "dev", "eth0")
		if ok, _ := ping(t, c.Lab, alpha1.NS, def1.IP, 56, "-I", beta1.IP.String()); ok {
			t.Error("a ping that ARPs as another pod got through")
		}
		forget()
		mustExec(t, c.Lab, alpha1.NS, "ip", "addr", "del", beta1.IP.String()+"/32", "dev", "eth0")
		// A forged MAC address.
		forget()
		mustExec(t, c.Lab, alpha1.NS, "ip", "link", "set", "eth0", "address", forgedMAC)
		if ok, _ := ping(t, c.Lab, alpha1.NS, def1.IP, 56); ok {
			t.Error("a ping from a forged MAC got through")
		}
		forget()
		mustExec(t, c.Lab, alpha1.NS, "ip", "link", "set", "eth0", "address", macOf(alpha1))
		after := tableDrops(t, c, 0, 20)
		if after <= before {
			t.Errorf("table 20 (anti-spoofing) drops went from %d to %d; want them to rise", before, after)
		}
		for _, f := range received(t, pcap, dump, portTx(t, c, 0, def1)-txBefore) {
			if why := f.forged(macOf(alpha1), beta1.IP.String()); why != "" {
				t.Errorf("a frame %s reached the target pod: %s", why, f)
			}
		}
		if ok, out := ping(t, c.Lab, alpha1.NS, def1.IP, 56); !ok {
			t.Errorf("after restoring its MAC the pod cannot ping:\n%s", out)
		}
	})

	t.Run("forged-vxlan", func(t *testing.T) {
		ext := c.Lab.External
		pcap, dump := startTcpdump(t, c.Lab, def1.NS, "inbound")
		before := tunnelDrops(t, c, 0)
		txBefore := portTx(t, c, 0, def1)
		forgedSrc := [4]byte{10, 128, 2, 9}
		frame := ethIPv4UDP(macOf(def1), def1.IP.As4(), forgedSrc)
		pkt := make([]byte, vxlan.HeaderLen+len(frame))
		vxlan.PutHeader(pkt, 0)
		copy(pkt[vxlan.HeaderLen:], frame)
		var conn net.Conn
		err := netconf.Do(ext.NSPath, func() error {
			var err error
			conn, err = net.Dial("udp4", n1.IP.String()+":4789")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for i := 0; i < 5; i++ {
			if _, err := conn.Write(pkt); err != nil {
				t.Fatal(err)
			}
		}
		var after uint64
		if !testutil.Eventually(5*time.Second, func() bool { after = tunnelDrops(t, c, 0); return after >= before+5 }) {
			t.Errorf("unknown-peer drops went from %d to %d; want +5", before, after)
		}
		for _, f := range received(t, pcap, dump, portTx(t, c, 0, def1)-txBefore) {
			if f.src == netip.AddrFrom4(forgedSrc).String() {
				t.Errorf("forged VXLAN reached the pod: %s", f)
			}
		}
	})

	t.Run("nat-egress", func(t *testing.T) {
		ext := c.Lab.External
		res := tcpTransfer(t, c.Lab, alpha1, ext.NS, ext.IP.String(), 1<<20)
		if !strings.Contains(res, "seen as "+n1.IP.String()+":") {
			t.Errorf("the external host should see the node address %s: %s", n1.IP, res)
		}
	})

	t.Run("trace-across-nodes", func(t *testing.T) {
		desc := fmt.Sprintf("in_port=%d,ip,dl_src=%s,nw_src=%s,nw_dst=%s", 4, macOf(alpha1), alpha1.IP, alpha2.IP)
		var r1 control.TraceResult
		if err := json.Unmarshal([]byte(ctl(t, c, 0, "-o", "json", "trace", desc)), &r1); err != nil {
			t.Fatal(err)
		}
		t.Logf("node 1:\n%s", r1.Text)
		for _, want := range []string{"20.", "31.", "90.", "output:1"} {
			if !strings.Contains(r1.Text, want) {
				t.Errorf("node 1 trace lacks %q", want)
			}
		}
		if len(r1.Next) != 1 || r1.Next[0].Node != n2.Name {
			t.Fatalf("node 1 trace should continue on %s: %+v", n2.Name, r1.Next)
		}
		var r2 control.TraceResult
		if err := json.Unmarshal([]byte(ctl(t, c, 1, "-o", "json", "trace", r1.Next[0].Packet)), &r2); err != nil {
			t.Fatal(err)
		}
		t.Logf("node 2:\n%s", r2.Text)
		for _, want := range []string{"10.", "70.", "80.", "output to port 4"} {
			if !strings.Contains(r2.Text, want) {
				t.Errorf("node 2 trace lacks %q", want)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		body := httpGet(t, n1.NSPath, "127.0.0.1:9101", "/metrics")
		for _, want := range []string{"gvs_build_info{", "gvs_port_rx_packets_total{name=\"vxlan0\"", "gvs_flow_rules ", "gvs_drops_total{reason=\"table_miss\"}"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}

// received stops a capture of what a pod received (startTcpdump, begun
// before the port's counter was read) and returns its frames, after
// checking that it holds at least the tx frames the port counted since:
// a check of the frames vouches only for what it saw.
func received(t *testing.T, pcap string, dump *lab.Proc, tx uint64) []frame {
	t.Helper()
	if err := dump.Stop(); err != nil {
		t.Fatal(err)
	}
	frames, err := readFrames(pcap)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		t.Logf("the pod received: %s", f)
	}
	if uint64(len(frames)) < tx {
		t.Errorf("the pod's port sent %d frames but the capture holds %d", tx, len(frames))
	}
	return frames
}

// The anti-spoofing attacker's forged identities: an address of the node's
// subnet no pod has, and a MAC no pod has.
const (
	forgedIP  = "10.128.0.250"
	forgedMAC = "0a:58:0a:80:00:fe"
)

// frame is what the anti-spoofing check reads of one captured frame.
type frame struct {
	ethSrc, sha string // sha: the ARP sender's MAC
	src, dst    string // IPv4 or ARP sender and target addresses
	kind        string // "arp", "ipv4 <protocol>" or the EtherType
}

func (f frame) String() string {
	s := fmt.Sprintf("%s from %s (%s) to %s", f.kind, f.src, f.ethSrc, f.dst)
	if f.sha != "" && f.sha != f.ethSrc {
		s += ", ARP sender MAC " + f.sha
	}
	return s
}

// forged says why f carries one of the attacker's forged identities — the
// forged address, the forged MAC, or another pod's address from the
// attacker's MAC attackerMAC — or "" if it does not.
func (f frame) forged(attackerMAC, victimIP string) string {
	switch {
	case f.src == forgedIP:
		return "from the forged address " + forgedIP
	case f.ethSrc == forgedMAC || f.sha == forgedMAC:
		return "from the forged MAC " + forgedMAC
	case f.src == victimIP && (f.ethSrc == attackerMAC || f.sha == attackerMAC):
		return "from " + victimIP + " with the attacker's MAC"
	}
	return ""
}

// readFrames reads a capture's Ethernet frames.
func readFrames(path string) ([]frame, error) {
	src, f, err := openPcap(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []frame
	for p := range src.Packets() {
		eth, _ := p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		if eth == nil {
			return nil, fmt.Errorf("%s: a frame without an Ethernet header", path)
		}
		fr := frame{ethSrc: eth.SrcMAC.String(), kind: eth.EthernetType.String()}
		if arp, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok {
			fr.kind = "arp"
			fr.src = net.IP(arp.SourceProtAddress).String()
			fr.dst = net.IP(arp.DstProtAddress).String()
			fr.sha = net.HardwareAddr(arp.SourceHwAddress).String()
		}
		if ip, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			fr.kind = "ipv4 " + ip.Protocol.String()
			fr.src, fr.dst = ip.SrcIP.String(), ip.DstIP.String()
		}
		out = append(out, fr)
	}
	return out, nil
}

// startTcpdump captures on eth0 in namespace ns, with filter, into a file
// it returns, and waits until tcpdump captures; the process stops at the
// test's end if not before.
func startTcpdump(t *testing.T, l *lab.Lab, ns string, filter ...string) (string, *lab.Proc) {
	t.Helper()
	pcap := filepath.Join(t.TempDir(), "eth0.pcap")
	argv := append([]string{"tcpdump", "-i", "eth0", "--immediate-mode", "-U", "-n", "-w", pcap}, filter...)
	dump, err := l.Start(ctx(t), ns, pcap+".log", argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dump.Stop() })
	// tcpdump says "listening on eth0" once it captures.
	if !testutil.Eventually(10*time.Second, func() bool {
		b, _ := os.ReadFile(pcap + ".log")
		return strings.Contains(string(b), "listening on")
	}) {
		t.Fatal("tcpdump did not start capturing")
	}
	return pcap, dump
}

func macOf(p cluster.Pod) string {
	b := p.IP.As4()
	return fmt.Sprintf("0a:58:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

func mustExec(t *testing.T, l *lab.Lab, ns string, argv ...string) {
	t.Helper()
	if out, err := l.Exec(ctx(t), ns, argv...); err != nil {
		t.Fatalf("%v in %s: %v\n%s", argv, ns, err, out)
	}
}

// tcpTransfer sends size bytes from pod src to a tcp-server started in
// dstNS and returns the client's report.
func tcpTransfer(t *testing.T, l *lab.Lab, src cluster.Pod, dstNS, dstIP string, size int) string {
	t.Helper()
	srv, err := l.Start(ctx(t), dstNS, filepath.Join(t.TempDir(), "srv.log"), filepath.Join(binDir, "gvs-bench"), "tcp-server", "-l", ":5201")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	waitListening(t, srv)
	out, err := l.Exec(ctx(t), src.NS, filepath.Join(binDir, "gvs-bench"), "tcp-client", "-c", dstIP+":5201", "-bytes", fmt.Sprint(size))
	if err != nil {
		t.Errorf("tcp-client: %v\n%s", err, out)
	}
	return string(out)
}

// waitListening waits until srv, a gvs-bench tcp-server, listens.
func waitListening(t testing.TB, srv *lab.Proc) {
	t.Helper()
	if err := listening(srv); err != nil {
		t.Fatal(err)
	}
}

// listening waits until srv, a gvs-bench tcp-server, listens: it prints
// "listening on ADDR" to its log once it does. It returns an error, not
// t.Fatal, for callers off the test's goroutine.
func listening(srv *lab.Proc) error {
	return testutil.Poll(10*time.Second, "tcp-server to listen", func() (bool, error) {
		b, err := os.ReadFile(srv.LogFile)
		if err != nil {
			return false, err
		}
		return strings.Contains(string(b), "listening on"), fmt.Errorf("its log says %q", b)
	})
}

func stats(t *testing.T, c *cluster.Cluster, node int) control.Stats {
	t.Helper()
	var s control.Stats
	if err := json.Unmarshal([]byte(ctl(t, c, node, "-o", "json", "stats")), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func tableDrops(t *testing.T, c *cluster.Cluster, node, table int) uint64 {
	return stats(t, c, node).TableDrops[table]
}

func tunnelDrops(t *testing.T, c *cluster.Cluster, node int) uint64 {
	return stats(t, c, node).TunnelDrops["unknown_peer"]
}

func portTx(t *testing.T, c *cluster.Cluster, node int, p cluster.Pod) uint64 {
	t.Helper()
	var ports []control.Port
	if err := json.Unmarshal([]byte(ctl(t, c, node, "-o", "json", "dump-ports")), &ports); err != nil {
		t.Fatal(err)
	}
	pods := c.Nodes[node].Pods
	for i, q := range pods {
		if q.Name == p.Name {
			for _, port := range ports {
				if port.No == uint32(3+i) {
					return port.TxPackets
				}
			}
		}
	}
	t.Fatalf("no port for pod %s", p.Name)
	return 0
}

// vnisBySource reads a capture of VXLAN on the underlay with gopacket and
// returns, for each inner IPv4 source, the VNI it travelled with.
func vnisBySource(t *testing.T, path string) map[string]uint32 {
	t.Helper()
	out, noI, err := readVNIs(path)
	if err != nil {
		t.Fatal(err)
	}
	if noI > 0 {
		t.Errorf("%d VXLAN packets without the I flag", noI)
	}
	return out
}

// readVNIs is vnisBySource without a test: the VNIs by inner source, and
// how many VXLAN packets lacked the I flag.
func readVNIs(path string) (vnis map[string]uint32, noI int, err error) {
	src, f, err := openPcap(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	out := map[string]uint32{}
	for p := range src.Packets() {
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		vx, _ := p.Layer(layers.LayerTypeVXLAN).(*layers.VXLAN)
		if udp == nil || vx == nil || udp.DstPort != 4789 {
			continue
		}
		if !vx.ValidIDFlag {
			noI++
		}
		// The inner IPv4 layer is the first one after the VXLAN header.
		var inner *layers.IPv4
		seenVXLAN := false
		for _, l := range p.Layers() {
			if _, ok := l.(*layers.VXLAN); ok {
				seenVXLAN = true
			}
			if ip, ok := l.(*layers.IPv4); ok && seenVXLAN && inner == nil {
				inner = ip
			}
		}
		if inner != nil {
			out[inner.SrcIP.String()] = vx.VNI
		}
	}
	return out, noI, nil
}

// openPcap opens a capture file for reading packet by packet; close the
// file when done.
func openPcap(path string) (*gopacket.PacketSource, *os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	r, err := pcapgo.NewReader(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return gopacket.NewPacketSource(r, r.LinkType()), f, nil
}

// ethIPv4UDP builds a small Ethernet/IPv4/UDP frame.
func ethIPv4UDP(dstMAC string, dst, src [4]byte) []byte {
	hw, _ := net.ParseMAC(dstMAC)
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src[:], DstIP: dst[:]}
	udp := &layers.UDP{SrcPort: 40000, DstPort: 9}
	_ = udp.SetNetworkLayerForChecksum(ip)
	_ = gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{DstMAC: hw, SrcMAC: net.HardwareAddr{0x0a, 0x58, 10, 128, 2, 9}, EthernetType: layers.EthernetTypeIPv4},
		ip, udp, gopacket.Payload("forged"))
	return buf.Bytes()
}

// httpGet fetches path from addr inside a namespace: the socket is made
// there on a locked thread, the request is written by hand.
func httpGet(t testing.TB, nsPath, addr, path string) string {
	t.Helper()
	var conn net.Conn
	if err := netconf.Do(nsPath, func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	var b strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}
