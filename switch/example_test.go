package vswitch_test

import (
	"bytes"
	"errors"
	"fmt"
	"log"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/port"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
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
