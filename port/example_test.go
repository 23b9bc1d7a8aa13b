package port_test

import (
	"fmt"

	"github.com/gvswitch/gvs/port"
)

// Ports that share a budget take a buffer's bytes from it before the
// kernel may fill the buffer, take their floor even when it is spent, and
// give back when they release the buffer's pages.
func ExampleBudget() {
	const buf = 64 << 10
	b, err := port.NewBudget(4 * buf)
	if err != nil {
		panic(err)
	}
	// A port's first buffers: its floor, taken whatever the budget.
	b.Force(port.BudgetFloor * buf)
	// Growing past the floor: refused while the budget is spent.
	fmt.Println("grow:", b.Take(buf), "in use:", b.InUse()/buf, "of", b.Total()/buf)
	// The port goes idle and gives its pages back; another grows.
	b.Give(port.BudgetFloor * buf)
	fmt.Println("grow:", b.Take(buf), "refused so far:", b.Denied())
	// Output:
	// grow: false in use: 8 of 4
	// grow: true refused so far: 1
}
