package busypoll_test

import (
	"fmt"
	"time"

	"github.com/gvswitch/gvs/port/busypoll"
)

// A reader's loop: take what the queue has; when it is empty, poll it
// within the reader's window; when that finds nothing, sleep until frames
// come, timing the sleep so that the window follows the queue.
func Example() {
	p, err := busypoll.New(busypoll.Config{Max: 50 * time.Microsecond})
	if err != nil {
		panic(err)
	}
	frames := make(chan int, 4)
	r := p.Reader()
	try := func() bool { return len(frames) > 0 }
	for i := range 3 {
		if !r.Poll(try) {
			r.Sleep()
			frames <- i // the sleep: here a frame arrives at once
			r.Woke()
		}
		fmt.Printf("frame %d; window now %v\n", <-frames, r.Window())
	}
	// Output:
	// frame 0; window now 10µs
	// frame 1; window now 20µs
	// frame 2; window now 40µs
}
