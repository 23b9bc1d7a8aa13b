package handoff

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultSocket is where a gvs-switchd listens for its successor.
const DefaultSocket = "/run/gvs/handoff.sock"

// ErrNotRoot is returned when the peer is not root.
var ErrNotRoot = errors.New("handoff: peer is not root")

// Conn is one end of a handoff connection.
type Conn struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

// ErrInUse is returned by Listen when a daemon still listens on the
// socket: two daemons on one node, and its socket is not taken from it.
var ErrInUse = errors.New("handoff: another daemon listens on the socket")

// Listen listens on path for a successor. Its directory is made (0700) if
// missing and must be a directory (not a symbolic link) belonging to root
// and writable by nobody else; the socket is made 0600. A stale socket
// (nobody accepts on it) is replaced; a live one is left alone (ErrInUse),
// and anything at path that is not a socket is refused.
func Listen(path string) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("handoff: %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("handoff: %s: not a directory (a symbolic link?)", dir)
	}
	if st.Uid != 0 || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("handoff: %s: owned by uid %d with mode %#o: want root's, writable by root only", dir, st.Uid, st.Mode&0o777)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// No umask change (it is the process's, and other goroutines create
	// files): until the chmod below the socket has the default mode, which
	// gives no one else write permission, needed to connect, and the
	// directory lets only root in anyway.
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("handoff: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("handoff: %w", err)
	}
	return l, nil
}

// removeStale removes a socket at path that nobody accepts on. A socket
// that answers belongs to a running daemon: ErrInUse (its successor, or a
// second daemon started by mistake, must not unlink it and take its
// place). The probe connects and closes at once: the running daemon logs
// a connection without a hello and carries on.
func removeStale(path string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("handoff: %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("handoff: %s: exists and is not a socket (mode %#o): not removed", path, st.Mode)
	}
	c, err := net.DialTimeout("unixpacket", path, 200*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrInUse, path)
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("handoff: %s: probing the socket: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("handoff: %w", err)
	}
	return nil
}

// Accept accepts a successor's connection, refusing (closing) one whose
// peer is not root.
func Accept(l *net.UnixListener) (*Conn, error) {
	c, err := l.AcceptUnix()
	if err != nil {
		return nil, err
	}
	if err := checkRoot(c); err != nil {
		c.Close()
		return nil, err
	}
	return newConn(c), nil
}

// Dial connects to the running daemon at path, which must be root.
func Dial(path string, timeout time.Duration) (*Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.Dial("unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("handoff: %w", err)
	}
	c := nc.(*net.UnixConn)
	if err := checkRoot(c); err != nil {
		c.Close()
		return nil, err
	}
	return newConn(c), nil
}

func newConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, buf: make([]byte, HeaderLen+MaxBody+1), oob: make([]byte, unix.CmsgSpace(253*4))}
}

// checkRoot checks the peer's SO_PEERCRED.
func checkRoot(c *net.UnixConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("handoff: SO_PEERCRED: %w", cerr)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("%w: uid %d, pid %d", ErrNotRoot, cred.Uid, cred.Pid)
	}
	return nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// SetDeadline sets the connection's deadline.
func (c *Conn) SetDeadline(t time.Time) error { return c.c.SetDeadline(t) }

// Send sends one message, with fds as SCM_RIGHTS (TypeFds only).
func (c *Conn) Send(t Type, body []byte, fds []int) error {
	if len(body) > MaxBody || len(fds) > MaxFds {
		return fmt.Errorf("handoff: send %s: %d bytes and %d descriptors, more than %d and %d", t, len(body), len(fds), MaxBody, MaxFds)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.c.WriteMsgUnix(Append(nil, t, body), oob, nil); err != nil {
		return fmt.Errorf("handoff: send %s: %w", t, err)
	}
	return nil
}

// SendJSON sends a message whose body is v in JSON.
func (c *Conn) SendJSON(t Type, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.Send(t, b, nil)
}

// Recv receives one message. Descriptors come only with TypeFds; the
// caller owns them. On an error, any received descriptor is closed.
func (c *Conn) Recv() (Type, []byte, []int, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("handoff: receive: %w", err)
	}
	if n == 0 && oobn == 0 {
		return 0, nil, nil, fmt.Errorf("handoff: receive: %w", io.EOF)
	}
	fds, ferr := parseRights(c.oob[:oobn])
	fail := func(err error) (Type, []byte, []int, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return 0, nil, nil, err
	}
	if ferr != nil {
		return fail(ferr)
	}
	if flags&unix.MSG_TRUNC != 0 || flags&unix.MSG_CTRUNC != 0 || n > HeaderLen+MaxBody {
		return fail(fmt.Errorf("%w: truncated (flags %#x, %d bytes)", ErrMalformed, flags, n))
	}
	t, body, err := Parse(c.buf[:n])
	if err != nil {
		return fail(err)
	}
	if len(fds) > 0 && t != TypeFds {
		return fail(fmt.Errorf("%w: %s message carries %d descriptors", ErrMalformed, t, len(fds)))
	}
	return t, body, fds, nil
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control message: %w", ErrMalformed, err)
	}
	var fds []int
	for _, m := range msgs {
		f, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// Expect receives one message of type want; an Abort is turned into an
// error with its reason.
func (c *Conn) Expect(want Type) ([]byte, []int, error) {
	t, body, fds, err := c.Recv()
	if err != nil {
		return nil, nil, err
	}
	if t == TypeAbort && want != TypeAbort {
		return nil, nil, fmt.Errorf("handoff: the peer aborted: %s", bytes.ToValidUTF8(body, nil))
	}
	if t != want {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, nil, fmt.Errorf("%w: got %s, want %s", ErrMalformed, t, want)
	}
	return body, fds, nil
}

// SendState sends st, the descriptors it names (fds[i] for index i) and
// the connection table (st.Conntrack bytes of table).
func (c *Conn) SendState(st State, fds []int, table []byte) error {
	st.Fds, st.Conntrack = len(fds), int64(len(table))
	if err := st.Validate(); err != nil {
		return fmt.Errorf("handoff: send: %w", err)
	}
	if err := c.SendJSON(TypeState, st); err != nil {
		return err
	}
	for i := 0; i < len(fds); i += MaxFds {
		j := min(i+MaxFds, len(fds))
		if err := c.Send(TypeFds, binary.BigEndian.AppendUint32(nil, uint32(i)), fds[i:j]); err != nil {
			return err
		}
	}
	for i := 0; i < len(table); i += MaxBody {
		if err := c.Send(TypeConntrack, table[i:min(i+MaxBody, len(table))], nil); err != nil {
			return err
		}
	}
	return nil
}

// RecvState receives what SendState sent: the state, its descriptors (the
// caller owns them, also those the state does not use) and the table. On
// an error every received descriptor is closed.
func (c *Conn) RecvState() (st State, fds []int, table []byte, err error) {
	defer func() {
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			fds = nil
		}
	}()
	body, _, err := c.Expect(TypeState)
	if err != nil {
		return State{}, nil, nil, err
	}
	if st, err = DecodeState(body); err != nil {
		return State{}, nil, nil, err
	}
	for len(fds) < st.Fds {
		body, got, err := c.Expect(TypeFds)
		fds = append(fds, got...)
		if err != nil {
			return State{}, fds, nil, err
		}
		start, err := fdsStart(body)
		if err != nil {
			return State{}, fds, nil, err
		}
		if start != len(fds)-len(got) || len(got) == 0 || len(fds) > st.Fds {
			return State{}, fds, nil, fmt.Errorf("%w: fds message starts at %d with %d descriptors; %d of %d received before", ErrMalformed, start, len(got), len(fds)-len(got), st.Fds)
		}
	}
	for int64(len(table)) < st.Conntrack {
		body, _, err := c.Expect(TypeConntrack)
		if err != nil {
			return State{}, fds, nil, err
		}
		if int64(len(table)+len(body)) > st.Conntrack {
			return State{}, fds, nil, fmt.Errorf("%w: connection table longer than the %d bytes announced", ErrMalformed, st.Conntrack)
		}
		table = append(table, body...)
	}
	return st, fds, table, nil
}
