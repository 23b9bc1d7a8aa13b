package iofloor_test

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gvswitch/gvs/packet"
)

// rss returns the process's resident set in bytes (/proc/self/statm).
func rss(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		tb.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

// BenchmarkQueueBuffers measures what one pod queue's buffers cost today:
// a switch worker allocates batch (64) + spare (8) buffers of headroom
// (64) + packet.MaxSuperFrame + 1 bytes each (vswitch/worker.go), for 250
// queues. It reports the bytes allocated per queue, the resident bytes
// per queue once each buffer has carried a small frame (its first page
// touched), and once each has carried a super-frame (every page touched).
func BenchmarkQueueBuffers(b *testing.B) {
	const queues, perQueue, headroom = 250, 64 + 8, 64
	size := headroom + packet.MaxSuperFrame + 1
	for b.Loop() {
		runtime.GC()
		r0 := rss(b)
		bufs := make([][]byte, 0, queues*perQueue)
		for range queues * perQueue {
			bufs = append(bufs, make([]byte, size))
		}
		r1 := rss(b)
		for _, buf := range bufs {
			buf[headroom] = 1 // a small frame
		}
		r2 := rss(b)
		for _, buf := range bufs {
			for i := 0; i < len(buf); i += 4096 {
				buf[i] = 1
			}
		}
		r3 := rss(b)
		b.ReportMetric(float64(perQueue*size), "alloc-B/queue")
		b.ReportMetric(float64(r1-r0)/queues, "rss-untouched-B/queue")
		b.ReportMetric(float64(r2-r0)/queues, "rss-small-B/queue")
		b.ReportMetric(float64(r3-r0)/queues, "rss-super-B/queue")
		runtime.KeepAlive(bufs)
	}
}
