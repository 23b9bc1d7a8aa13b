package port_test

import (
	"sync"
	"testing"

	"github.com/gvswitch/gvs/port"
)

// A budget gives all of a Take or none, counts its refusals, lets a
// floor overdraw it, and takes back what is given.
func TestBudget(t *testing.T) {
	if _, err := port.NewBudget(0); err == nil {
		t.Error("a budget of 0 bytes was made")
	}
	b, err := port.NewBudget(100)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Take(60) || b.InUse() != 60 {
		t.Fatalf("took 60: in use %d", b.InUse())
	}
	if b.Take(50) || b.InUse() != 60 || b.Denied() != 1 {
		t.Fatalf("50 more than the 40 left were taken: in use %d, denied %d", b.InUse(), b.Denied())
	}
	b.Force(50)
	if b.InUse() != 110 || b.Take(1) {
		t.Fatalf("forced 50: in use %d, and a Take passed an overdrawn budget", b.InUse())
	}
	b.Give(110)
	if b.InUse() != 0 || b.Total() != 100 || b.Denied() != 2 {
		t.Fatalf("all given back: in use %d, total %d, denied %d", b.InUse(), b.Total(), b.Denied())
	}
	var nilb *port.Budget
	if !nilb.Take(1 << 40) {
		t.Error("a nil budget refused")
	}
	nilb.Force(1)
	nilb.Give(1)
	if nilb.InUse() != 0 || nilb.Total() != 0 || nilb.Denied() != 0 {
		t.Error("a nil budget counts")
	}
}

// Concurrent Takes never take more than the budget holds.
func TestBudgetConcurrent(t *testing.T) {
	b, err := port.NewBudget(1000)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range 1000 {
				if b.Take(7) {
					n += 7
				}
			}
			mu.Lock()
			took += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if took > 1000 || int64(took) != b.InUse() || took < 1000-6 {
		t.Fatalf("took %d of 1000 (in use %d)", took, b.InUse())
	}
}

func TestBudgetAllocs(t *testing.T) {
	b, _ := port.NewBudget(1 << 20)
	if n := testing.AllocsPerRun(100, func() {
		if b.Take(4096) {
			b.Give(4096)
		}
		b.Force(1)
		b.Give(1)
	}); n != 0 {
		t.Errorf("%v allocations per Take, Force and Give", n)
	}
}
