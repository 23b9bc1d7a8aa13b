package accept

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPeerRefused is returned for a local process that may not use a socket.
var ErrPeerRefused = errors.New("permission denied")

// PeerPolicy decides which local processes may use a unix socket, by the
// credentials the kernel records for the connecting process (SO_PEERCRED):
// root always; members of Group (primary or supplementary) when Group is
// not negative. The zero value allows root and group 0.
type PeerPolicy struct {
	Group int
}

// RootOnly allows root only.
var RootOnly = PeerPolicy{Group: -1}

// Check reports whether the process at the other end of c may use the
// socket. A connection that is not a unix socket is refused.
func (p PeerPolicy) Check(c net.Conn) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: not a unix socket connection", ErrPeerRefused)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("%w: peer credentials: %w", ErrPeerRefused, cerr)
	}
	if cred.Uid == 0 {
		return nil
	}
	if p.Group >= 0 && (int(cred.Gid) == p.Group || inGroup(int(cred.Pid), p.Group)) {
		return nil
	}
	if p.Group >= 0 {
		return fmt.Errorf("%w: uid %d (pid %d) is neither root nor in group %d", ErrPeerRefused, cred.Uid, cred.Pid, p.Group)
	}
	return fmt.Errorf("%w: uid %d (pid %d) is not root", ErrPeerRefused, cred.Uid, cred.Pid)
}

// inGroup reports whether process pid has gid among its supplementary
// groups (/proc/PID/status, read right after the connection was accepted).
func inGroup(pid, gid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, f := range strings.Fields(rest) {
				if f == strconv.Itoa(gid) {
					return true
				}
			}
		}
	}
	return false
}

// Guard wraps l so that Accept returns only connections p allows. A refused
// connection is handed to refuse (which may write an error the client
// understands) and closed.
func Guard(l net.Listener, p PeerPolicy, refuse func(net.Conn, error)) net.Listener {
	return &guarded{Listener: l, p: p, refuse: refuse}
}

type guarded struct {
	net.Listener
	p      PeerPolicy
	refuse func(net.Conn, error)
}

func (g *guarded) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := g.p.Check(c); err != nil {
			if g.refuse != nil {
				_ = c.SetWriteDeadline(time.Now().Add(time.Second))
				g.refuse(c, err)
			}
			c.Close()
			continue
		}
		return c, nil
	}
}

// SocketMode sets a unix socket file's owner group and mode for p: 0600 for
// root only, 0660 and group p.Group otherwise.
func SocketMode(path string, p PeerPolicy) error {
	if p.Group < 0 {
		return os.Chmod(path, 0o600)
	}
	if err := os.Chown(path, 0, p.Group); err != nil {
		return err
	}
	return os.Chmod(path, 0o660)
}
