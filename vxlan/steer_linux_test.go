package vxlan

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/testutil"
)

// TestBlockBases: blocks are aligned to their size, lie inside the range
// and avoid reserved ports; a range smaller than a block has none.
func TestBlockBases(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, n int
		reserved  [][2]int
		want      []int
	}{
		{40000, 40063, 16, nil, []int{40000, 40016, 40032, 40048}},
		{40001, 40063, 16, nil, []int{40016, 40032, 40048}},
		{40000, 40062, 16, nil, []int{40000, 40016, 40032}},
		{40000, 40063, 16, [][2]int{{40017, 40017}, {40040, 40050}}, []int{40000}},
		{40000, 40007, 16, nil, nil},
		{40000, 40011, 3, [][2]int{{40004, 40004}}, []int{40005, 40008}},
		{40000, 40063, 0, nil, nil},
	} {
		if got := blockBases(tc.lo, tc.hi, tc.n, tc.reserved); !slices.Equal(got, tc.want) {
			t.Errorf("blockBases(%d, %d, %d, %v) = %v, want %v", tc.lo, tc.hi, tc.n, tc.reserved, got, tc.want)
		}
	}
	// Linux's default range holds 1 764 blocks of 16.
	if got := len(blockBases(32768, 60999, 16, nil)); got != 1764 {
		t.Errorf("blocks of 16 in 32768..60999: %d, want 1764", got)
	}
}

// TestParsePorts: the sysctl files' formats, and what is refused.
func TestParsePorts(t *testing.T) {
	if lo, hi, err := parsePortRange("32768\t60999\n"); lo != 32768 || hi != 60999 || err != nil {
		t.Errorf("port range: %d, %d, %v", lo, hi, err)
	}
	for _, bad := range []string{"", "1", "1 2 3", "x 2", "5 4", "1 70000", "-1 5"} {
		if _, _, err := parsePortRange(bad); err == nil {
			t.Errorf("port range %q accepted", bad)
		}
	}
	got, err := parseReservedPorts("8080,9000-9100,40000\n")
	if want := [][2]int{{8080, 8080}, {9000, 9100}, {40000, 40000}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("reserved ports: %v, %v; want %v", got, err, want)
	}
	if got, err := parseReservedPorts("\n"); err != nil || len(got) != 0 {
		t.Errorf("no reserved ports: %v, %v", got, err)
	}
	for _, bad := range []string{"x", "9100-9000", "1-2-3", "70000", "5,-"} {
		if _, err := parseReservedPorts(bad); err == nil {
			t.Errorf("reserved ports %q accepted", bad)
		}
	}
}

// FuzzParseReservedPorts: any input gives ranges within 0..65535, low
// not above high, or an error; never a panic.
func FuzzParseReservedPorts(f *testing.F) {
	for _, s := range []string{"", "8080", "1-2,3", "9100-9000", "65535", "1,,2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseReservedPorts(s)
		if err != nil {
			return
		}
		for _, x := range r {
			if x[0] < 0 || x[1] > 65535 || x[0] > x[1] {
				t.Fatalf("%q: range %v", s, x)
			}
		}
		if lo, hi, err := parsePortRange(s); err == nil && (lo > hi || hi > 65535) {
			t.Fatalf("%q: port range %d..%d", s, lo, hi)
		}
	})
}

// TestSteering: a port's send sockets hold a block of consecutive ports,
// aligned to its size, and a datagram from outer source port P lands in
// receive socket P mod N — every one of 32 ports in the socket the
// program names (with the kernel's hash, 32 datagrams over 8 sockets
// would all land right by chance 1 in 8^32) — which, with two readers,
// is a socket of reader (P mod N) mod 2, so consecutive ports alternate.
func TestSteering(t *testing.T) {
	requireRoot(t)
	for _, readers := range []int{1, 2} {
		tn := newTestNet(t, false)
		peers, _ := NewPeers(addrB)
		p := listenIn(t, tn.a, Config{Local: addrA, Peers: peers, FlowQueues: 8, Readers: readers})
		if steered, consecutive := p.Steering(); !steered || !consecutive {
			t.Fatalf("readers %d: Steering() = %v, %v; want both", readers, steered, consecutive)
		}
		ports := p.SourcePorts()
		if len(ports) != DefaultSendSockets || int(ports[0])%len(ports) != 0 {
			t.Errorf("send ports %v: want %d from a multiple of %d", ports, DefaultSendSockets, DefaultSendSockets)
		}
		for i, sp := range ports {
			if sp != ports[0]+uint16(i) {
				t.Fatalf("send ports %v are not consecutive", ports)
			}
		}
		readerOf := map[*os.File]int{}
		for r, st := range p.rxs {
			for _, s := range st.socks {
				readerOf[s.f] = r
			}
		}
		dst := netip.AddrPortFrom(addrA, UDPPort)
		const first, n = 41000, 32
		for i := range n {
			c := udpIn(t, tn.b, fmt.Sprintf("%v:%d", addrB, first+i))
			if _, err := c.WriteToUDPAddrPort(vxUDP(1, 2, []byte("steer")), dst); err != nil {
				t.Fatal(err)
			}
		}
		for k, s := range p.rx {
			if r, ok := readerOf[s.f]; !ok || r != k%readers {
				t.Errorf("readers %d: socket %d is reader %d's (%v), want reader %d's", readers, k, r, ok, k%readers)
			}
		}
		seen := 0
		testutil.Eventually(5*time.Second, func() bool {
			for k, s := range p.rx {
				for _, sport := range drainRx(t, s) {
					seen++
					if int(sport)%len(p.rx) != k {
						t.Errorf("readers %d: a datagram from port %d landed in socket %d, want %d", readers, sport, k, int(sport)%len(p.rx))
					}
				}
			}
			return seen >= n
		})
		if seen != n {
			t.Errorf("readers %d: %d datagrams read from the sockets, want %d", readers, seen, n)
		}
	}
}

// drainRx reads every datagram queued in s without waiting and returns
// their source ports.
func drainRx(t *testing.T, s rxSocket) []uint16 {
	t.Helper()
	var out []uint16
	buf := make([]byte, 2048)
	for {
		var from unix.Sockaddr
		err := s.control(func(fd int) (err error) {
			_, from, err = unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT)
			return err
		})
		if errors.Is(err, unix.EAGAIN) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, uint16(from.(*unix.SockaddrInet4).Port))
	}
}

// TestSendBlockFallback: the block honours the namespace's ephemeral
// range and reserved ports, and with no free block the send sockets take
// ports from the kernel and the port still opens.
func TestSendBlockFallback(t *testing.T) {
	requireRoot(t)
	tn := newTestNet(t, false)
	sysctl := func(kv string) {
		t.Helper()
		if out, err := exec.Command("ip", "netns", "exec", tn.a, "sysctl", "-qw", kv).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v\n%s", kv, err, out)
		}
	}
	sysctl("net.ipv4.ip_local_port_range=40000 40015")
	sysctl("net.ipv4.ip_local_reserved_ports=40000-40007")
	peers, _ := NewPeers(addrB)
	cfg := Config{Local: addrA, Peers: peers, SendSockets: 8}
	p := listenIn(t, tn.a, cfg)
	if _, consecutive := p.Steering(); !consecutive {
		t.Error("no block found, want 40008..40015")
	}
	if ports := p.SourcePorts(); ports[0] != 40008 || ports[7] != 40015 {
		t.Errorf("send ports %v, want 40008..40015 (40000..40007 are reserved)", ports)
	}
	p.Close()

	// The only block taken in part: the kernel picks the ports.
	sysctl("net.ipv4.ip_local_reserved_ports=")
	busy := []*net.UDPConn{udpIn(t, tn.a, addrA.String()+":40003"), udpIn(t, tn.a, addrA.String()+":40012")}
	p = listenIn(t, tn.a, cfg)
	if _, consecutive := p.Steering(); consecutive {
		t.Errorf("send ports %v called consecutive with 40003 and 40012 taken", p.SourcePorts())
	}
	ports := p.SourcePorts()
	slices.Sort(ports)
	if len(slices.Compact(ports)) != cfg.SendSockets {
		t.Errorf("send ports %v: want %d distinct", p.SourcePorts(), cfg.SendSockets)
	}
	for _, c := range busy {
		if sp := uint16(c.LocalAddr().(*net.UDPAddr).Port); slices.Contains(ports, sp) {
			t.Errorf("send port %d was already taken", sp)
		}
	}
}
