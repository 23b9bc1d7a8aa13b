package uring_test

import (
	"errors"
	"fmt"

	"github.com/gvswitch/gvs/port"
	"github.com/gvswitch/gvs/tap"
	"github.com/gvswitch/gvs/tap/uring"
)

// A TAP queue driven through io_uring where the kernel has it, through the
// device's own read(2) and write(2) elsewhere. Both are switch ports; the
// io_uring one reads into the caller's buffers as the kernel fills them,
// so it needs the same bufs on every Read (it may reorder them) and Reads
// from one goroutine.
func ExampleNewPort() {
	dev, err := tap.Create(tap.Config{Name: "gvs-pod0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	var p interface {
		Read(bufs [][]byte, meta []port.Meta, offset int) (int, error)
		Write(bufs [][]byte, meta []port.Meta, offset int) (int, error)
		Close() error
	} = dev
	if up, err := uring.NewPort(dev); err == nil {
		p = up
	} else if !errors.Is(err, uring.ErrUnsupported) {
		fmt.Println(err)
	}
	defer p.Close()

	const offset = 64
	bufs := make([][]byte, dev.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, offset+1514+1)
	}
	meta := make([]port.Meta, len(bufs))
	for {
		n, err := p.Read(bufs, meta, offset) // frame i is in bufs[i]
		if errors.Is(err, port.ErrWoken) {
			// Only after Wake. port.ErrMoveReader, a wake-up too, asks
			// for the loop to go on from a new goroutine, so that the
			// thread the idle port gave up ends with this one; reading
			// on here works too, and keeps that thread.
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		// Back out, in one system call for the batch.
		if _, err := p.Write(bufs[:n], meta[:n], offset); err != nil {
			fmt.Println(err)
		}
	}
}
