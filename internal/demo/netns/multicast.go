package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	xipv4 "golang.org/x/net/ipv4"

	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// MulticastGroup is the group and port the multicast step sends to.
var MulticastGroup = netip.AddrPortFrom(netip.MustParseAddr("239.1.2.3"), 5007)

// MulticastResult is what the multicast step saw: the sender, an alpha pod
// on n1, sends to MulticastGroup; every other pod has a socket joined to
// the group.
type MulticastResult struct {
	// Sender is the pod that sent.
	Sender cluster.Pod
	// OffBefore: no pod received the sender's datagrams before alpha was
	// opted in (multicast is off by default).
	OffBefore bool
	// Received lists the pods that received the datagrams once alpha was
	// opted in, NotReceived the other receivers.
	Received, NotReceived []cluster.Pod
	// Disabled: after `projects disable-multicast alpha` no pod received
	// the sender's datagrams any more.
	Disabled bool
}

// multicast shows multicast per project: an alpha pod on n1 sends to
// MulticastGroup; with multicast off (the default) nobody receives; with
// `gvsctl projects enable-multicast alpha` the alpha pod on n2 does (head-end
// replication over VXLAN, tables 110/111/120) and no pod of another project
// does; `disable-multicast alpha` turns it off again, so the demo leaves it
// off. Receivers are UDP sockets joined to the group inside the pods'
// namespaces, held by the demo process for the step's duration.
func (r *run) multicast(ctx context.Context) {
	c := r.c
	res := &r.res.Multicast
	from := c.Nodes[0].Pods[1] // alpha on n1
	res.Sender = from
	var pods []cluster.Pod
	for _, n := range c.Nodes {
		for _, p := range n.Pods {
			if p.Name != from.Name {
				pods = append(pods, p)
			}
		}
	}
	r.step(fmt.Sprintf("multicast: every other pod joins %s (a UDP socket, IP_ADD_MEMBERSHIP); %s (%s, alpha) sends to it", MulticastGroup, from.Name, from.IP))
	rx := make([]*mcastReceiver, len(pods))
	for i, p := range pods {
		var err error
		if rx[i], err = joinGroup(p); err != nil {
			r.fail(err.Error())
			for _, x := range rx[:i] {
				x.close()
			}
			return
		}
		defer rx[i].close()
	}
	tx, err := mcastSender(from)
	if err != nil {
		r.fail(err.Error())
		return
	}
	defer tx.Close()
	seq := 0
	send := func(prefix string) string {
		seq++
		tag := fmt.Sprintf("%s %d", prefix, seq)
		_, _ = tx.Write([]byte(tag))
		return tag
	}
	// heard returns the indexes of the pods that received a datagram whose
	// payload starts with prefix.
	heard := func(prefix string) []int {
		var got []int
		for i, x := range rx {
			if x.heard(prefix) {
				got = append(got, i)
			}
		}
		return got
	}
	// nobody sends a few datagrams and reports whether none arrived
	// anywhere within a second (a delivered one takes milliseconds).
	nobody := func(prefix string) bool {
		for range 3 {
			send(prefix)
		}
		return !eventually(ctx, time.Second, 20*time.Millisecond, func() bool { return len(heard(prefix)) > 0 })
	}
	names := func(is []int) string {
		var s []string
		for _, i := range is {
			s = append(s, pods[i].Name)
		}
		return strings.Join(s, ", ")
	}

	if nobody("off") {
		res.OffBefore = true
		r.printf("    before: no pod received (multicast is off by default)\n")
	} else {
		r.fail("multicast reached " + names(heard("off")) + " before alpha was opted in")
	}

	r.step("gvsctl projects enable-multicast alpha")
	if out, err := c.Projects(ctx, "enable-multicast", "alpha"); err != nil {
		r.fail(fmt.Sprintf("projects enable-multicast alpha: %v\n%s", err, out))
		return
	}
	if out, err := c.Projects(ctx, "list"); err != nil {
		r.fail(fmt.Sprintf("projects list: %v\n%s", err, out))
	} else {
		r.printf("%s", indent(string(out)))
		if !multicastOn(string(out), "alpha") {
			r.fail("gvsctl projects list does not show multicast on for alpha")
		}
	}
	// The nodes follow the control plane within a fraction of a second:
	// send until the alpha pods have one, then a few more and a marker
	// the first alpha pod must see after them, so that a copy to a pod
	// that must not have one would have arrived too.
	var want []int
	for i, p := range pods {
		if p.Project == from.Project {
			want = append(want, i)
		}
	}
	all := func(prefix string) bool {
		for _, i := range want {
			if !rx[i].heard(prefix) {
				return false
			}
		}
		return true
	}
	start := time.Now()
	arrived := eventually(ctx, 20*time.Second, 100*time.Millisecond, func() bool { send("on"); return all("on") })
	took := time.Since(start)
	for range 3 {
		send("on")
	}
	if arrived && len(want) > 0 {
		eventually(ctx, 5*time.Second, 50*time.Millisecond, func() bool { send("marker"); return rx[want[0]].heard("marker") })
	}
	for i, p := range pods {
		n := rx[i].count("on")
		switch {
		case n > 0:
			res.Received = append(res.Received, p)
		default:
			res.NotReceived = append(res.NotReceived, p)
		}
		why := "another project"
		if p.Project == from.Project {
			why = "same project, " + where(from, p)
		}
		if n > 0 {
			r.printf("    %s (%s) on %s: received %d datagrams (%s)\n", p.Name, p.Project, c.Nodes[p.Node].Name, n, why)
			if p.Project != from.Project {
				r.fail(fmt.Sprintf("%s (%s) received alpha's multicast", p.Name, p.Project))
			}
		} else {
			r.printf("    %s (%s) on %s: nothing (%s)\n", p.Name, p.Project, c.Nodes[p.Node].Name, why)
			if p.Project == from.Project {
				r.fail(fmt.Sprintf("%s (%s) did not receive alpha's multicast", p.Name, p.Project))
			}
		}
	}
	if arrived {
		// took is an upper bound: the datagrams are sent and looked for
		// every 100 ms.
		r.printf("    (alpha's other pods had them within %v of the opt-in, checked every 100ms; no daemon restarted)\n", took.Round(time.Millisecond))
	}

	r.step("gvsctl projects disable-multicast alpha (the demo leaves multicast off)")
	if out, err := c.Projects(ctx, "disable-multicast", "alpha"); err != nil {
		r.fail(fmt.Sprintf("projects disable-multicast alpha: %v\n%s", err, out))
		return
	}
	// The opt-out takes effect as fast as the opt-in; each try is three
	// datagrams and a second of listening.
	round := 0
	if eventually(ctx, 20*time.Second, 100*time.Millisecond, func() bool { round++; return nobody(fmt.Sprintf("off%d", round)) }) {
		res.Disabled = true
		r.printf("    no pod received any more (3 datagrams, nothing within a second)\n")
	} else {
		r.fail("alpha's multicast still reached " + names(heard(fmt.Sprintf("off%d", round))) + " after disable-multicast")
	}
}

// multicastOn reports whether gvsctl projects list's table shows multicast
// on for project.
func multicastOn(table, project string) bool {
	lines := strings.Split(table, "\n")
	col := slices.Index(strings.Fields(lines[0]), "MULTICAST")
	for _, l := range lines[1:] {
		if f := strings.Fields(l); col >= 0 && len(f) > col && f[0] == project {
			return f[col] == "on"
		}
	}
	return false
}

// where says where pod p is, seen from the sender from.
func where(from, p cluster.Pod) string {
	if from.Node == p.Node {
		return "same node"
	}
	return "other node, through VXLAN"
}

// mcastReceiver is a UDP socket joined to MulticastGroup in a pod's
// namespace and what it received, by payload.
type mcastReceiver struct {
	conn *net.UDPConn
	done chan struct{}
	mu   sync.Mutex
	got  map[string]int
}

// joinGroup opens a socket in pod p's namespace that joins MulticastGroup on
// the pod's interface and records what it receives until close.
func joinGroup(p cluster.Pod) (*mcastReceiver, error) {
	x := &mcastReceiver{got: map[string]int{}, done: make(chan struct{})}
	group := &net.UDPAddr{IP: MulticastGroup.Addr().AsSlice(), Port: int(MulticastGroup.Port())}
	err := netconf.Do(p.NSPath, func() error {
		ifi, err := netconf.InterfaceWith(p.IP)
		if err != nil {
			return err
		}
		x.conn, err = net.ListenMulticastUDP("udp4", ifi, group)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: joining %s: %w", p.Name, MulticastGroup.Addr(), err)
	}
	go func() {
		defer close(x.done)
		buf := make([]byte, 2048)
		for {
			n, _, err := x.conn.ReadFromUDP(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			x.mu.Lock()
			x.got[string(buf[:n])]++
			x.mu.Unlock()
		}
	}()
	return x, nil
}

// close closes the socket and waits for its reader.
func (x *mcastReceiver) close() {
	x.conn.Close()
	<-x.done
}

// count returns how many datagrams whose payload starts with prefix+" "
// arrived.
func (x *mcastReceiver) count(prefix string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for k, v := range x.got {
		if strings.HasPrefix(k, prefix+" ") {
			n += v
		}
	}
	return n
}

// heard reports whether a datagram whose payload starts with prefix+" "
// arrived.
func (x *mcastReceiver) heard(prefix string) bool { return x.count(prefix) > 0 }

// mcastSender returns a UDP socket in pod p's namespace connected to
// MulticastGroup, sending out of the pod's interface (IP_MULTICAST_IF).
func mcastSender(p cluster.Pod) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := netconf.Do(p.NSPath, func() error {
		ifi, err := netconf.InterfaceWith(p.IP)
		if err != nil {
			return err
		}
		conn, err = net.DialUDP("udp4", &net.UDPAddr{IP: p.IP.AsSlice()}, net.UDPAddrFromAddrPort(MulticastGroup))
		if err != nil {
			return err
		}
		if err := xipv4.NewPacketConn(conn).SetMulticastInterface(ifi); err != nil {
			conn.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: sending socket: %w", p.Name, err)
	}
	return conn, nil
}
