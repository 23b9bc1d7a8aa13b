//go:build linux

package vxlan

// Flow queues: per-flow fairness on the tunnel's receive side.
//
// A bulk TCP flow fills whatever queue sits in front of its bottleneck;
// with one receive socket that is the socket (SO_RCVBUF, megabytes), and
// a ping or a DNS query that lands behind it waits until the reader has
// drained everything ahead of it. So each reader (Config.Readers) has
// Config.FlowQueues receive sockets instead of one, all in one
// SO_REUSEPORT group on Local:Port:
//
//   - Each datagram goes to the socket its outer source port picks
//     (steer_linux.go; the kernel's hash of the outer addresses and
//     ports where that is off). A peer sends each inner flow from one
//     outer source port (gvs picks one of its SendSockets by the flow's
//     hash, the kernel's vxlan hashes the flow into its port range), so
//     one inner flow always lands in one socket and keeps its order,
//     while flows spread over the sockets. (Steering
//     by the inner flow instead, with a reuseport BPF program, breaks
//     that order: UDP GRO and GSO trains carry several inner flows of one
//     outer source port, and the program sees only the first.)
//   - The reader waits on an epoll set of its sockets (the epoll
//     descriptor is in Go's netpoller; the sockets are not, so a datagram
//     wakes at most one waiter) and drains the ready ones in round robin:
//     while several are ready, each gets a share of a batch per turn, so
//     a sparse flow's datagram waits behind at most a share of each busy
//     socket's backlog, not behind all of it. Small datagrams of several
//     ready sockets share one batch (up to gatherBytes): many flows of
//     small packets, such as short connections, cost the switch a pass and
//     a write per destination for them all rather than for each.
//
// Flows that hash to the same socket still share its queue, as in any
// hashed fair queue (fq_codel's included): from a gvs peer, a sparse flow
// meets a given bulk flow in one socket only if both left through the same
// send socket (1 in SendSockets; steer_linux.go), from another peer or
// the kernel's vxlan 1 in the number of sockets.

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// rxSocket is one receive socket. Its descriptor is blocking and not in
// the netpoller (the reader's epoll set watches it; reads pass
// MSG_DONTWAIT); the os.File keeps the descriptor alive while a read
// uses it.
type rxSocket struct {
	f  *os.File
	rc syscall.RawConn
}

// openRx opens a receive socket bound to laddr, in the SO_REUSEPORT group
// of laddr if shared, with SO_RCVBUF rcvbuf (0: the system's default).
func openRx(laddr *net.UDPAddr, shared bool, rcvbuf int) (rxSocket, error) {
	sa := &unix.SockaddrInet4{Port: laddr.Port}
	copy(sa.Addr[:], laddr.IP.To4())
	var opts []sockOpt
	if shared {
		opts = append(opts, intOpt("SO_REUSEPORT", unix.SO_REUSEPORT, 1))
	}
	if rcvbuf > 0 {
		opts = append(opts, intOpt("SO_RCVBUF", unix.SO_RCVBUF, rcvbuf))
	}
	f, rc, err := blockingUDP("vxlan-rx", sa, opts...)
	if err != nil {
		return rxSocket{}, err
	}
	return rxSocket{f: f, rc: rc}, nil
}

// control runs fn on the socket's descriptor.
func (s rxSocket) control(fn func(fd int) error) error {
	var ferr error
	if err := s.rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// newEpoll returns an epoll set (nonblocking, so in the netpoller) of
// socks, each registered level-triggered with its index as data.
func newEpoll(socks []rxSocket) (*os.File, syscall.RawConn, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("epoll_create1: %w", err)
	}
	for i, s := range socks {
		err := s.control(func(fd int) error {
			ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(i)}
			return unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &ev)
		})
		if err != nil {
			unix.Close(epfd)
			return nil, nil, fmt.Errorf("epoll_ctl: %w", err)
		}
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, nil, err
	}
	f := os.NewFile(uintptr(epfd), "vxlan-rx-epoll")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
}

// fairShare bounds a bulk socket's turn: a socket whose last read was bulk
// (at least bulkBytes, or a share that came back full) gets
// len(msgs)/fairShare messages (at least one) per turn, the others a
// whole batch. A round is one look at which sockets are ready; after it
// the reader looks again (epoll_wait without waiting), so a datagram that
// lands in another socket while a bulk one is being served waits behind
// one share of it — with UDP GRO 2 messages, at most 128 KiB — not behind
// a whole batch (512 KiB), also when the bulk socket was the only one
// ready when the round began. (A message is a datagram, or with UDP GRO up
// to 64 KiB of one outer flow's datagrams; small ones keep the batch
// whole, so that many small flows do not cost more reads.)
const (
	fairShare = 4
	bulkBytes = 64 << 10
)

// gatherBytes bounds the batch Read gathers from several ready sockets:
// small frames of many flows (a connection's handshake, ACKs, requests)
// share one batch up to this many bytes; past it the batch ends at the
// socket, as a bulk one always does.
const gatherBytes = 16 << 10

// fill reads the next messages into st: from the next ready socket of
// the current round, polling for a new round when it is used up and
// waiting (in the netpoller) when nothing is ready. It returns with
// st.rn > 0 messages, or an error.
func (st *rxState) fill() error {
	if err := st.held; err != nil {
		st.held = nil
		return err
	}
	for {
		if ok, err := st.next(len(st.msgs), false); ok || err != nil {
			return err
		}
		if st.wasBulk {
			// A bulk socket's share ended the round: look again at once
			// (its backlog or a newcomer), not through busy polling,
			// whose counts are for queues that ran dry.
			st.wasBulk = false
			if st.try() {
				if st.rerr != nil {
					return st.rerr
				}
				continue
			}
		}
		if st.busy.Poll(st.tryFn) {
			if st.rerr != nil {
				return st.rerr
			}
			continue
		}
		st.busy.Sleep()
		st.slept = false
		if err := st.eprc.Read(st.pollFn); err != nil {
			return err
		}
		if st.slept {
			// Only a wait in the netpoller is a sleep; a poll that
			// found sockets ready at once leaves the window as it is.
			st.busy.Woke()
		}
	}
}

// next reads from the next ready socket of the current round, at most
// room messages (a bulk socket's share at most): true when it got some
// (st.rn > 0). With smallOnly it stops, false, at a socket whose last read
// was bulk, leaving it for fill. It never waits.
func (st *rxState) next(room int, smallOnly bool) (bool, error) {
	for st.ei < st.nev {
		s := int(st.events[st.ei].Fd)
		share := st.bulk[s]
		if share && smallOnly {
			return false, nil
		}
		st.ei++
		st.vlen = min(len(st.msgs), room)
		if share {
			st.vlen = max(1, min(st.vlen, len(st.msgs)/fairShare))
			st.wasBulk = true
		}
		if err := st.socks[s].rc.Read(st.fn); err != nil {
			return false, err
		}
		if st.rerr != nil {
			return false, st.rerr
		}
		if st.rn > 0 {
			var n uint32
			for i := range st.rn {
				n += st.msgs[i].len
			}
			st.bulk[s] = n >= bulkBytes || (share && st.rn == st.vlen)
			return true, nil
		}
	}
	return false, nil
}

// try is one try of busy polling: which sockets are ready, without
// waiting (through the RawConn, which keeps the descriptor open meanwhile).
func (st *rxState) try() bool {
	if err := st.eprc.Read(st.peekFn); err != nil {
		st.rerr = err
	}
	return st.nev > 0 || st.rerr != nil
}

// poll is the epoll descriptor's RawConn callback: which sockets are
// ready; false (wait) if none.
func (st *rxState) poll(fd uintptr) bool {
	if st.peek(fd); st.nev == 0 && st.rerr == nil {
		st.waits.Add(1)
		st.slept = true
		return false
	}
	return true
}

// peek sets which sockets are ready (st.nev, or st.rerr), without
// waiting; as a RawConn callback (try's) it never waits.
func (st *rxState) peek(fd uintptr) bool {
	for {
		n, err := unix.EpollWait(int(fd), st.events, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			st.nev, st.ei, st.rerr = 0, 0, err
			return true
		}
		st.nev, st.ei, st.rerr = n, 0, nil
		return true
	}
}
