package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	xipv4 "golang.org/x/net/ipv4"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/vxlan"
)

// The multicast tests' group and port.
var (
	mcastGroup = netip.MustParseAddr("239.1.2.3")
	mcastPort  = 5007
)

// TestMulticast: multicast per project across nodes, in both control-plane
// modes (Kubernetes: the NetNamespace annotation, written by gvsctl; the
// etcd registry: the project record, by gvsctl), in multitenant mode and,
// with Kubernetes, in networkpolicy mode (where multicast takes the
// connection-tracking path). Receivers are UDP sockets
// that join the group (IP_ADD_MEMBERSHIP) inside the pods' namespaces, the
// sender a UDP socket in a pod's: nothing is crafted except the underlay
// attacker's VXLAN.
func TestMulticast(t *testing.T) {
	for _, mode := range []struct {
		name, short, plane, mode string
	}{
		{"kube", "mck", cluster.ControlPlaneKube, "multitenant"},
		{"registry", "mce", cluster.ControlPlaneEmbedded, "multitenant"},
		{"kube-networkpolicy", "mcn", cluster.ControlPlaneKube, "networkpolicy"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.plane == cluster.ControlPlaneKube {
				kubetest.Require(t)
			}
			multicastSuite(t, mode.short, mode.plane, mode.mode)
		})
	}
}

// multicastSuite runs the multicast checks on a two-node cluster in mode
// with the control plane plane. Per node: p1 default (VNID 0), p2 alpha,
// p3 beta, p4 alpha.
func multicastSuite(t *testing.T, short, plane, mode string) {
	c := up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 2, PodsPerNode: 4, Projects: []string{"default", "alpha", "beta", "alpha"}, External: true},
		Mode:         mode,
		ControlPlane: plane,
		// CNI pods keep their (persistent) TAPs, and the receivers their
		// sockets, across a restart of the daemon.
		CNI: true,
	})
	n0, n1 := c.Nodes[0].Pods, c.Nodes[1].Pods
	def0, alpha0, beta0, alpha0b := n0[0], n0[1], n0[2], n0[3]
	def1, alpha1, beta1, alpha1b := n1[0], n1[1], n1[2], n1[3]
	all := []cluster.Pod{def0, alpha0, beta0, alpha0b, def1, alpha1, beta1, alpha1b}
	rx := map[string]*mcastReceiver{}
	for _, p := range all {
		rx[p.Name] = joinGroup(t, p)
	}
	setMulticast := func(t *testing.T, on bool, projects ...string) {
		t.Helper()
		op := "disable-multicast"
		if on {
			op = "enable-multicast"
		}
		if out, err := c.Projects(ctx(t), append([]string{op}, projects...)...); err != nil {
			t.Fatalf("projects %s %v: %v\n%s", op, projects, err, out)
		}
	}
	// only checks that a multicast datagram from pod from reaches exactly
	// the pods named in want (the sender's own socket aside): it sends a
	// fresh datagram until every wanted pod has received one, then a few
	// more, and checks that no other pod received any.
	only := func(t *testing.T, step string, from cluster.Pod, want ...cluster.Pod) {
		t.Helper()
		tag := fmt.Sprintf("%s %s %d", step, from.Name, time.Now().UnixNano())
		wanted := map[string]bool{}
		for _, p := range want {
			wanted[p.Name] = true
		}
		if len(want) > 0 {
			ok := testutil.Eventually(20*time.Second, func() bool {
				mcastSend(t, from, tag)
				for _, p := range want {
					if rx[p.Name].count(tag) == 0 {
						return false
					}
				}
				return true
			})
			if !ok {
				for _, p := range want {
					if rx[p.Name].count(tag) == 0 {
						t.Errorf("%s: %s (%s, %s) did not receive %s's (%s) multicast", step, p.Name, p.Project, c.Nodes[p.Node].Name, from.Name, from.Project)
					}
				}
			}
		}
		// More of the same, then a marker the wanted pods must see after
		// them: by then any copy to a pod that must not have one has
		// arrived too.
		for range 3 {
			mcastSend(t, from, tag)
		}
		if len(want) > 0 {
			marker := tag + " marker"
			testutil.Eventually(10*time.Second, func() bool {
				mcastSend(t, from, marker)
				return rx[want[0].Name].count(marker) > 0
			})
		} else {
			// Nobody is to receive: give the datagrams the time a
			// wanted pod takes (milliseconds) many times over.
			testutil.Eventually(2*time.Second, func() bool {
				for _, p := range all {
					if p.Name != from.Name && rx[p.Name].count(tag) > 0 {
						return true
					}
				}
				return false
			})
		}
		for _, p := range all {
			if p.Name == from.Name || wanted[p.Name] {
				continue
			}
			if n := rx[p.Name].count(tag); n > 0 {
				t.Errorf("%s: %s (%s, %s) received %s's (%s) multicast %d times", step, p.Name, p.Project, c.Nodes[p.Node].Name, from.Name, from.Project, n)
			}
		}
	}

	// quiet waits until pod from's multicast reaches none of the others
	// (a change the nodes take live, not at once).
	quiet := func(t *testing.T, from cluster.Pod) {
		t.Helper()
		ok := testutil.Eventually(20*time.Second, func() bool {
			tag := fmt.Sprintf("quiet %s %d", from.Name, time.Now().UnixNano())
			for range 3 {
				mcastSend(t, from, tag)
			}
			// A datagram that is delivered arrives within milliseconds.
			return !testutil.Eventually(time.Second, func() bool {
				for _, p := range all {
					if p.Name != from.Name && rx[p.Name].count(tag) > 0 {
						return true
					}
				}
				return false
			})
		})
		if !ok {
			t.Errorf("%s's (%s) multicast still reaches other pods", from.Name, from.Project)
		}
	}

	t.Run("off-by-default", func(t *testing.T) {
		only(t, "off by default", alpha0)
		only(t, "off by default", def0)
	})
	t.Run("enabled", func(t *testing.T) {
		setMulticast(t, true, "alpha")
		// The same project on the other node and on the same node; not
		// beta's, not the global project's.
		only(t, "alpha enabled", alpha0, alpha0b, alpha1, alpha1b)
		only(t, "alpha enabled, from the other node", alpha1b, alpha0, alpha0b, alpha1)
		only(t, "beta still disabled", beta0)
	})
	t.Run("projects-stay-apart", func(t *testing.T) {
		setMulticast(t, true, "beta", "default")
		only(t, "beta enabled", beta1, beta0)
		only(t, "alpha does not reach beta", alpha0, alpha0b, alpha1, alpha1b)
		// A global project's multicast stays in VNID 0.
		only(t, "the global project", def0, def1)
	})
	t.Run("forged-vxlan", func(t *testing.T) {
		vnids, err := c.ProjectVNIDs(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		v, ok := vnids["alpha"]
		if !ok {
			t.Fatalf("no VNID for alpha in %v", vnids)
		}
		// An underlay host that is not a node sends alpha's VNI,
		// multicast from an address of node n1's subnet, to n0.
		before := tunnelDrops(t, c, 0)
		tag := fmt.Sprintf("forged %d", time.Now().UnixNano())
		frame := mcastFrame(alpha1.IP.As4(), tag)
		pkt := make([]byte, vxlan.HeaderLen+len(frame))
		vxlan.PutHeader(pkt, v)
		copy(pkt[vxlan.HeaderLen:], frame)
		var conn net.Conn
		if err := netconf.Do(c.Lab.External.NSPath, func() error {
			var err error
			conn, err = net.Dial("udp4", c.Nodes[0].IP.String()+":4789")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for range 5 {
			if _, err := conn.Write(pkt); err != nil {
				t.Fatal(err)
			}
		}
		var after uint64
		if !testutil.Eventually(5*time.Second, func() bool { after = tunnelDrops(t, c, 0); return after >= before+5 }) {
			t.Errorf("unknown-peer drops went from %d to %d; want +5", before, after)
		}
		// The real thing still works, and the forged datagrams are not
		// behind it.
		only(t, "alpha after the forgery", alpha1, alpha0, alpha0b, alpha1b)
		for _, p := range all {
			if n := rx[p.Name].count(tag); n > 0 {
				t.Errorf("forged VXLAN multicast reached %s (%s) %d times", p.Name, p.Project, n)
			}
		}
	})
	t.Run("disabled-live", func(t *testing.T) {
		setMulticast(t, false, "alpha")
		quiet(t, alpha0)
		only(t, "alpha disabled", alpha0)
		only(t, "alpha disabled, from the other node", alpha1)
		only(t, "beta still enabled", beta0, beta1)
		setMulticast(t, true, "alpha")
		only(t, "alpha enabled again", alpha1, alpha0, alpha0b, alpha1b)
	})
	t.Run("after-restart", func(t *testing.T) {
		// A node restarted takes the opt-ins from the control plane
		// again.
		if err := c.RestartDaemon(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
		only(t, "alpha after n2 restarted", alpha1, alpha0, alpha0b, alpha1b)
		only(t, "beta after n2 restarted", beta0, beta1)
		only(t, "the global project after n2 restarted", def1, def0)
	})
	if t.Failed() {
		for i := range c.Nodes {
			out, _ := c.Ctl(ctx(t), i, "dump-flows", "table=110")
			out2, _ := c.Ctl(ctx(t), i, "dump-flows", "table=111")
			out3, _ := c.Ctl(ctx(t), i, "dump-flows", "table=120")
			t.Logf("--- %s tables 110, 111, 120 ---\n%s%s%s", c.Nodes[i].Name, out, out2, out3)
		}
	}
}

// mcastReceiver is a UDP socket joined to mcastGroup inside a pod's
// namespace, and what it received, by payload.
type mcastReceiver struct {
	conn *net.UDPConn
	mu   sync.Mutex
	got  map[string]int
}

func (r *mcastReceiver) count(payload string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[payload]
}

// joinGroup opens a socket in pod p's namespace that joins mcastGroup on
// the pod's interface (IP_ADD_MEMBERSHIP) and records what it receives
// until the test ends.
func joinGroup(t *testing.T, p cluster.Pod) *mcastReceiver {
	t.Helper()
	r := &mcastReceiver{got: map[string]int{}}
	err := nstest.Do(p.NS, func() error {
		ifi, err := netconf.InterfaceWith(p.IP)
		if err != nil {
			return err
		}
		r.conn, err = net.ListenMulticastUDP("udp4", ifi, &net.UDPAddr{IP: mcastGroup.AsSlice(), Port: mcastPort})
		return err
	})
	if err != nil {
		t.Fatalf("%s: joining %v: %v", p.Name, mcastGroup, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { r.conn.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := r.conn.ReadFromUDP(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			r.mu.Lock()
			r.got[string(buf[:n])]++
			r.mu.Unlock()
		}
	}()
	return r
}

// mcastSenders caches a sending socket per pod namespace.
var (
	mcastSendersMu sync.Mutex
	mcastSenders   = map[string]*net.UDPConn{}
)

// mcastSend sends payload to mcastGroup from a UDP socket in pod p's
// namespace, out of the pod's interface (IP_MULTICAST_IF).
func mcastSend(t *testing.T, p cluster.Pod, payload string) {
	t.Helper()
	mcastSendersMu.Lock()
	conn := mcastSenders[p.NS]
	mcastSendersMu.Unlock()
	if conn == nil {
		err := nstest.Do(p.NS, func() error {
			ifi, err := netconf.InterfaceWith(p.IP)
			if err != nil {
				return err
			}
			conn, err = net.DialUDP("udp4", &net.UDPAddr{IP: p.IP.AsSlice()}, &net.UDPAddr{IP: mcastGroup.AsSlice(), Port: mcastPort})
			if err != nil {
				return err
			}
			pc := xipv4.NewPacketConn(conn)
			if err := pc.SetMulticastInterface(ifi); err != nil {
				conn.Close()
				return err
			}
			// The sender's own group membership (if any) need not
			// hear itself.
			return pc.SetMulticastLoopback(false)
		})
		if err != nil {
			t.Fatalf("%s: sending socket: %v", p.Name, err)
		}
		mcastSendersMu.Lock()
		mcastSenders[p.NS] = conn
		mcastSendersMu.Unlock()
		t.Cleanup(func() {
			mcastSendersMu.Lock()
			delete(mcastSenders, p.NS)
			mcastSendersMu.Unlock()
			conn.Close()
		})
	}
	if _, err := conn.Write([]byte(payload)); err != nil {
		t.Errorf("%s: sending: %v", p.Name, err)
	}
}

// mcastFrame is an Ethernet frame carrying a UDP datagram with payload from
// src to mcastGroup:mcastPort (the underlay attacker's forgery).
func mcastFrame(src [4]byte, payload string) []byte {
	g := mcastGroup.As4()
	f := make([]byte, 14+20+8+len(payload))
	copy(f[0:6], []byte{0x01, 0x00, 0x5e, g[1] & 0x7f, g[2], g[3]})
	copy(f[6:12], []byte{0x0a, 0x58, src[0], src[1], src[2], src[3]})
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0], ip[8], ip[9] = 0x45, 1, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
	copy(ip[12:16], src[:])
	copy(ip[16:20], g[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := f[34:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], uint16(mcastPort))
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	copy(udp[8:], payload)
	return f
}
