package busypoll

import (
	"sync"
	"testing"
	"time"
)

func mustNew(t *testing.T, cfg Config) *Poller {
	t.Helper()
	p, err := New(cfg)
	if err != nil || p == nil {
		t.Fatalf("New(%+v): %v, %v", cfg, p, err)
	}
	return p
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{Max: -1}, {Max: MaxWindow + 1}, {Max: time.Microsecond, Pollers: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	p, err := New(Config{})
	if err != nil || p != nil {
		t.Fatalf("New(zero) = %v, %v; want nil, nil (off)", p, err)
	}
	if p.Max() != 0 || p.Pollers() != 0 || p.Stats() != (Stats{}) {
		t.Errorf("nil Poller: max %v pollers %d stats %+v", p.Max(), p.Pollers(), p.Stats())
	}
	r := p.Reader()
	if r != nil {
		t.Fatalf("nil Poller gave a Reader")
	}
	r.Sleep()
	r.Woke()
	if r.Poll(func() bool { t.Fatal("nil Reader polled"); return true }) || r.Window() != 0 {
		t.Errorf("nil Reader polls")
	}
	if p := mustNew(t, Config{Max: time.Microsecond}); p.Pollers() < 1 {
		t.Errorf("default pollers %d", p.Pollers())
	}
}

// TestAdapt follows KVM's halt-polling rule: short sleeps grow the window
// from 10 µs by doubling up to the bound, long ones halve it down to 0.
func TestAdapt(t *testing.T) {
	r := mustNew(t, Config{Max: 50 * time.Microsecond}).Reader()
	us := func(n int) int64 { return int64(time.Duration(n) * time.Microsecond) }
	steps := []struct {
		sleep int64
		want  time.Duration
	}{
		{us(5), 10 * time.Microsecond},
		{us(30), 20 * time.Microsecond},
		{us(50), 40 * time.Microsecond}, // at the bound still counts as short
		{us(1), 50 * time.Microsecond},  // capped
		{us(2), 50 * time.Microsecond},
		{us(51), 25 * time.Microsecond},
		{us(1000), 12500 * time.Nanosecond},
		{us(1000), 0}, // 6.25 µs is below the start: off
		{us(1000), 0},
		{us(3), 10 * time.Microsecond},
	}
	for i, s := range steps {
		r.adapt(s.sleep)
		if r.Window() != s.want {
			t.Fatalf("step %d (sleep %v): window %v, want %v", i, time.Duration(s.sleep), r.Window(), s.want)
		}
	}
}

// TestPoll: a new reader does not poll; one with a window tries until it
// finds frames, or until its window has passed. The window is the longest
// allowed (1 ms), so that a loaded machine that keeps the test's thread off
// its CPU between two tries (a 20 µs window was not enough in CI) does not
// end the poll before its third try.
func TestPoll(t *testing.T) {
	p := mustNew(t, Config{Max: MaxWindow})
	r := p.Reader()
	calls := 0
	try := func() bool { calls++; return calls == 3 }
	if r.Poll(try) || calls != 0 {
		t.Fatalf("a new reader polled (%d tries)", calls)
	}
	for r.Window() < MaxWindow {
		r.adapt(0) // doubles from 10 µs, capped at Max
	}
	// A clock that moves 1 µs per reading, however long the machine keeps
	// this thread off its CPU: three tries fit in any window.
	clock, fake := now, int64(0)
	now = func() int64 { fake += 1000; return fake }
	found := r.Poll(try)
	now = clock
	if !found || calls != 3 {
		t.Fatalf("Poll did not find the frames of the third try (%d tries)", calls)
	}
	start := time.Now()
	if r.Poll(func() bool { return false }) {
		t.Fatal("Poll found frames that never came")
	}
	if d := time.Since(start); d < r.Window() {
		t.Errorf("Poll gave up after %v, before its window of %v", d, r.Window())
	}
	st := p.Stats()
	if st.Polls != 2 || st.Found != 1 || st.Time < r.Window() {
		t.Errorf("stats %+v: want 2 polls, 1 found, at least %v polling", st, r.Window())
	}
}

// TestPollers: with one poller allowed, a second reader sleeps at once
// while the first polls, and polls again once it is done.
func TestPollers(t *testing.T) {
	p := mustNew(t, Config{Max: MaxWindow, Pollers: 1})
	a, b := p.Reader(), p.Reader()
	a.adapt(0)
	b.adapt(0)
	in, out := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.Poll(func() bool { close(in); <-out; return true })
	}()
	<-in
	if b.Poll(func() bool { t.Error("second reader polled past the limit"); return true }) {
		t.Error("second reader found frames past the limit")
	}
	close(out)
	wg.Wait()
	if !b.Poll(func() bool { return true }) {
		t.Error("second reader could not poll after the first was done")
	}
	if st := p.Stats(); st.Turned != 1 || st.Polls != 2 || st.Found != 2 {
		t.Errorf("stats %+v: want 1 turned away, 2 polls, 2 found", st)
	}
}

func TestPollAllocs(t *testing.T) {
	r := mustNew(t, Config{Max: 50 * time.Microsecond}).Reader()
	r.adapt(0)
	var q queue
	try := q.try
	if n := testing.AllocsPerRun(100, func() {
		q.n = 1
		r.Poll(try)
		r.Sleep()
		r.Woke()
	}); n != 0 {
		t.Errorf("%v allocations per poll", n)
	}
}

type queue struct{ n int }

func (q *queue) try() bool { q.n--; return q.n >= 0 }
