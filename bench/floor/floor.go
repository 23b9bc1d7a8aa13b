// Package floor is the floor dataplane of gvs-bench compare (docs/targets.md): the
// least work any TAP-and-VXLAN userspace dataplane can do, measured beside
// gvs so that gvs's targets are ratios to it. It is a measuring instrument,
// not a product.
//
// It attaches a node's pods exactly as gvs-switchd does — the same TAP
// flags, offloads (TSO, USO), queues, MTU, MAC 0a:58:<IP>, routes and
// gso_max_segs cap — and moves frames with gvs's own I/O: the TAP queues
// through io_uring where gvs-switchd uses it (package tap/uring, else
// tap.Device), vxlan0 through package vxlan (recvmmsg/sendmmsg, UDP GSO and
// GRO, super-frames cut and merged, flow queues), the same busy polling,
// scheduler time slice and Go processors, and the switch's idle trimming
// (a reader idle for 10 s is woken and its uring.Port gives up its rings
// and thread). What it leaves out is the switch:
// no flow table, no connection tracking, no rule program. A frame goes
//
//  1. from a pod's TAP queue (serve) to the port its inner destination IPv4
//     address picks in a static map: a local pod's TAP, or vxlan0 toward the
//     node whose subnet holds the address (VNI 0); anything else is
//     dropped, except ARP requests, which it answers itself with the
//     asked-for pod's MAC (0a:58:<IP>, as every pod's is);
//  2. from vxlan0 to the local pod its inner destination address picks;
//  3. out in one Write per destination port and batch, the destination
//     with the fewest bytes first (as gvs's switch orders them).
//
// gvs-bench floor runs it inside a node's network namespace
// (cmd/gvs-bench/floor.go); bench/cluster starts it there for the
// dataplane "floor".
package floor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gvswitch/gvs/internal/sched"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/port/busypoll"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
	"github.com/gvswitch/gvs/vxlan"
	"github.com/vishvananda/netlink"
)

// headroom is the room in front of each frame, as the switch leaves it
// (vswitch.Headroom): the virtio_net_hdr or the VXLAN header goes there.
const headroom = 64

// Config is one node of the floor dataplane, written as JSON by
// bench/cluster. Queues, VXLANReaders, FlowQueues, IOEngine, BusyPoll and
// SchedSlice mean what gvs-switchd's settings of the same names mean, with
// the same defaults.
type Config struct {
	NodeIP         netip.Addr   `json:"nodeIP"`
	Subnet         netip.Prefix `json:"subnet"`
	ClusterNetwork netip.Prefix `json:"clusterNetwork"`
	ServiceNetwork netip.Prefix `json:"serviceNetwork"`
	MTU            int          `json:"mtu"` // 0: 1450
	Peers          []Peer       `json:"peers"`
	Pods           []Pod        `json:"pods"`
	Queues         int          `json:"queues,omitempty"`
	VXLANReaders   int          `json:"vxlanReaders,omitempty"`
	FlowQueues     int          `json:"vxlanFlowQueues,omitempty"`
	IOEngine       string       `json:"ioEngine,omitempty"`   // "", auto, uring, uring-always or tap
	BusyPoll       string       `json:"busyPoll,omitempty"`   // "": 50us on more than one CPU
	SchedSlice     string       `json:"schedSlice,omitempty"` // "": 100us while the CPUs are busy
}

// Peer is another node: its underlay address and pod subnet.
type Peer struct {
	IP     netip.Addr   `json:"ip"`
	Subnet netip.Prefix `json:"subnet"`
}

// Pod is a local pod: its network namespace (a path) and address.
type Pod struct {
	Netns string     `json:"netns"`
	IP    netip.Addr `json:"ip"`
}

// queue is a port queue as the floor drives it (tap.Device, uring.Port,
// vxlan.Queue).
type queue interface {
	Read(bufs [][]byte, meta []port.Meta, offset int) (int, error)
	Write(bufs [][]byte, meta []port.Meta, offset int) (int, error)
	BatchSize() int
}

// Floor is a running floor node.
type Floor struct {
	local   map[[4]byte][]queue // pod address → its TAP queues
	peers   []subnet
	vx      *vxlan.Port
	log     *slog.Logger
	closers []func() error
	// clock is the trimmer's coarse time (Unix ns); readers stamp their
	// batches with it (trim).
	clock   atomic.Int64
	readers []*reader
}

// reader is one queue's reading loop, as the trimmer sees it.
type reader struct {
	q    queue
	last atomic.Int64 // clock at its last batch
}

// subnet is a peer's pod subnet as a mask and base, and its address.
type subnet struct {
	base, mask uint32
	node       [4]byte
}

// Start attaches cfg's pods and opens vxlan0 in the calling thread's
// network namespace, and forwards until ctx ends; Close then releases
// everything (closing a TAP deletes it).
func Start(ctx context.Context, cfg Config, log *slog.Logger) (_ *Floor, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Floor{local: map[[4]byte][]queue{}, log: log}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	mtu := orDefault(cfg.MTU, 1450)
	queues := max(cfg.Queues, 1)
	busy, err := busyPoller(cfg.BusyPoll)
	if err != nil {
		return nil, err
	}
	engine, err := ioEngine(cfg.IOEngine)
	if err != nil {
		return nil, err
	}
	if err := schedSlice(ctx, cfg.SchedSlice, log); err != nil {
		return nil, err
	}
	var peerIPs []netip.Addr
	for _, p := range cfg.Peers {
		peerIPs = append(peerIPs, p.IP)
		s := p.Subnet.Masked().Addr().As4()
		f.peers = append(f.peers, subnet{base: binary.BigEndian.Uint32(s[:]), mask: ^uint32(0) << (32 - p.Subnet.Bits()), node: p.IP.As4()})
	}
	peers, err := vxlan.NewPeers(peerIPs...)
	if err != nil {
		return nil, err
	}
	f.vx, err = vxlan.Listen(vxlan.Config{Local: cfg.NodeIP, Peers: peers, Offload: true,
		Readers: orDefault(cfg.VXLANReaders, queues), FlowQueues: cfg.FlowQueues, BusyPoll: busy, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("vxlan0: %w", err)
	}
	f.closers = append(f.closers, f.vx.Close)
	gw := cfg.Subnet.Masked().Addr().Next()
	routes := []netconf.Route{{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw}, {Dst: cfg.ClusterNetwork}}
	if cfg.ServiceNetwork.IsValid() {
		routes = append(routes, netconf.Route{Dst: cfg.ServiceNetwork, Gw: gw})
	}
	for i, p := range cfg.Pods {
		qs, uso, err := f.attach(p, fmt.Sprintf("gvs%d", 3+i), queues, mtu, cfg.Subnet.Bits(), routes, engine, busy)
		if err != nil {
			return nil, fmt.Errorf("pod %v: %w", p.IP, err)
		}
		f.local[p.IP.As4()] = qs
		if uso { // as gvs-switchd: UDP super-frames toward pods once a TAP takes them
			f.vx.SetCoalesceUDP(true)
		}
	}
	f.clock.Store(time.Now().UnixNano())
	for _, qs := range f.local {
		for _, q := range qs {
			go f.serve(ctx, f.newReader(q), false)
		}
	}
	for _, q := range f.vx.Queues() {
		go f.serve(ctx, f.newReader(q), true)
	}
	go f.trim(ctx)
	return f, nil
}

// attach creates pod p's TAP (queues queues) in its namespace, configures
// it as gvs-switchd's pod manager does (internal/daemon/pods) and returns
// its queues as the floor drives them.
func (f *Floor) attach(p Pod, name string, queues, mtu, bits int, routes []netconf.Route, engine string, busy *busypoll.Poller) ([]queue, bool, error) {
	tc := tap.Config{Name: name, Offloads: tap.OffloadsTSO | tap.OffloadsUSO, MultiQueue: queues > 1, Logger: f.log}
	var devs []*tap.Device
	err := netconf.Do(p.Netns, func() error {
		for i := range queues {
			open := tap.Open
			if i == 0 {
				open = tap.Create
			}
			d, err := open(tc)
			if err != nil {
				return err
			}
			f.closers = append(f.closers, d.Close)
			devs = append(devs, d)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	mac := packet.PodMAC(p.IP.As4())
	if err := netconf.ConfigureLink(p.Netns, netconf.LinkConfig{Name: name, NewName: "eth0", MAC: net.HardwareAddr(mac[:]), MTU: mtu,
		Addrs: []netip.Prefix{netip.PrefixFrom(p.IP, bits)}, Routes: routes, Up: true}); err != nil {
		return nil, false, err
	}
	if err := netconf.Do(p.Netns, func() error { // pods.Manager.capGSO
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		return netlink.LinkSetGSOMaxSegs(l, vxlan.GSOSegments(mtu))
	}); err != nil {
		return nil, false, fmt.Errorf("gso_max_segs: %w", err)
	}
	var qs []queue
	for _, d := range devs {
		if engine == "tap" {
			qs = append(qs, d)
			continue
		}
		u, err := uring.NewPortConfig(d, uring.PortConfig{Always: engine == "uring-always", BusyPoll: busy})
		if err != nil {
			return nil, false, err
		}
		qs = append(qs, u)
	}
	return qs, devs[0].Offloads()&tap.OffloadsUSO == tap.OffloadsUSO, nil
}

// Close closes vxlan0 and the TAPs (which deletes them).
func (f *Floor) Close() error {
	var errs []error
	for _, c := range f.closers {
		errs = append(errs, c())
	}
	f.closers = nil
	return errors.Join(errs...)
}

// serve reads q until it fails and forwards each batch (steps 1-3 of the
// package comment). tunnel says q is vxlan0's.
func (f *Floor) serve(ctx context.Context, r *reader, tunnel bool) {
	n := max(r.q.BatchSize(), 1)
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, headroom+packet.MaxSuperFrame+1)
	}
	f.loop(ctx, r, tunnel, bufs, make([]port.Meta, n))
}

func (f *Floor) loop(ctx context.Context, r *reader, tunnel bool, bufs [][]byte, meta []port.Meta) {
	var b batch
	q := r.q
	for {
		k, err := q.Read(bufs, meta, headroom)
		if k > 0 {
			r.last.Store(f.clock.Load())
		}
		for i := range min(k, len(bufs)) {
			f.route(&b, q, bufs[i], meta[i], tunnel)
		}
		b.flush()
		switch {
		case errors.Is(err, port.ErrMoveReader):
			// The port let go of this goroutine's thread (uring): read on,
			// with the same buffers, from a new one.
			go f.loop(ctx, r, tunnel, bufs, meta)
			return
		case errors.Is(err, port.ErrWoken), err == nil:
		default:
			if ctx.Err() == nil {
				f.log.Error("floor: read failed; reader stops", "err", err)
			}
			return
		}
	}
}

func (f *Floor) newReader(q queue) *reader {
	r := &reader{q: q}
	r.last.Store(f.clock.Load())
	f.readers = append(f.readers, r)
	return r
}

// trimIdle is gvs-switchd's trimIdle default: how long a reader is idle
// before the switch wakes it to give up what it holds.
const trimIdle = 10 * time.Second

// trim does what gvs's switch does to idle readers (switch/trim.go): a
// queue that holds resources of its own while busy (a uring.Port's rings
// and the OS thread its reader is locked to) and has had no frame for
// trimIdle is woken, and gives them up until it is busy again.
func (f *Floor) trim(ctx context.Context) {
	tick := time.NewTicker(trimIdle / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-tick.C:
			now := t.UnixNano()
			f.clock.Store(now)
			for _, r := range f.readers {
				h, ok := r.q.(interface {
					Holds() bool
					Wake()
				})
				if ok && now-r.last.Load() >= int64(trimIdle) && h.Holds() {
					h.Wake()
				}
			}
		}
	}
}

// route queues one frame read from q for its destination.
func (f *Floor) route(b *batch, q queue, buf []byte, m port.Meta, tunnel bool) {
	fr := buf[headroom : headroom+m.Size]
	if len(fr) < packet.EthernetLen+20 {
		return
	}
	switch binary.BigEndian.Uint16(fr[12:14]) {
	case 0x0806:
		if !tunnel && arpReply(fr) {
			b.add(q, buf, port.Meta{Size: m.Size})
		}
		return
	case 0x0800:
	default:
		return
	}
	dst := [4]byte(fr[30:34])
	h := hash(fr)
	if qs := f.local[dst]; qs != nil {
		b.add(qs[h%uint32(len(qs))], buf, port.Meta{Size: m.Size, GSO: m.GSO})
		return
	}
	if tunnel {
		return
	}
	d := binary.BigEndian.Uint32(dst[:])
	for _, s := range f.peers {
		if d&s.mask == s.base {
			b.add(f.vx, buf, port.Meta{Size: m.Size, GSO: m.GSO, Hash: h, Tunnel: port.Endpoint{Addr: s.node}})
			return
		}
	}
}

// arpReply turns the ARP request in fr into the reply of the pod it asks
// for, in place, and reports whether it did.
func arpReply(fr []byte) bool {
	a := fr[packet.EthernetLen:]
	if len(a) < 28 || binary.BigEndian.Uint16(a[6:8]) != 1 || [4]byte(a[14:18]) == [4]byte(a[24:28]) {
		return false // not a request, or a gratuitous one
	}
	tpa := [4]byte(a[24:28])
	mac := packet.PodMAC(tpa)
	copy(fr[0:6], fr[6:12])
	copy(fr[6:12], mac[:])
	a[7] = 2
	copy(a[18:28], a[8:18]) // THA, TPA ← SHA, SPA
	copy(a[8:14], mac[:])
	copy(a[14:18], tpa[:])
	return true
}

// hash is a flow hash of an IPv4 frame, the same both ways: addresses,
// and ports for TCP and UDP (first fragments or unfragmented).
func hash(fr []byte) uint32 {
	ip := fr[packet.EthernetLen:]
	a, b := binary.BigEndian.Uint32(ip[12:16]), binary.BigEndian.Uint32(ip[16:20])
	var pa, pb, proto uint32
	if hl := int(ip[0]&0x0f) * 4; (ip[9] == 6 || ip[9] == 17) && len(ip) >= hl+4 {
		pa, pb, proto = uint32(binary.BigEndian.Uint16(ip[hl:])), uint32(binary.BigEndian.Uint16(ip[hl+2:])), uint32(ip[9])
	}
	if a > b || (a == b && pa > pb) {
		a, b, pa, pb = b, a, pb, pa
	}
	h := a*0x9e3779b1 ^ b*0x85ebca77 ^ (pa<<16|pb)*0xc2b2ae3d ^ proto
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// batch is the frames of one read, by destination queue.
type batch struct {
	out []pending
	n   int
}

type pending struct {
	q     queue
	bufs  [][]byte
	meta  []port.Meta
	bytes int
}

func (b *batch) add(q queue, buf []byte, m port.Meta) {
	var p *pending
	for i := range b.n {
		if b.out[i].q == q {
			p = &b.out[i]
		}
	}
	if p == nil {
		if b.n == len(b.out) {
			b.out = append(b.out, pending{})
		}
		p = &b.out[b.n]
		b.n++
		p.q = q
	}
	p.bufs = append(p.bufs, buf[:headroom+m.Size])
	p.meta = append(p.meta, m)
	p.bytes += m.Size
}

// flush writes each destination's frames, the fewest bytes first, and
// empties the batch.
func (b *batch) flush() {
	o := b.out[:b.n]
	for i := 1; i < len(o); i++ {
		for j := i; j > 0 && o[j].bytes < o[j-1].bytes; j-- {
			o[j], o[j-1] = o[j-1], o[j]
		}
	}
	for i := range o {
		_, _ = o[i].q.Write(o[i].bufs, o[i].meta, headroom)
		clear(o[i].bufs)
		o[i].bufs, o[i].meta, o[i].bytes, o[i].q = o[i].bufs[:0], o[i].meta[:0], 0, nil
	}
	b.n = 0
}

// busyPoller is gvs-switchd's busyPoll setting (internal/daemon/config.go).
func busyPoller(s string) (*busypoll.Poller, error) {
	var c busypoll.Config
	if s == "" && runtime.NumCPU() > 1 {
		c.Max = 50 * time.Microsecond
	} else if s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("busyPoll %q: %w", s, err)
		}
		c.Max = d
	}
	return busypoll.New(c)
}

// ioEngine is gvs-switchd's ioEngine setting resolved on this kernel.
func ioEngine(s string) (string, error) {
	switch s {
	case "", "auto":
		if uring.Supported() != nil {
			return "tap", nil
		}
		return "uring", nil
	case "uring", "uring-always", "tap":
		return s, nil
	}
	return "", fmt.Errorf("ioEngine %q: want auto, uring, uring-always or tap", s)
}

// schedSlice gives the process's threads gvs-switchd's scheduler time
// slice while the CPUs are busy ("": 100us, "0": the kernel's).
func schedSlice(ctx context.Context, s string, log *slog.Logger) error {
	d := sched.MinSlice
	if s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("schedSlice %q: %w", s, err)
		}
	}
	if d == 0 {
		return nil
	}
	if _, err := sched.Keep(ctx, sched.Config{Slice: d, Log: log}); err != nil {
		log.Info("floor: threads keep the kernel's time slice", "err", err)
	}
	return nil
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
