package tap_test

import (
	"errors"
	"testing"

	"github.com/gvswitch/gvs/bench/iofloor"
	"github.com/gvswitch/gvs/port"
)

// TestTAPBudget: with a budget, Read fills no more buffers than the budget
// allows past the floor, and loses no frame for it (the rest waits in the
// kernel); quiet batches give back what is past the floor, a wake-up all.
func TestTAPBudget(t *testing.T) {
	needRoot(t)
	const size = iofloor.Headroom + 65536
	l := iofloor.NewLab(t)
	a := l.TAP("gvsba", 0)
	b := l.TAP("gvsbb", 0)
	l.Mirror("gvsba", "gvsbb")
	budget, err := port.NewBudget(12 * size)
	if err != nil {
		t.Fatal(err)
	}
	b.SetBudget(budget)
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	meta := make([]port.Meta, len(bufs))
	write := func(out [][]byte) {
		t.Helper()
		m := make([]port.Meta, len(out))
		for i := range out {
			m[i].Size = len(out[i]) - iofloor.Headroom
		}
		if n, err := a.Write(out, m, iofloor.Headroom); n != len(out) || err != nil {
			t.Fatalf("wrote %d of %d: %v", n, len(out), err)
		}
	}
	read := func(want int) (most int) {
		t.Helper()
		for got := 0; got < want; {
			n, err := b.Read(bufs, meta, iofloor.Headroom)
			if err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if s := iofloor.Seq(bufs[i][iofloor.Headroom : iofloor.Headroom+meta[i].Size]); s != uint64(got) {
					t.Fatalf("frame %d has sequence number %d", got, s)
				}
				got++
			}
			most = max(most, n)
		}
		return most
	}
	burst, _ := iofloor.Buffers(60, 64)
	for range 3 {
		write(burst)
		if most := read(len(burst)); most > 12 {
			t.Fatalf("a batch of %d frames: more buffers than the budget's 12", most)
		}
		if in := budget.InUse(); in != 12*size {
			t.Fatalf("%d bytes in use after a burst, want the whole budget %d", in, 12*size)
		}
	}
	if budget.Denied() == 0 {
		t.Error("bursts of 60 were never held back")
	}
	one, _ := iofloor.Buffers(1, 64)
	for range 256 {
		write(one)
		read(1)
	}
	if in := budget.InUse(); in != port.BudgetFloor*size {
		t.Errorf("after 256 single frames %d bytes in use, want the floor's %d", in, port.BudgetFloor*size)
	}
	b.Wake()
	if n, err := b.Read(bufs, meta, iofloor.Headroom); n != 0 || !errors.Is(err, port.ErrWoken) {
		t.Fatalf("Read after Wake: %d, %v", n, err)
	}
	if in := budget.InUse(); in != 0 {
		t.Errorf("woken: %d bytes still in use", in)
	}
	if st := b.Stats(); st.RxPackets != 3*60+256 || st.RxDropped() != 0 {
		t.Errorf("received %d of %d, %d dropped", st.RxPackets, 3*60+256, st.RxDropped())
	}
}
