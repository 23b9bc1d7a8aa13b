// Package sched asks the kernel's scheduler (EEVDF, Linux 6.12 and later)
// for a shorter time slice for every thread of this process.
//
// Why: on a node whose CPUs are busy, a frame waits for each gvs thread it
// passes through to get a CPU. A thread woken for a frame is placed behind
// whatever runs, and with the default slice (0.7–3 ms, scaled by the CPU
// count) a bulk TCP stream's processes can hold a CPU for that long before
// the scheduler looks again. A thread that asked for a short slice gets an
// earlier deadline when it wakes and preempts the running task, so a probe or
// a DNS query crosses the switch sooner. The slice does not change the CPU
// share (that is the nice value's job, which this package leaves alone): a
// thread with a short slice is preempted sooner too, so it takes more turns,
// not more time.
//
// When CPUs are free, though, a woken thread gets one anyway, and a short
// slice only makes gvs's threads preempt the processes they serve (our
// reading; Go's spinning threads would do it too): on the 2-vCPU lab an
// idle round trip took 35 % longer with short slices always on. So a [Keeper] by default gives the
// short slice only while the kernel reports CPU pressure (PSI: tasks
// waiting for a CPU), and the kernel's default otherwise.
//
// Go creates and ends OS threads by itself. A new thread inherits the slice
// of the thread that created it (Linux 6.18 here), so setting every thread
// once covers the threads to come; a [Keeper] also looks for new threads at
// an interval and sets theirs, for threads started while it made its first
// pass. Kernels before 6.12 accept the request and ignore it; [SetSlice]
// reads the slice back and reports [ErrUnsupported] then.
package sched
