package vswitch_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/gvswitch/gvs/conntrack"
	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/packet"
	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	vswitch "github.com/gvswitch/gvs/vswitch"
)

// memPort is a whole switch port in a few lines: frames sent on in are
// read by the switch, frames the switch writes arrive on out. A real port
// reads its frames straight into bufs[i][offset:] (a TAP's read lands
// there, with its own header in the headroom in front); this one copies.
type memPort struct {
	name    string
	in, out chan []byte
	done    chan struct{}
}

func newMemPort(name string) *memPort {
	return &memPort{name: name, in: make(chan []byte, 1), out: make(chan []byte, 1), done: make(chan struct{})}
}

func (p *memPort) Name() string    { return p.name }
func (p *memPort) Caps() port.Caps { return port.Caps{} } // complete frames, no tunnel
func (p *memPort) BatchSize() int  { return 1 }
func (p *memPort) Close() error    { close(p.done); return nil }

// Read blocks until it has a frame, as the switch's worker expects.
func (p *memPort) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	select {
	case f := <-p.in:
		meta[0] = port.Meta{Size: copy(bufs[0][offset:], f)}
		return 1, nil
	case <-p.done:
		return 0, errors.New("closed")
	}
}

// Write gets frame i at bufs[i][offset:offset+meta[i].Size]; the buffers
// are the switch's again once Write returns, so it keeps copies.
func (p *memPort) Write(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	for i, b := range bufs {
		p.out <- bytes.Clone(b[offset : offset+meta[i].Size])
	}
	return len(bufs), nil
}

// ipv4Frame is an Ethernet + IPv4 header from src to dst (no payload).
func ipv4Frame(src, dst [4]byte) []byte {
	f := make([]byte, 14+20)
	f[12], f[13] = 0x08, 0x00 // EtherType IPv4
	f[14] = 0x45              // version 4, 20-byte header
	f[17] = 20                // total length
	copy(f[26:30], src[:])
	copy(f[30:34], dst[:])
	return f
}

// A switch with two ports of your own and a rule set: IPv4 from port 1 to
// 10.0.0.2 goes out of port 2, everything else is dropped. One frame is
// dropped and counted, the other forwarded (docs/embedding.md).
func Example() {
	table := flowtable.New(flowtable.Config{})
	rules, err := flowtable.ParseRules(`
table=0, priority=10, in_port=1, ip, nw_dst=10.0.0.2, actions=output:2
table=0, priority=0, actions=drop
`)
	if err != nil {
		log.Fatal(err)
	}
	if err := table.Add(rules...); err != nil {
		log.Fatal(err)
	}
	sw, err := vswitch.New(vswitch.Config{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close()
	a, b := newMemPort("a"), newMemPort("b")
	if err := sw.AddPort(1, a); err != nil {
		log.Fatal(err)
	}
	if err := sw.AddPort(2, b); err != nil {
		log.Fatal(err)
	}

	a.in <- ipv4Frame([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 3}) // no rule for it: dropped
	a.in <- ipv4Frame([4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2})
	out := <-b.out
	fmt.Printf("port b got %d bytes for %d.%d.%d.%d\n", len(out), out[30], out[31], out[32], out[33])
	fmt.Println("dropped by the rules:", sw.Stats().Drops[vswitch.DropAction])
	// Output:
	// port b got 34 bytes for 10.0.0.2
	// dropped by the rules: 1
}

// udpFrame is an Ethernet + IPv4 + UDP frame from src to dst with correct
// checksums, which a connection tracker checks.
func udpFrame(src, dst [4]byte, sport, dport uint16) []byte {
	f := ipv4Frame(src, dst)
	f = append(f, make([]byte, 8)...)
	f[17], f[23] = 28, 17 // total length, protocol UDP
	binary.BigEndian.PutUint16(f[24:], ^packet.Checksum(f[14:34], 0))
	binary.BigEndian.PutUint16(f[34:], sport)
	binary.BigEndian.PutUint16(f[36:], dport)
	binary.BigEndian.PutUint16(f[38:], 8)
	binary.BigEndian.PutUint16(f[40:], ^packet.Checksum(f[34:], packet.PseudoHeaderSum(src[:], dst[:], 17, 8)))
	return f
}

// A stateful firewall: with a connection tracker (Config.Conntrack) the
// rules may use ct actions. Port 1 may open connections to port 2; port
// 2's own attempts are dropped, the replies to port 1's pass. The switch
// sweeps the tracker every second (SweepInterval).
func Example_conntrack() {
	table := flowtable.New(flowtable.Config{})
	rules, err := flowtable.ParseRules(`
table=0, priority=100, ip, ct_state=-trk, actions=ct(table=1)
table=1, priority=100, in_port=1, ip, ct_state=+trk+new, actions=ct(commit),output:2
table=1, priority=100, in_port=1, ip, ct_state=+trk+est, actions=output:2
table=1, priority=100, in_port=2, ip, ct_state=+trk+est, actions=output:1
table=1, priority=0, actions=drop
`)
	if err != nil {
		log.Fatal(err)
	}
	if err := table.Add(rules...); err != nil {
		log.Fatal(err)
	}
	tracker, err := conntrack.New(conntrack.Config{})
	if err != nil {
		log.Fatal(err)
	}
	sw, err := vswitch.New(vswitch.Config{Table: table, Conntrack: tracker, SweepInterval: time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close()
	a, b := newMemPort("a"), newMemPort("b")
	if err := sw.AddPort(1, a); err != nil {
		log.Fatal(err)
	}
	if err := sw.AddPort(2, b); err != nil {
		log.Fatal(err)
	}
	pa, pb := [4]byte{10, 0, 0, 1}, [4]byte{10, 0, 0, 2}
	b.in <- udpFrame(pb, pa, 53, 4000) // b starts: dropped
	for sw.Stats().TableDrops[1] == 0 {
		runtime.Gosched() // until b's worker has dropped it: the drop counter says it has
	}
	a.in <- udpFrame(pa, pb, 4000, 53) // a starts: committed, passes
	<-b.out
	b.in <- udpFrame(pb, pa, 53, 4000) // now a reply: passes
	<-a.out
	for e := range tracker.All(tracker.Now()) {
		fmt.Println(e.String())
	}
	fmt.Println("dropped in table 1:", sw.Stats().TableDrops[1])
	// Output:
	// udp,orig=(src=10.0.0.1,dst=10.0.0.2,sport=4000,dport=53),reply=(src=10.0.0.2,dst=10.0.0.1,sport=53,dport=4000)
	// dropped in table 1: 1
}

// A pod port with two queues: a multi-queue TAP opened twice, each queue
// read by a worker of its own. The pod's kernel spreads its flows over the
// queues; the switch writes each flow back on the queue its hash picks.
// (Creating a TAP needs CAP_NET_ADMIN; the example is not run by go test.)
func ExampleSwitch_AddPortQueues() {
	sw, err := vswitch.New(vswitch.Config{Table: flowtable.New(flowtable.Config{})})
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Close()
	cfg := tap.Config{Name: "gvs-mq0", MultiQueue: true}
	q0, err := tap.Create(cfg)
	if err != nil {
		log.Fatal(err)
	}
	q1, err := tap.Open(cfg) // the second queue of the same device
	if err != nil {
		q0.Close()
		log.Fatal(err)
	}
	// The switch owns both queues from now on and closes them with the port.
	if err := sw.AddPortQueues(3, []vswitch.Port{q0, q1}); err != nil {
		log.Fatal(err)
	}
}
