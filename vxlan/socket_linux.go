package vxlan

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sockOpt is a socket option blockingUDP sets before it binds.
type sockOpt struct {
	name string // for errors, as "SO_RCVBUF"
	set  func(fd int) error
}

// intOpt is the SOL_SOCKET option opt set to v.
func intOpt(name string, opt, v int) sockOpt {
	return sockOpt{name, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, v) }}
}

// blockingUDP opens a blocking IPv4 UDP socket, sets opts in order, binds
// it to sa and wraps it in an os.File called name. A blocking descriptor
// stays out of Go's netpoller (the receive sockets are watched by their
// reader's epoll set and read with MSG_DONTWAIT; a send waits in the
// kernel), and the os.File closes it only once a read or send in progress
// has returned, so its number is not reused under that call.
func blockingUDP(name string, sa *unix.SockaddrInet4, opts ...sockOpt) (*os.File, syscall.RawConn, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	for _, o := range opts {
		if err := o.set(fd); err != nil {
			unix.Close(fd)
			return nil, nil, fmt.Errorf("%s: %w", o.name, err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("bind: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, rc, nil
}
