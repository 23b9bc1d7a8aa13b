// Package uring is the io_uring I/O engine of TAP pod ports.
//
// Port is what gvs-switchd uses (its ioEngine setting): a tap.Device whose
// frames move through two rings, one system call per batch each way. Its
// receive ring's provided buffers are the caller's own buffers (the switch
// worker's), so Read copies nothing and returns frames by reordering the
// caller's buffers; its transmit ring takes a batch of writes from any
// goroutine. The rings are made when the port gets busy and given up when
// its idle reader is woken (Wake), with the OS thread the receive ring
// needs (port.ErrMoveReader); PortConfig.Always keeps them. Supported probes the kernel once; NewPort fails with
// ErrUnsupported where the kernel lacks what it needs (Linux 6.7).
//
// Engine is the phase-1 prototype the benchmarks in bench/results/history.md
// ("I/O engine candidates") measured: frames are received with one multishot read
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
package uring
