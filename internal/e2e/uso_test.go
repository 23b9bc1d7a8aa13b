package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
	"golang.org/x/sys/unix"
)

// TestUSO: a pod's eth0 offers UDP segmentation offload, so a socket with
// UDP_SEGMENT hands gvs one UDP super-frame per send; gvs segments it into
// VXLAN datagrams for a pod on another node, where gvs merges them again
// into a super-frame for the pod's TAP, and passes it whole to a pod on the
// same node. Every datagram must arrive once, intact, with a valid checksum
// (the receiving kernels drop bad ones), the sender's switch port must
// have read super-frames, not datagrams, and the receiver's pod port
// written super-frames.
func TestUSO(t *testing.T) {
	c := up(t, "us", cluster.Spec{
		Lab:  lab.Spec{Nodes: 2, PodsPerNode: 2, Projects: []string{"default"}},
		Mode: "subnet",
	})
	a, local, remote := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1], c.Nodes[1].Pods[0]
	out, err := c.Lab.Exec(ctx(t), a.NS, "ethtool", "-k", "eth0")
	if err != nil {
		t.Fatalf("ethtool -k: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "tx-udp-segmentation: on") {
		if kernelAtLeast(t, 6, 2) {
			t.Fatalf("pod eth0 has no USO on a kernel that offers it on TAPs:\n%s", out)
		}
		t.Skipf("the kernel has no USO on TAPs (Linux 6.2+):\n%s", out)
	}
	const size, count = 1000, 40
	before := portPackets(t, c, 0, 3, "rx")
	beforeRemote := portPackets(t, c, 1, 3, "tx")
	for _, dst := range []cluster.Pod{remote, local} {
		got := usoExchange(t, a, dst, size, count)
		if len(got) != count {
			t.Errorf("%s → %s: %d of %d datagrams arrived", a.Name, dst.Name, len(got), count)
		}
		seen := map[uint32]bool{}
		for i, d := range got {
			seq := binary.BigEndian.Uint32(d)
			if int(seq) >= count || len(d) != datagramSize(int(seq), size, count) || !bytes.Equal(d[4:], pattern(seq, len(d)-4)) {
				t.Errorf("%s → %s: datagram %d (%d bytes) damaged", a.Name, dst.Name, i, len(d))
				continue
			}
			if seen[seq] {
				t.Errorf("%s → %s: datagram %d arrived twice", a.Name, dst.Name, seq)
			}
			seen[seq] = true
		}
	}
	// Two sends of 40 datagrams each; ARP and neighbour traffic add a few
	// frames. Without USO the port would have read 80.
	if n := portPackets(t, c, 0, 3, "rx") - before; n >= count {
		t.Errorf("the sender's port read %v frames for 2 UDP GSO sends of %d datagrams: no USO", n, count)
	}
	// The remote node merged the datagrams again toward its pod (vxlan
	// CoalesceUDP): far fewer writes than datagrams.
	if n := portPackets(t, c, 1, 3, "tx") - beforeRemote; n >= count/2 {
		t.Errorf("the receiver's pod port wrote %v frames for %d datagrams: not merged", n, count)
	}
}

// pattern is the payload of datagram seq after its 4-byte sequence number.
func pattern(seq uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(seq)*31 + i)
	}
	return b
}

// datagramSize is the length of datagram seq of a send: size, except the
// last one, which is shorter (so that the kernel's and gvs's handling of
// a short last segment is tested too).
func datagramSize(seq, size, count int) int {
	if seq == count-1 {
		return size / 2
	}
	return size
}

// usoExchange sends count datagrams (the last one shorter) from src to dst
// in one sendmsg with UDP_SEGMENT and returns what dst's socket received.
func usoExchange(t *testing.T, src, dst cluster.Pod, size, count int) [][]byte {
	t.Helper()
	var rx *net.UDPConn
	if err := netconf.Do(dst.NSPath, func() (err error) {
		rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: dst.IP.AsSlice(), Port: 9400})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var buf []byte
	for seq := range count {
		n := datagramSize(seq, size, count)
		d := make([]byte, 4, n)
		binary.BigEndian.PutUint32(d, uint32(seq))
		buf = append(buf, append(d, pattern(uint32(seq), n-4)...)...)
	}
	// The socket belongs to src's namespace; it is used from here on.
	var fd int
	if err := netconf.Do(src.NSPath, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, size); err != nil {
		t.Fatalf("UDP_SEGMENT: %v", err)
	}
	to := &unix.SockaddrInet4{Port: 9400, Addr: dst.IP.As4()}
	// The first send may wait for ARP; a datagram the neighbour queue
	// dropped would show up as missing, so warm the path up first: a
	// warm-up datagram that arrives says every neighbour on the way is
	// resolved.
	b := make([]byte, 65536)
	testutil.WaitFor(t, 10*time.Second, "a warm-up datagram to arrive", func() (bool, error) {
		if err := unix.Sendto(fd, []byte("warm-up"), 0, to); err != nil {
			t.Fatalf("send %s → %s: %v", src.Name, dst.Name, err)
		}
		_ = rx.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := rx.Read(b)
		return err == nil && string(b[:n]) == "warm-up", err
	})
	if err := unix.Sendto(fd, buf, 0, to); err != nil {
		t.Fatalf("send %s → %s: %v", src.Name, dst.Name, err)
	}
	var got [][]byte
	for {
		_ = rx.SetReadDeadline(time.Now().Add(time.Second))
		n, err := rx.Read(b)
		if err != nil {
			return got
		}
		if string(b[:n]) != "warm-up" {
			got = append(got, bytes.Clone(b[:n]))
		}
	}
}

// portPackets returns node i's gvs_port_<dir>_packets_total (dir rx or
// tx) of switch port no (a static pod's port is named after its TAP,
// gvs<no>).
func portPackets(t *testing.T, c *cluster.Cluster, i, no int, dir string) float64 {
	t.Helper()
	body := httpGet(t, c.Nodes[i].NSPath, "127.0.0.1:9101", "/metrics")
	return metricValue(t, body, fmt.Sprintf(`gvs_port_%s_packets_total{name="gvs%d",port="%d"}`, dir, no, no))
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release, err)
	}
	return ma > major || ma == major && mi >= minor
}
