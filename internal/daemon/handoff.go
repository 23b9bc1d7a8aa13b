package daemon

// A live upgrade: the new gvs-switchd takes its predecessor's open
// descriptors and state over a unix socket (package internal/handoff)
// instead of waiting for it to exit, so that no frame is dropped.
//
// Order of events (O: the running daemon, N: its successor):
//
//  1. N starts as usual up to the point where it would open devices
//     (configuration, registry, rule program in its own table), then
//     connects to O's handoff socket (Config.HandoffSocket) and says hello.
//     No socket, or nobody accepts on it (a stale socket): N starts afresh
//     (adopt-on-start, as after a stop). O answers but does not hand over
//     (it aborts, or the connection breaks): O may carry on, so N exits
//     (ErrHandoffRefused) rather than run beside it; restarted, it tries
//     again.
//  2. O stops accepting on its CNI and control sockets and waits for the
//     requests in progress (new connections wait in the sockets'
//     backlogs), then parks its switch's readers (frames wait in the TAP
//     queues and socket buffers: nothing is read, so nothing is dropped
//     or forwarded twice). It saves its connection table and sends the
//     descriptors (every pod TAP queue, vxlan0's sockets, tun0, the two
//     listening sockets) and the table.
//  3. N loads the table, builds vxlan0, tun0 and the pods' ports on the
//     descriptors (rules as on a restart: from the configuration and the
//     leases, which both read from the same files) with its own switch
//     paused, so that no frame is read before every port and rule is in;
//     then it resumes (forwards), accepts on the listening sockets, and
//     says ready.
//  4. O, parked all along, closes its descriptors (N holds the same open
//     files: nothing is detached), removes its handoff socket, says bye
//     and exits (or idles until SIGTERM: Config.AfterHandoff); N then
//     listens on the handoff socket itself.
//
// Fail safe: until O reads "ready", O holds everything and can resume. If
// N aborts, dies or stays silent (a 30 s deadline), O resumes reading and
// accepting and carries on. If N received everything but cannot use it
// (its configuration wants another shape of vxlan0), N closes its switch
// and every descriptor it got and sends "release": O stops as on SIGTERM
// (saving its table), N waits for O's end of the connection to close and
// Run returns ErrHandoffFallback, on which gvs-switchd's main starts a new
// Daemon afresh (adopt-on-start). Two daemons never read the same
// descriptor: O is parked from before it sends the first descriptor until
// it has closed them all, or resumes only after N is gone or has closed
// its copies. A SIGTERM to O during a handoff waits for it to end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/internal/handoff"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/vxlan"
)

// Handoff timing limits.
const (
	handoffDial     = time.Second      // N connecting to O
	handoffPauseCNI = 10 * time.Second // O waiting for CNI requests in progress
	handoffPauseSw  = 2 * time.Second  // O parking its readers
	handoffReady    = 30 * time.Second // O waiting for N to be ready
	handoffBye      = 3 * time.Second  // N waiting for O to let go
	handoffRemotes  = 10 * time.Second // N waiting for the control plane's first lists
)

// handoffPath is the handoff socket ("" when off).
func (d *liveUpgrade) handoffPath() string {
	switch d.cfg.HandoffSocket {
	case "off":
		return ""
	case "":
		return handoff.DefaultSocket
	}
	return d.cfg.HandoffSocket
}

// ErrHandoffFallback is returned by Run when it received a running
// daemon's descriptors but could not use them: it closed them and asked
// that daemon to stop (Release), which has stopped. Make a new Daemon and
// Run it: it starts afresh, adopting what the old one left.
var ErrHandoffFallback = errors.New("handoff failed; the old daemon stopped: start afresh")

// Superseded reports whether the daemon stopped for a successor: it
// handed everything over, or was asked to stop so that the successor
// starts afresh. The process should then exit, or with Config.AfterHandoff
// "wait" stay until SIGTERM.
func (d *Daemon) Superseded() bool { return d.up.handedOff.Load() || d.up.released.Load() }

// HandedOff reports whether the daemon handed everything to a successor
// (Run then returned nil): the process should exit, or wait for SIGTERM
// with Config.AfterHandoff "wait", touching nothing.
func (d *Daemon) HandedOff() bool { return d.up.handedOff.Load() }

// LingerAfterHandoff reports whether Config.AfterHandoff is "wait".
func (d *Daemon) LingerAfterHandoff() bool { return d.cfg.AfterHandoff == "wait" }

// waitHandoff waits for a handoff in progress to end, handed over or not
// (Run, when it is told to stop: a DaemonSet may stop the old pod while it
// hands over).
func (d *liveUpgrade) waitHandoff() {
	d.handingMu.Lock()
	defer d.handingMu.Unlock()
}

// waitRemotes waits, before N connects to a running daemon, until the
// control plane's first lists of remote nodes, project VNIDs and services
// have reached the rule program (source.RemoteWaiter). The API server's
// informers deliver them asynchronously, tens of milliseconds after
// startControlPlane under load; the descriptors and the connection table
// come over the handoff but the other nodes' tunnel rules do not, so a
// successor that forwarded before they were in dropped the cross-node
// traffic both ways (VXLAN from an unknown node, and to a subnet with no
// tunnel rule) until they came: 50–80 ms on the real-node lab
// (docs/operations.md). The running daemon forwards all the while, so
// waiting here costs nothing. Without a handoff socket (a fresh start)
// it does not wait. Past handoffRemotes it takes over all the same, as
// before, and says so.
func (d *Daemon) waitRemotes(ctx context.Context) {
	w, ok := d.cp.src.(source.RemoteWaiter)
	if path := d.up.handoffPath(); !ok || path == "" {
		return
	} else if _, err := os.Stat(path); err != nil {
		return
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, handoffRemotes)
	defer cancel()
	if !w.WaitForRemotes(wctx) {
		d.log.Warn("handoff: the control plane's remote nodes not listed; taking over without them",
			"waited", time.Since(start).Round(time.Millisecond), "remoteNodes", d.dp.peers.Len())
		return
	}
	d.log.Info("handoff: remote nodes listed; taking over", "remoteNodes", d.dp.peers.Len(),
		"took", time.Since(start).Round(time.Microsecond))
}

// inheritance is what N received from O, until used.
type inheritance struct {
	c     *handoff.Conn
	st    handoff.State
	fds   []int // by index; -1 once taken
	table []byte
	start time.Time
}

// take returns descriptor i, which the caller owns from then on (-1: no
// such descriptor, or taken).
func (in *inheritance) take(i int) int {
	if in == nil || i < 0 || i >= len(in.fds) {
		return -1
	}
	fd := in.fds[i]
	in.fds[i] = -1
	return fd
}

// closeRest closes the descriptors nobody took.
func (in *inheritance) closeRest() int {
	n := 0
	for i, fd := range in.fds {
		if fd >= 0 {
			unix.Close(fd)
			in.fds[i] = -1
			n++
		}
	}
	return n
}

// ErrHandoffRefused is returned by Run when a running daemon answered on
// the handoff socket but did not hand over (it refused, or the exchange
// broke): it may still hold the node's devices, and two daemons must never
// read the same ones, so this one does not start afresh beside it. The
// process should exit; started again (a DaemonSet's container restart), it
// tries again, and starts afresh only if nobody answers (the old daemon
// gone, its socket stale).
var ErrHandoffRefused = errors.New("handoff: the running daemon did not hand over; not starting beside it")

// takeOver connects to a running daemon and receives its descriptors and
// state (steps 1–2 above). Without a daemon to take over from (no socket,
// or nobody accepts on it) it returns nil and no inheritance: start
// afresh. If a daemon answers but the exchange fails, it returns
// ErrHandoffRefused (fail closed: that daemon may carry on). If what it
// received is for another node or subnet, it keeps the inheritance and
// returns the error: Run's fallback (releaseTakeOver) asks the running
// daemon to stop and starts afresh.
func (d *liveUpgrade) takeOver() error {
	path := d.handoffPath()
	if path == "" {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	start := time.Now()
	c, err := handoff.Dial(path, handoffDial)
	if err != nil {
		if errors.Is(err, handoff.ErrNotRoot) {
			return fmt.Errorf("%w: %w", ErrHandoffRefused, err)
		}
		d.log.Info("handoff: no running daemon answers; starting afresh", "socket", path, "err", err)
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(handoffReady))
	if err := c.SendJSON(handoff.TypeHello, handoff.Hello{Version: handoff.Version, PID: os.Getpid()}); err != nil {
		c.Close()
		return fmt.Errorf("%w: hello: %w", ErrHandoffRefused, err)
	}
	st, fds, table, err := c.RecvState()
	if err != nil {
		c.Close()
		return fmt.Errorf("%w: %w", ErrHandoffRefused, err)
	}
	n := d.prog.Node()
	if st.NodeName != n.NodeName || st.Subnet != n.Subnet.String() {
		d.inherit = &inheritance{c: c, st: st, fds: fds, start: start}
		return fmt.Errorf("the running daemon is node %s with subnet %s, this one %s with %s", st.NodeName, st.Subnet, n.NodeName, n.Subnet)
	}
	d.inherit = &inheritance{c: c, st: st, fds: fds, table: table, start: start}
	d.tookOver = true
	// The ports come one by one (vxlan0, tun0, then each pod): their
	// workers wait until all are there and every rule is in, so that a
	// frame for a pod is not read before the pod's port exists (it would
	// be dropped). finishTakeOver resumes.
	_ = d.sw.Pause(0)
	d.log.Info("handoff: taking over", "from", st.PID, "descriptors", len(fds), "pods", len(st.Pods),
		"conntrackBytes", len(table), "took", time.Since(start).Round(time.Microsecond))
	if len(table) > 0 {
		res, err := d.sw.Conntrack().Load(bytes.NewReader(table))
		if err != nil {
			d.log.Warn("handoff: connection table refused; starting with what is loaded", "err", err)
		} else {
			d.log.Info("conntrack: connections taken over from the running daemon", "loaded", res.Loaded, "skipped", res.Skipped)
		}
	}
	return nil
}

// releaseTakeOver is the fallback when N fails after receiving O's state
// (Run's error err): N closes its switch (ports on inherited descriptors
// included) and what it did not use, asks O to stop (Release) and waits
// until O has exited, so that a new Daemon can start afresh.
func (d *liveUpgrade) releaseTakeOver(in *inheritance, err error) error {
	d.inherit = nil
	d.noSave = true // O saves its table; this daemon has nothing of its own
	if d.pods != nil {
		d.pods.Exiting()
		d.pods.DropInherited()
	}
	d.sw.Close()
	in.closeRest()
	d.log.Warn("handoff: cannot take over; asking the running daemon to stop, then starting afresh", "err", err)
	if serr := in.c.Send(handoff.TypeRelease, []byte(err.Error()), nil); serr != nil {
		in.c.Close()
		return fmt.Errorf("%w (release: %w)", err, serr)
	}
	_ = in.c.SetDeadline(time.Now().Add(handoffReady))
	for {
		if _, _, _, rerr := in.c.Recv(); rerr != nil {
			break // closed: the old daemon has exited (or the deadline)
		}
	}
	in.c.Close()
	return fmt.Errorf("%w: %w", ErrHandoffFallback, err)
}

// closeRelease closes the connection of a successor that asked this
// daemon to stop, once it has stopped (the successor waits for it).
func (d *liveUpgrade) closeRelease() {
	if d.releaseConn != nil {
		d.releaseConn.Close()
	}
}

// inheritedVXLAN returns vxlan0's sockets if inherited (nil otherwise).
func (d *liveUpgrade) inheritedVXLAN() *vxlan.Sockets {
	in := d.inherit
	if in == nil {
		return nil
	}
	s := &vxlan.Sockets{Steered: in.st.VXLANSteered}
	for _, i := range in.st.VXLANRx {
		s.Rx = append(s.Rx, os.NewFile(uintptr(in.take(i)), "vxlan-rx"))
	}
	for _, i := range in.st.VXLANTx {
		s.Tx = append(s.Tx, os.NewFile(uintptr(in.take(i)), "vxlan-tx"))
	}
	return s
}

// inheritedTun0 returns tun0's first queue if inherited (nil otherwise).
func (d *liveUpgrade) inheritedTun0() (*tap.Device, error) {
	in := d.inherit
	if in == nil {
		return nil, nil
	}
	return tap.FromFd(in.take(in.st.Tun0[0]), tap.Config{Logger: d.log})
}

// inheritPods gives the pod manager the pods' TAP queues.
func (d *liveUpgrade) inheritPods() error {
	in := d.inherit
	if in == nil {
		return nil
	}
	for _, p := range in.st.Pods {
		var qs []*tap.Device
		for _, i := range p.Queues {
			q, err := tap.FromFd(in.take(i), tap.Config{Offloads: d.podOffloads(), Logger: d.log})
			if err != nil {
				for _, q := range qs {
					q.Close()
				}
				return fmt.Errorf("pod %s: %w", p.ContainerID, err)
			}
			qs = append(qs, q)
		}
		d.pods.Inherit(p.ContainerID, p.IfName, qs)
	}
	return nil
}

// inheritedListener returns the listening socket of descriptor i, if
// inherited.
func (d *liveUpgrade) inheritedListener(i int) (*net.UnixListener, error) {
	fd := d.inherit.take(i)
	if fd < 0 {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	l, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("inherited listener is a %T", l)
	}
	return ul, nil
}

// finishTakeOver tells O that N forwards (step 3) and waits for it to let
// go (step 4).
func (d *liveUpgrade) finishTakeOver() error {
	in := d.inherit
	if in == nil {
		return nil
	}
	d.inherit = nil
	if n := in.closeRest(); n > 0 {
		d.log.Info("handoff: descriptors not used", "count", n)
	}
	if n := d.pods.DropInherited(); n > 0 {
		d.log.Info("handoff: pods handed over without a lease here; their TAPs stay", "count", n)
	}
	defer in.c.Close()
	d.sw.Resume() // every port and rule is in: forward
	d.log.Info("handoff: forwarding", "remoteNodes", d.peers.Len(), "pods", len(in.st.Pods),
		"sinceConnect", time.Since(in.start).Round(time.Microsecond))
	if err := in.c.Send(handoff.TypeReady, nil, nil); err != nil {
		return fmt.Errorf("handoff: ready: %w", err)
	}
	_ = in.c.SetDeadline(time.Now().Add(handoffBye))
	if _, _, err := in.c.Expect(handoff.TypeBye); err != nil {
		d.log.Warn("handoff: no bye from the old daemon", "err", err)
	}
	d.log.Info("handoff: took over", "from", in.st.PID, "took", time.Since(in.start).Round(time.Microsecond))
	return nil
}

// pausableListener is a listening unix socket whose accepting can be
// paused, and which can be handed to a successor (step 2).
type pausableListener struct {
	ul      *net.UnixListener
	guarded net.Listener // ul behind the peer check (accept.Guard)

	mu       sync.Mutex
	paused   chan struct{} // non-nil while paused; closed by resume
	gone     bool          // handed over: Accept fails
	inAccept int           // Accepts in the underlying listener
	active   int           // connections accepted and not yet closed
}

func (l *pausableListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.gone {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		if p := l.paused; p != nil {
			l.mu.Unlock()
			<-p
			continue
		}
		l.inAccept++
		l.mu.Unlock()
		c, err := l.guarded.Accept()
		l.mu.Lock()
		l.inAccept--
		if err != nil {
			again := (l.paused != nil || l.gone) && errors.Is(err, os.ErrDeadlineExceeded)
			l.mu.Unlock()
			if again {
				continue
			}
			return nil, err
		}
		l.active++
		l.mu.Unlock()
		return &countedConn{Conn: c, l: l}, nil
	}
}

func (l *pausableListener) Close() error   { return l.ul.Close() }
func (l *pausableListener) Addr() net.Addr { return l.ul.Addr() }

// pause stops accepting and waits until no request is in progress.
func (l *pausableListener) pause(timeout time.Duration) error {
	l.mu.Lock()
	if l.paused == nil {
		l.paused = make(chan struct{})
	}
	l.mu.Unlock()
	_ = l.ul.SetDeadline(time.Unix(1, 0)) // a blocked Accept returns
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		idle := l.inAccept == 0 && l.active == 0
		active := l.active
		l.mu.Unlock()
		if idle {
			return nil
		}
		if time.Now().After(deadline) {
			l.resume()
			return fmt.Errorf("%d requests still in progress after %v", active, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume accepts again.
func (l *pausableListener) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.ul.SetDeadline(time.Time{})
	if l.paused != nil {
		close(l.paused)
		l.paused = nil
	}
}

// handOver closes this process's descriptor of the socket without removing
// its path: the successor accepts on the same socket.
func (l *pausableListener) handOver() {
	l.mu.Lock()
	l.gone = true
	p := l.paused
	l.paused = nil
	l.mu.Unlock()
	if p != nil {
		close(p)
	}
	l.ul.SetUnlinkOnClose(false)
	l.ul.Close()
}

// fd is the socket's descriptor (the listener's; valid until it closes).
func (l *pausableListener) fd() int {
	rc, err := l.ul.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	_ = rc.Control(func(u uintptr) { fd = int(u) })
	return fd
}

type countedConn struct {
	net.Conn
	l    *pausableListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.active--
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveHandoff listens for a successor until ctx ends or a handoff
// succeeds; then it calls exit.
func (d *liveUpgrade) serveHandoff(ctx context.Context, exit func()) {
	path := d.handoffPath()
	if path == "" {
		return
	}
	l, err := handoff.Listen(path)
	if err != nil {
		d.log.Warn("handoff: not listening for a successor; an upgrade will restart", "err", err)
		return
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := handoff.Accept(l)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			d.log.Warn("handoff: connection refused", "err", err)
			continue
		}
		d.handingMu.Lock()
		ok := d.handOver(c)
		if ok && !d.released.Load() {
			l.Close() // removes the socket: the successor listens there next
			_ = c.Send(handoff.TypeBye, nil, nil)
		}
		d.handingMu.Unlock()
		if ok && d.released.Load() {
			// The successor waits for this connection to close, which
			// it does when the process exits, its devices closed.
			d.releaseConn = c
			exit()
			return
		}
		c.Close()
		if ok {
			exit()
			return
		}
	}
}

// handOver hands everything to the successor on c (steps 2 and 4) and
// reports whether it did; if not, the daemon carries on.
func (d *liveUpgrade) handOver(c *handoff.Conn) bool {
	_ = c.SetDeadline(time.Now().Add(handoffDial))
	body, _, err := c.Expect(handoff.TypeHello)
	if err != nil {
		d.log.Warn("handoff: no hello", "err", err)
		return false
	}
	var h handoff.Hello
	if err := json.Unmarshal(body, &h); err != nil || h.Version != handoff.Version {
		d.log.Warn("handoff: bad hello", "hello", string(body), "err", err)
		_ = c.Send(handoff.TypeAbort, []byte("bad hello"), nil)
		return false
	}
	abort := func(err error) bool {
		d.log.Warn("handoff: not handing over; carrying on", "to", h.PID, "err", err)
		_ = c.Send(handoff.TypeAbort, []byte(err.Error()), nil)
		return false
	}
	if len(d.cfg.Pods) > 0 {
		return abort(errors.New("static pods (configuration key pods) are re-created on start, not handed over: stop this daemon first"))
	}
	if d.vx == nil || d.tun0 == nil {
		return abort(errors.New("not set up yet"))
	}
	d.log.Info("handoff: successor connected; pausing", "pid", h.PID)
	start := time.Now()
	var paused []*pausableListener
	resume := func() {
		d.sw.Resume()
		for _, l := range paused {
			l.resume()
		}
	}
	for _, l := range []*pausableListener{d.listeners.cni, d.listeners.control} {
		if l == nil {
			continue
		}
		if err := l.pause(handoffPauseCNI); err != nil {
			resume()
			return abort(err)
		}
		paused = append(paused, l)
	}
	if err := d.sw.Pause(handoffPauseSw); err != nil {
		resume()
		return abort(err)
	}
	st, fds := d.handoffState()
	var table bytes.Buffer
	if _, err := d.sw.Conntrack().Save(&table); err != nil {
		resume()
		return abort(fmt.Errorf("conntrack: %w", err))
	}
	_ = c.SetDeadline(time.Now().Add(handoffReady))
	if err := c.SendState(st, fds, table.Bytes()); err != nil {
		resume()
		d.log.Warn("handoff: sending failed; resuming", "err", err)
		return false
	}
	t, body, fds, err := c.Recv()
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err == nil && t == handoff.TypeRelease {
		// The successor cannot use what it got and closed it all: stop
		// as on SIGTERM, so that it starts afresh (the fallback).
		resume()
		d.released.Store(true)
		d.log.Warn("handoff: the successor could not take over and asks this daemon to stop; stopping",
			"pid", h.PID, "reason", string(body))
		return true
	}
	if err == nil && t != handoff.TypeReady {
		err = fmt.Errorf("got %s: %s", t, body)
	}
	if err != nil {
		resume()
		d.log.Warn("handoff: the successor did not take over; resuming", "pid", h.PID, "err", err,
			"paused", time.Since(start).Round(time.Microsecond))
		return false
	}
	// Let go: from here on this daemon only exits.
	d.handedOff.Store(true)
	d.pods.Exiting()
	for _, l := range paused {
		l.handOver()
	}
	d.log.Info("handoff: handed over; exiting", "to", h.PID, "pods", len(st.Pods),
		"paused", time.Since(start).Round(time.Microsecond))
	return true
}

// handoffState lists the descriptors to hand over.
func (d *liveUpgrade) handoffState() (handoff.State, []int) {
	n := d.prog.Node()
	st := handoff.State{PID: os.Getpid(), NodeName: n.NodeName, Subnet: n.Subnet.String(),
		CNIListener: -1, ControlListener: -1}
	var fds []int
	add := func(fd int) int { fds = append(fds, fd); return len(fds) - 1 }
	rx, tx, steered := d.vx.Fds()
	for _, fd := range rx {
		st.VXLANRx = append(st.VXLANRx, add(fd))
	}
	for _, fd := range tx {
		st.VXLANTx = append(st.VXLANTx, add(fd))
	}
	st.VXLANSteered = steered
	st.Tun0 = []int{add(d.tun0.Fd())}
	if l := d.listeners.cni; l != nil {
		st.CNIListener = add(l.fd())
	}
	if l := d.listeners.control; l != nil {
		st.ControlListener = add(l.fd())
	}
	for _, p := range d.pods.HandoffPods() {
		hp := handoff.Pod{ContainerID: p.ContainerID, IfName: p.IfName, Netns: p.Netns, Port: p.Port}
		for _, fd := range p.Fds {
			hp.Queues = append(hp.Queues, add(fd))
		}
		st.Pods = append(st.Pods, hp)
	}
	return st, fds
}
