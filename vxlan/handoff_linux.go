package vxlan

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Handing the tunnel's sockets to another process (gvs-switchd's live
// upgrade): the old process sends the descriptors of Fds over a unix
// socket (SCM_RIGHTS), the new one passes them in Config.Sockets, and the
// kernel objects, with the datagrams queued in them, the SO_REUSEPORT
// group and its steering program, carry on unchanged.

// Sockets are the sockets of a tunnel port made by an earlier Listen,
// possibly in another process: Config.Sockets.
type Sockets struct {
	// Rx are the receive sockets in the order of Fds (the SO_REUSEPORT
	// group's), Tx the send sockets. Listen owns them from then on, also
	// when it fails.
	Rx, Tx []*os.File
	// Steered says the receive group is steered by source port
	// (steer_linux.go): the program stays attached to the group.
	Steered bool
}

// Fds returns the descriptors of the port's receive and send sockets, in
// the order Config.Sockets takes them, and whether the receive sockets
// are steered. They stay the port's: valid until Close.
func (p *Port) Fds() (rx, tx []int, steered bool) {
	for _, s := range p.rx {
		rx = append(rx, socketFd(s.rc))
	}
	for _, s := range p.tx {
		tx = append(tx, socketFd(s.rc))
	}
	return rx, tx, p.steered
}

func socketFd(rc interface{ Control(func(uintptr)) error }) int {
	fd := -1
	_ = rc.Control(func(u uintptr) { fd = int(u) })
	return fd
}

// adopt takes the sockets of cfg.Sockets in place of opening new ones: n
// receive sockets bound to laddr and some send sockets on local.
func (p *Port) adopt(s *Sockets, local [4]byte, lport int, n int) error {
	if len(s.Rx) != n || len(s.Tx) == 0 {
		return fmt.Errorf("vxlan: adopt: %d receive and %d send sockets, want %d and at least 1", len(s.Rx), len(s.Tx), n)
	}
	for _, f := range s.Rx {
		rc, err := f.SyscallConn()
		if err != nil {
			return fmt.Errorf("vxlan: adopt: %w", err)
		}
		sa, err := sockName(rc)
		if err != nil {
			return err
		}
		if sa.Addr != local || sa.Port != lport {
			return fmt.Errorf("vxlan: adopt: receive socket bound to %v:%d, want %v:%d", sa.Addr, sa.Port, local, lport)
		}
		p.rx = append(p.rx, rxSocket{f: f, rc: rc})
	}
	p.steered = s.Steered && n > 1
	p.consecutive = true
	for i, f := range s.Tx {
		rc, err := f.SyscallConn()
		if err != nil {
			return fmt.Errorf("vxlan: adopt: %w", err)
		}
		sa, err := sockName(rc)
		if err != nil {
			return err
		}
		if sa.Addr != local {
			return fmt.Errorf("vxlan: adopt: send socket bound to %v, want %v", sa.Addr, local)
		}
		p.tx = append(p.tx, txSocket{f: f, rc: rc, port: uint16(sa.Port)})
		if i > 0 && int(p.tx[i-1].port)+1 != sa.Port {
			p.consecutive = false
		}
	}
	return nil
}

func sockName(rc interface{ Control(func(uintptr)) error }) (*unix.SockaddrInet4, error) {
	var sa unix.Sockaddr
	var err error
	if cerr := rc.Control(func(fd uintptr) { sa, err = unix.Getsockname(int(fd)) }); cerr != nil || err != nil {
		return nil, fmt.Errorf("vxlan: adopt: getsockname: %w", errors.Join(cerr, err))
	}
	in4, ok := sa.(*unix.SockaddrInet4)
	if !ok {
		return nil, fmt.Errorf("vxlan: adopt: not an IPv4 socket: %T", sa)
	}
	return in4, nil
}

// Interrupt makes the queue's Read in progress, or its next, return
// port.ErrWoken without frames (vswitch.Interrupter: the switch's Pause).
// Any goroutine may call it.
func (q *Queue) Interrupt() {
	st := q.st
	st.intrMu.Lock()
	defer st.intrMu.Unlock()
	st.interrupted = true
	_ = st.ep.SetReadDeadline(time.Unix(1, 0))
}

// takeInterrupt reports whether err is the wake-up of Interrupt, and then
// clears it.
func (st *rxState) takeInterrupt(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	st.intrMu.Lock()
	defer st.intrMu.Unlock()
	st.interrupted = false
	_ = st.ep.SetReadDeadline(time.Time{})
	return true
}

// Pending reports whether the queue holds datagrams of its last receive
// batch that Read has not returned yet (vswitch.Pender: the switch's
// Pause lets Read return them before it parks the reader). Only the
// reading goroutine may call it.
func (q *Queue) Pending() bool { return q.st.mi < q.st.got }
