package vswitch_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/gvswitch/gvs/flowtable"
	vswitch "github.com/gvswitch/gvs/switch"
	"github.com/gvswitch/gvs/tap"
)

// chanPort is a minimal Port for the example: frames sent on in are read by
// the switch, frames the switch writes arrive on out.
type chanPort struct {
	name    string
	in, out chan []byte
	done    chan struct{}
}

func newChanPort(name string) *chanPort {
	return &chanPort{name: name, in: make(chan []byte, 1), out: make(chan []byte, 1), done: make(chan struct{})}
}

func (p *chanPort) Name() string   { return p.name }
func (p *chanPort) BatchSize() int { return 1 }
func (p *chanPort) Close() error   { close(p.done); return nil }

func (p *chanPort) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	select {
	case f := <-p.in:
		sizes[0] = copy(bufs[0][offset:], f)
		return 1, nil
	case <-p.done:
		return 0, errors.New("closed")
	}
}

func (p *chanPort) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		p.out <- append([]byte(nil), b[offset:]...)
	}
	return len(bufs), nil
}

// A switch with two ports and one rule: IPv4 from port 1 goes out of port 2.
func Example() {
	table := flowtable.New(flowtable.Config{})
	rules, err := flowtable.ParseRules("table=0, priority=10, in_port=1, ip, actions=output:2")
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
	a, b := newChanPort("a"), newChanPort("b")
	if err := sw.AddPort(1, a); err != nil {
		log.Fatal(err)
	}
	if err := sw.AddPort(2, b); err != nil {
		log.Fatal(err)
	}

	// A minimal Ethernet + IPv4 header (addresses zero).
	frame := make([]byte, 14+20)
	frame[12], frame[13] = 0x08, 0x00 // EtherType IPv4
	frame[14] = 0x45                  // version 4, 20-byte header
	frame[17] = 20                    // total length
	a.in <- frame

	out := <-b.out
	fmt.Printf("port b got %d bytes\n", len(out))
	pk, _ := table.Rules()[0].Stats()
	fmt.Println("rule hits:", pk)
	// Output:
	// port b got 34 bytes
	// rule hits: 1
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
