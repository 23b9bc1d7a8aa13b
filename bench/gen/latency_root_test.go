package gen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/netconf"
)

// TestProbeLateEcho starts Probe before its echo server listens, as
// gvs-bench compare may on a loaded machine (it gives the server 300 ms
// to start): the first probes draw ICMP port unreachable, which a
// connected UDP socket reports as ECONNREFUSED on its next read. Probe
// must count the replies that come once the server is up. Its reader used
// to end at that error, so no reply was counted however many came
// ("no reply to 4996 probes", 2026-11-29, taken for a deaf floor).
func TestProbeLateEcho(t *testing.T) {
	a, b := vethPair(t)
	const port = 9007
	type result struct {
		r   LatencyResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		res.err = netconf.Do(a, func() error {
			var err error
			res.r, err = Probe(context.Background(), ProbeConfig{Addr: "10.77.0.2:" + strconv.Itoa(port),
				Count: 300, Interval: time.Millisecond, Timeout: 300 * time.Millisecond})
			return err
		})
		done <- res
	}()
	// Start the echo server only once b has refused a probe, so that the
	// refusal surely came before it.
	deadline := time.Now().Add(10 * time.Second)
	for destUnreachs(t, b) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no ICMP port unreachable from b within 10 s")
		}
		time.Sleep(time.Millisecond) // polls a kernel counter: there is no event to wait on
	}
	conn := inNS(t, b, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	})
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = Echo(ctx, conn) }()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	t.Logf("%+v", res.r)
	// Most probes come after the server is up; allow for a slow start.
	if res.r.Received < res.r.Sent/2 {
		t.Errorf("received %d of %d probes, want at least half", res.r.Received, res.r.Sent)
	}
}

// destUnreachs returns namespace ns's count of ICMP destination
// unreachable messages sent (Icmp OutDestUnreachs).
func destUnreachs(t *testing.T, ns string) int {
	t.Helper()
	snmp := inNS(t, ns, func() ([]byte, error) { return os.ReadFile("/proc/thread-self/net/snmp") })
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(snmp))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || f[0] != "Icmp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "OutDestUnreachs" && i < len(f) {
				v, _ := strconv.Atoi(f[i])
				return v
			}
		}
	}
	t.Fatal("no Icmp OutDestUnreachs in /proc/thread-self/net/snmp")
	return 0
}

// TestProbeSlow has an echo server hold the replies to probes 20–24 for
// 15 ms and checks that Probe counts them as slow, with their sequence
// numbers.
func TestProbeSlow(t *testing.T) {
	a, b := vethPair(t)
	const port = 9008
	conn := inNS(t, b, func() (*net.UDPConn, error) {
		return net.ListenUDP("udp4", &net.UDPAddr{Port: port})
	})
	defer conn.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			pkt := append([]byte(nil), buf[:n]...)
			if n >= probeSize && binary.BigEndian.Uint64(pkt[8:]) >= 20 && binary.BigEndian.Uint64(pkt[8:]) <= 24 {
				time.AfterFunc(15*time.Millisecond, func() { _, _ = conn.WriteToUDPAddrPort(pkt, from) })
				continue
			}
			_, _ = conn.WriteToUDPAddrPort(pkt, from)
		}
	}()
	var r LatencyResult
	err := netconf.Do(a, func() (err error) {
		r, err = Probe(context.Background(), ProbeConfig{Addr: "10.77.0.2:" + strconv.Itoa(port),
			Count: 60, Interval: time.Millisecond, Timeout: 300 * time.Millisecond})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	// A loaded machine may make another reply slow too: at least these.
	if r.Slow < 5 || r.SlowFirst > 20 || r.SlowLast < 24 {
		t.Errorf("slow %d (probes %d–%d), want at least 5 covering 20–24", r.Slow, r.SlowFirst, r.SlowLast)
	}
}
