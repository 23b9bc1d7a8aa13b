package vswitch

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvswitch/gvs/flowtable"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/port"
)

// wakePort is a memPort whose Read can be woken (Waker).
type wakePort struct{ *memPort }

func (p wakePort) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// trimSwitch is a switch that trims after 40 ms, forwarding port 1 to 2.
func trimSwitch(t *testing.T) (*Switch, *flowtable.Table) {
	return trimSwitchConfig(t, Config{TrimIdle: 40 * time.Millisecond})
}

// trimSwitchConfig is trimSwitch with cfg (its Table set here).
func trimSwitchConfig(t *testing.T, cfg Config) (*Switch, *flowtable.Table) {
	t.Helper()
	tbl := flowtable.New(flowtable.Config{})
	rs, err := flowtable.ParseRules("table=0, priority=100, in_port=1, actions=output:2")
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Add(rs...); err != nil {
		t.Fatal(err)
	}
	cfg.Table = tbl
	sw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sw.Close() })
	return sw, tbl
}

// Config.TrimIdle: a worker idle for TrimIdle after a batch that dirtied its
// buffers is woken, releases them once, and forwards the next frames
// unharmed; a clean worker is left alone.
func TestTrimIdle(t *testing.T) {
	sw, tbl := trimSwitch(t)
	mp := newMemPort("in")
	mp.wake = make(chan struct{}, 1)
	in := wakePort{mp}
	out := newMemPort("out")
	// A batch of three, read at once: more than the first buffer.
	for i := range 3 {
		in.send(udpFrame(1, byte(10+i)))
	}
	if err := sw.AddPort(2, out); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(1, in); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the batch", func() (bool, error) { return len(out.written()) == 3, nil })
	testutil.WaitFor(t, 5*time.Second, "a release", func() (bool, error) { return sw.Stats().BufferReleases == 1, nil })

	frame := udpFrame(1, 99)
	in.send(frame)
	testutil.WaitFor(t, 5*time.Second, "a frame after the release", func() (bool, error) { return len(out.written()) == 4, nil })
	if got := out.written()[3]; !bytes.Equal(got, frame) {
		t.Fatalf("after the release the switch wrote %x, want %x", got, frame)
	}
	// One small frame leaves the buffers clean: no further release.
	time.Sleep(300 * time.Millisecond) // several TrimIdle periods in which nothing may happen
	if n := sw.Stats().BufferReleases; n != 1 {
		t.Errorf("%d releases after a clean batch, want 1", n)
	}
	if _, err := New(Config{Table: tbl, TrimIdle: -time.Second}); err == nil {
		t.Error("a negative TrimIdle was taken")
	}
}

// holdPort is a wakePort that holds resources of its own (Holder) until
// its reader is woken, and then asks for the reader to move to a new
// goroutine (port.ErrMoveReader), as tap/uring.Port does with its rings
// and locked thread. It records the goroutine of every Read.
type holdPort struct {
	wakePort
	held    atomic.Bool
	wakes   atomic.Int32
	mu      sync.Mutex
	readers []string
}

func (p *holdPort) Holds() bool { return p.held.Load() }

func (p *holdPort) Wake() {
	p.wakes.Add(1)
	p.wakePort.Wake()
}

func (p *holdPort) Read(bufs [][]byte, meta []port.Meta, offset int) (int, error) {
	p.mu.Lock()
	if g := goroutine(); len(p.readers) == 0 || p.readers[len(p.readers)-1] != g {
		p.readers = append(p.readers, g)
	}
	p.mu.Unlock()
	n, err := p.wakePort.Read(bufs, meta, offset)
	if errors.Is(err, port.ErrWoken) && p.held.Swap(false) {
		return 0, port.ErrMoveReader
	}
	return n, err
}

// goroutine returns the calling goroutine's "goroutine N" line head.
func goroutine() string {
	var b [64]byte
	s := string(b[:runtime.Stack(b[:], false)])
	head, _, _ := strings.Cut(s, " [")
	return head
}

// A clean worker whose queue holds resources (Holder) is woken when idle;
// when the queue answers port.ErrMoveReader the worker goes on from a new
// goroutine and the old one ends; frames still flow, and once the queue
// holds nothing the idle worker is left alone.
func TestTrimMovesReader(t *testing.T) {
	sw, _ := trimSwitch(t)
	mp := newMemPort("in")
	mp.wake = make(chan struct{}, 1)
	in := &holdPort{wakePort: wakePort{mp}}
	in.held.Store(true)
	out := newMemPort("out")
	if err := sw.AddPort(2, out); err != nil {
		t.Fatal(err)
	}
	if err := sw.AddPort(1, in); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the holding queue woken and its reader moved", func() (bool, error) {
		in.mu.Lock()
		defer in.mu.Unlock()
		return !in.held.Load() && len(in.readers) >= 2, nil
	})
	in.mu.Lock()
	first, second := in.readers[0], in.readers[1]
	in.mu.Unlock()
	if first == second {
		t.Fatalf("the reader did not move: %s", first)
	}
	testutil.WaitFor(t, 5*time.Second, "the first reader's goroutine to end", func() (bool, error) {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), first+" ["), nil
	})
	frame := udpFrame(1, 7)
	in.send(frame)
	testutil.WaitFor(t, 5*time.Second, "a frame read by the new reader", func() (bool, error) { return len(out.written()) == 1, nil })
	if got := out.written()[0]; !bytes.Equal(got, frame) {
		t.Fatalf("wrote %x, want %x", got, frame)
	}
	// Holding nothing, with clean buffers: no more wake-ups, no more moves.
	wakes := in.wakes.Load()
	time.Sleep(300 * time.Millisecond) // several TrimIdle periods in which nothing may happen
	if w := in.wakes.Load(); w != wakes {
		t.Errorf("%d wake-ups of a queue that holds nothing", w-wakes)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.readers) != 2 {
		t.Errorf("%d readers, want 2", len(in.readers))
	}
}

// Config.Budget: while the ports' budget refuses buffers, an idle worker
// is woken to release its buffers after a quarter of TrimIdle, not all of
// it; without refusals it waits the whole TrimIdle.
func TestTrimSoonerUnderPressure(t *testing.T) {
	budget, err := port.NewBudget(1)
	if err != nil {
		t.Fatal(err)
	}
	const idle = 4 * time.Second
	sw, _ := trimSwitchConfig(t, Config{TrimIdle: idle, Budget: budget})
	mp := newMemPort("in")
	mp.wake = make(chan struct{}, 1)
	out := newMemPort("out")
	for i := range 3 {
		mp.send(udpFrame(1, byte(10+i)))
	}
	if err := sw.AddPort(2, out); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sw.AddPort(1, wakePort{mp}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "the batch", func() (bool, error) { return len(out.written()) == 3, nil })
	time.Sleep(idle * 3 / 8) // part of TrimIdle, which no release may come before
	if n := sw.Stats().BufferReleases; n != 0 {
		t.Fatalf("released %d times after %v without pressure, before TrimIdle", n, time.Since(start))
	}
	if budget.Take(2) {
		t.Fatal("a budget of 1 byte gave 2")
	}
	testutil.WaitFor(t, 5*time.Second, "a release under pressure", func() (bool, error) { return sw.Stats().BufferReleases == 1, nil })
	if d := time.Since(start); d >= idle*7/8 {
		t.Errorf("released after %v under pressure, TrimIdle is %v", d, idle)
	}
}
