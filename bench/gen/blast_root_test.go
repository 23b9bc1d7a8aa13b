package gen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/netconf"
)

// vethPair creates namespaces <p>-a and <p>-b joined by veth a (10.77.0.1)
// – b (10.77.0.2), MTU 1500 (interfaces bla and blb), and returns their paths. They are removed
// when the test ends.
func vethPair(t *testing.T) (a, b string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	p := fmt.Sprintf("gvst-gen-%d", os.Getpid())
	na, nb := p+"-a", p+"-b"
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{na, nb} {
		run("netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	run("-n", na, "link", "add", "bla", "type", "veth", "peer", "name", "blb", "netns", nb)
	run("-n", na, "addr", "add", "10.77.0.1/24", "dev", "bla")
	run("-n", nb, "addr", "add", "10.77.0.2/24", "dev", "blb")
	for _, c := range [][2]string{{na, "bla"}, {nb, "blb"}, {na, "lo"}, {nb, "lo"}} {
		run("-n", c[0], "link", "set", c[1], "up")
	}
	return netconf.NsPath(na), netconf.NsPath(nb)
}

func inNS[T any](t *testing.T, ns string, f func() (T, error)) T {
	t.Helper()
	var v T
	if err := netconf.Do(ns, func() (err error) { v, err = f(); return err }); err != nil {
		t.Fatal(err)
	}
	return v
}

// blastOnce blasts cfg from a to the receiver on b and returns both
// results.
func blastOnce(t *testing.T, a, b string, cfg BlastConfig) (BlastResult, ReceiveResult) {
	t.Helper()
	_, stop := receive(t, b, cfg.DstPort)
	bl := inNS(t, a, func() (*Blaster, error) { return NewBlaster(cfg) })
	defer bl.Close()
	sent, err := bl.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return sent, stop()
}

// receive starts a Receiver on blb in namespace b for the blast port; stop
// waits 200 ms for stragglers, ends it and returns what it counted.
func receive(t *testing.T, b string, port uint16) (rx *Receiver, stop func() ReceiveResult) {
	t.Helper()
	rx = inNS(t, b, func() (*Receiver, error) { return NewReceiver(ReceiverConfig{Dev: "blb", Port: port}) })
	ctx, cancel := context.WithCancel(context.Background())
	rc := make(chan ReceiveResult, 1)
	go func() {
		r, err := rx.Run(ctx)
		if err != nil {
			t.Error(err)
		}
		rc <- r
	}()
	return rx, func() ReceiveResult {
		// A blast may lose frames, so how many will come is not known: a
		// grace period, as a traffic generator's sink has.
		time.Sleep(200 * time.Millisecond) // pacing: the receiver collects what is still in flight
		cancel()
		r := <-rc
		rx.Close()
		return r
	}
}

// TestBlastVeth blasts through a veth pair between two namespaces at a set
// rate, with ARP resolution of the destination MAC, and checks the
// receiver's counts and the achieved rate; then as fast as possible; and
// that bad sizes fail.
func TestBlastVeth(t *testing.T) {
	a, b := vethPair(t)
	dst := netip.MustParseAddr("10.77.0.2")

	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprintf("rate/%d threads", threads), func(t *testing.T) {
			// 10 kpps: low enough that a loaded 2-core machine does not
			// starve the sender; overshooting is checked tighter than
			// falling short.
			const rate, flows = 10000, 16
			cfg := BlastConfig{Dev: "bla", Dst: dst, DstPort: 9000, Size: 64, Flows: flows, Rate: rate, Threads: threads, Duration: time.Second}
			sent, got := blastOnce(t, a, b, cfg)
			t.Logf("sent %+v (%.0f pps), received %+v", sent, sent.PPS(), got)
			if pps := sent.OfferedPPS(); pps < 0.8*rate || pps > 1.05*rate {
				t.Errorf("offered %.0f pps, want %d −20 %%/+5 %%", pps, rate)
			}
			if !sent.QdiscBypass {
				t.Error("PACKET_QDISC_BYPASS not set")
			}
			if d := got.Delivered(); d > sent.Frames || float64(d) < 0.95*float64(sent.Frames) {
				t.Errorf("delivered %d of %d frames", d, sent.Frames)
			}
			if got.Flows != flows || float64(got.FlowMin) < 0.9*float64(got.FlowMax) {
				t.Errorf("flows %d, per flow %d..%d", got.Flows, got.FlowMin, got.FlowMax)
			}
			if got.Frames > 0 && got.Bytes != got.Frames*64 {
				t.Errorf("%d bytes in %d frames of 64", got.Bytes, got.Frames)
			}
		})
	}

	t.Run("flat out", func(t *testing.T) {
		cfg := BlastConfig{Dev: "bla", Dst: dst, DstMAC: mustMAC(t, b), DstPort: 9001, Size: 1400, Flows: 5, Threads: 2, Duration: 500 * time.Millisecond}
		sent, got := blastOnce(t, a, b, cfg)
		t.Logf("sent %+v (%.0f pps), received %+v", sent, sent.PPS(), got)
		if sent.Frames < 1000 || got.Delivered() == 0 || got.Delivered() > sent.Frames {
			t.Errorf("sent %d, delivered %d", sent.Frames, got.Delivered())
		}
		if got.Frames > 0 && got.Bytes != got.Frames*1400 {
			t.Errorf("%d bytes in %d frames of 1400", got.Bytes, got.Frames)
		}
		if sent.Threads != 2 || got.Frames > 0 && got.Flows != 5 {
			t.Errorf("%d threads, %d flows seen of 5", sent.Threads, got.Flows)
		}
	})

	t.Run("idle", func(t *testing.T) {
		rx := inNS(t, b, func() (*Receiver, error) {
			return NewReceiver(ReceiverConfig{Dev: "blb", Port: 9003, Idle: 300 * time.Millisecond})
		})
		defer rx.Close()
		bl := inNS(t, a, func() (*Blaster, error) {
			return NewBlaster(BlastConfig{Dev: "bla", Dst: dst, DstPort: 9003, Size: 64, Rate: 10000, Duration: 300 * time.Millisecond})
		})
		defer bl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rc := make(chan ReceiveResult, 1)
		go func() { r, _ := rx.Run(ctx); rc <- r }()
		start := time.Now()
		sent, err := bl.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := <-rc
		if took := time.Since(start); took > 2*time.Second || got.Delivered() != sent.Frames {
			t.Errorf("receiver with 300 ms idle ended after %v with %d of %d frames", took, got.Delivered(), sent.Frames)
		}
	})

	t.Run("allocs", func(t *testing.T) {
		bl := inNS(t, a, func() (*Blaster, error) {
			return NewBlaster(BlastConfig{Dev: "bla", Dst: dst, Size: 64, Flows: 64})
		})
		defer bl.Close()
		if n := testing.AllocsPerRun(100, func() {
			if _, _, err := bl.senders[0].sendBatch(blastBatch); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%v allocations per batch", n)
		}
	})

	t.Run("bad sizes", func(t *testing.T) {
		for _, c := range []struct {
			size int
			want error
			msg  string
		}{{63, ErrFrameSize, "63"}, {9001, ErrFrameSize, "9001"}, {1515, ErrMTU, "MTU 1500"}, {1514, nil, ""}} {
			err := netconf.Do(a, func() error {
				bl, err := NewBlaster(BlastConfig{Dev: "bla", Dst: dst, Size: c.size})
				if err == nil {
					bl.Close()
				}
				return err
			})
			if c.want == nil {
				if err != nil {
					t.Errorf("size %d (MTU+14): %v", c.size, err)
				}
				continue
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("size %d: err %v, want %v naming %q", c.size, err, c.want, c.msg)
			}
		}
		if err := netconf.Do(a, func() error {
			_, err := NewBlaster(BlastConfig{Dev: "bla", Dst: netip.MustParseAddr("10.77.0.99"), Size: 64})
			return err
		}); err == nil || !strings.Contains(err.Error(), "ARP") {
			t.Errorf("unresolvable destination: err %v", err)
		}
	})
}

// mustMAC returns the MAC address of b in namespace ns.
func mustMAC(t *testing.T, ns string) net.HardwareAddr {
	return inNS(t, ns, func() (net.HardwareAddr, error) {
		ifc, err := net.InterfaceByName("blb")
		if err != nil {
			return nil, err
		}
		return ifc.HardwareAddr, nil
	})
}

// TestReceiverCountsGSO: a UDP GSO super-frame reaching the receiver's
// interface whole (veth keeps UDP_SEGMENT sends whole; gvs writes merged
// datagrams to a pod's TAP as one) counts as its datagrams, with their
// sizes on the wire, not as one frame.
func TestReceiverCountsGSO(t *testing.T) {
	a, b := vethPair(t)
	const port, seg, flow = 9400, 100, 3
	rx, stop := receive(t, b, port)
	// Five datagrams in one UDP_SEGMENT send (the last 60 bytes), then
	// one plain datagram; only the first payload of each send names the
	// flow, as in a merged super-frame.
	payload := func(n int, seq uint64) []byte {
		p := make([]byte, n)
		binary.BigEndian.PutUint32(p, BlastMagic)
		binary.BigEndian.PutUint32(p[4:], flow)
		binary.BigEndian.PutUint64(p[8:], seq)
		return p
	}
	inNS(t, a, func() (struct{}, error) {
		// Not connected: the stack answers the first send with a port
		// unreachable, which a connected socket would report.
		dst := &net.UDPAddr{IP: net.IPv4(10, 77, 0, 2), Port: port}
		c, err := net.ListenUDP("udp4", nil)
		if err != nil {
			return struct{}{}, err
		}
		defer c.Close()
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], seg)
		if _, _, err := c.WriteMsgUDP(payload(4*seg+60, 0), oob, dst); err != nil {
			return struct{}{}, fmt.Errorf("UDP_SEGMENT send: %w", err)
		}
		_, err = c.WriteToUDP(payload(seg, 1), dst)
		return struct{}{}, err
	})
	// All six counted before the receiver stops (the first send may wait
	// for ARP, and Run may not have started yet on a busy machine).
	testutil.WaitFor(t, 10*time.Second, "the receiver to count six datagrams", func() (bool, error) {
		return rx.Seen() >= 6, fmt.Errorf("%d counted", rx.Seen())
	})
	r := stop()
	const hdr = ethLen + ipv4Len + udpLen
	if r.Frames != 6 || r.Bytes != 5*hdr+4*seg+60+hdr+seg || r.Flows != 1 || r.FlowMax != 6 {
		t.Errorf("counted %+v; want 6 frames of %d bytes in flow %d", r, 5*hdr+4*seg+60+hdr+seg, flow)
	}
}
