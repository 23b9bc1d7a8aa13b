// Package uring is a prototype (issue 14, phase 1) of an io_uring I/O
// engine for TAP pod ports: frames are received with one multishot read
// (IORING_OP_READ_MULTISHOT) into a ring of buffers the engine owns
// (IORING_REGISTER_PBUF_RING) and lent to the caller, and written in
// batches, many writes per io_uring_enter(2), with the TAP fds registered
// (IOSQE_FIXED_FILE) and, for frames that lie in the engine's buffers,
// registered buffers (IORING_OP_WRITE_FIXED). It uses raw system calls
// through golang.org/x/sys/unix; no cgo.
//
// An Engine belongs to one OS thread: it is created with
// IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN when the kernel has
// them (6.1+), so completions are run only when that thread waits for them
// and wake nobody else. Call runtime.LockOSThread before New and use the
// Engine from that goroutine only; Wake may be called from anywhere.
//
// It is not wired into the switch: the port interface is being redesigned
// (issue 10), and docs/benchmarks.md ("I/O engine candidates") holds what
// it measured.
package uring
