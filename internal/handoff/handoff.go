// Package handoff is the wire protocol of gvs-switchd's live upgrade: the
// running daemon hands its open descriptors (pod TAP queues, the VXLAN
// sockets, tun0, its listening sockets) and its state (the connection
// table) to the daemon that replaces it, over a root-only unix socket
// (SOCK_SEQPACKET, descriptors as SCM_RIGHTS).
//
// The exchange, new daemon N connecting to old daemon O:
//
//  1. N → O Hello: the protocol version and N's process id.
//  2. O parks its switch's readers (frames wait in the kernel's queues)
//     and its CNI and control sockets' accepting, then O → N State (what
//     the descriptors are, how many bytes of connection table follow),
//     Fds messages carrying the descriptors, up to MaxFds each, and
//     Conntrack messages carrying the table in conntrack's save format.
//  3. N builds its ports on the descriptors, loads the table, starts
//     forwarding, then N → O Ready. Or N → O Abort, or N dies: O then
//     resumes forwarding as if nothing happened.
//  4. O closes its descriptors (the kernel objects stay: N holds the same
//     open files), O → N Bye, and O exits.
//
// Fallback: N, having received the state but unable to use it (say, its
// configuration asks for another number of tunnel sockets), closes every
// descriptor it received and sends Release instead of Ready: O then stops
// as on SIGTERM (saving its table to disk) and N, once O's end of the
// connection has closed, starts afresh (adopt-on-start).
//
// Every message is one datagram: a 12-byte header (Magic, Version, the
// Type, two zero bytes, the body's length, big-endian) and the body.
package handoff

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Magic opens every message.
const Magic = "GVSH"

// Version is the protocol version of this package.
const Version = 1

// HeaderLen is the length of a message header.
const HeaderLen = 12

// MaxBody is the longest message body; a connection table longer than
// this goes in several Conntrack messages.
const MaxBody = 64 << 10

// MaxFds is the most descriptors one Fds message carries (the kernel takes
// up to 253 in one SCM_RIGHTS message).
const MaxFds = 128

// Type is a message's type.
type Type uint8

// Message types.
const (
	TypeHello Type = 1 + iota
	TypeState
	TypeFds
	TypeConntrack
	TypeReady
	TypeBye
	TypeAbort
	TypeRelease
)

var typeNames = [...]string{"", "hello", "state", "fds", "conntrack", "ready", "bye", "abort", "release"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// ErrMalformed marks every error about a message that breaks the protocol.
var ErrMalformed = errors.New("handoff: malformed message")

// Parse checks a received datagram's header and returns its type and body
// (a slice of b).
func Parse(b []byte) (Type, []byte, error) {
	if len(b) < HeaderLen {
		return 0, nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrMalformed, len(b), HeaderLen)
	}
	if string(b[:4]) != Magic {
		return 0, nil, fmt.Errorf("%w: magic %q, want %q", ErrMalformed, b[:4], Magic)
	}
	if b[4] != Version {
		return 0, nil, fmt.Errorf("%w: version %d, this daemon speaks %d", ErrMalformed, b[4], Version)
	}
	t := Type(b[5])
	if t < TypeHello || t > TypeRelease {
		return 0, nil, fmt.Errorf("%w: unknown type %d", ErrMalformed, b[5])
	}
	if b[6] != 0 || b[7] != 0 {
		return 0, nil, fmt.Errorf("%w: reserved bytes %#x %#x are not zero", ErrMalformed, b[6], b[7])
	}
	n := binary.BigEndian.Uint32(b[8:12])
	if n > MaxBody {
		return 0, nil, fmt.Errorf("%w: %s body of %d bytes, more than %d", ErrMalformed, t, n, MaxBody)
	}
	if int(n) != len(b)-HeaderLen {
		return 0, nil, fmt.Errorf("%w: %s header says %d bytes of body, the datagram has %d", ErrMalformed, t, n, len(b)-HeaderLen)
	}
	return t, b[HeaderLen:], nil
}

// Append appends a message of type t with body to dst.
func Append(dst []byte, t Type, body []byte) []byte {
	dst = append(dst, Magic...)
	dst = append(dst, Version, byte(t), 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(body)))
	return append(dst, body...)
}

// Hello is the body of TypeHello.
type Hello struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
}

// Pod is one pod TAP in State.
type Pod struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns"`
	Port        uint32 `json:"port"`
	// Queues are the indices of the TAP's queues' descriptors, queue 0
	// first.
	Queues []int `json:"queues"`
}

// State is the body of TypeState: what the descriptors that follow are
// (indices into them, in the order the Fds messages carry them) and what
// else follows.
type State struct {
	PID      int    `json:"pid"`
	NodeName string `json:"nodeName"`
	Subnet   string `json:"subnet"`
	// Fds is how many descriptors the Fds messages carry in all.
	Fds int `json:"fds"`
	// VXLANRx and VXLANTx are vxlan0's receive and send sockets
	// (vxlan.Port.Fds); VXLANSteered says the receive group is steered.
	VXLANRx      []int `json:"vxlanRx"`
	VXLANTx      []int `json:"vxlanTx"`
	VXLANSteered bool  `json:"vxlanSteered"`
	// Tun0 is tun0's queues.
	Tun0 []int `json:"tun0"`
	// CNIListener and ControlListener are the listening sockets (-1:
	// none).
	CNIListener     int   `json:"cniListener"`
	ControlListener int   `json:"controlListener"`
	Pods            []Pod `json:"pods"`
	// Conntrack is how many bytes of connection table (conntrack's save
	// format) the Conntrack messages carry in all.
	Conntrack int64 `json:"conntrack"`
}

// Limits of a State.
const (
	maxStateFds       = 1 << 16
	maxStateConntrack = 1 << 34
)

// DecodeState decodes and checks a TypeState body: every index names one
// of the Fds descriptors and none is named twice.
func DecodeState(body []byte) (State, error) {
	var s State
	if err := json.Unmarshal(body, &s); err != nil {
		return State{}, fmt.Errorf("%w: state: %w", ErrMalformed, err)
	}
	if err := s.Validate(); err != nil {
		return State{}, err
	}
	return s, nil
}

// Validate checks s as DecodeState does.
func (s *State) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: state: "+format, append([]any{ErrMalformed}, args...)...)
	}
	if s.Fds < 0 || s.Fds > maxStateFds {
		return bad("%d descriptors, want 0 to %d", s.Fds, maxStateFds)
	}
	if s.Conntrack < 0 || s.Conntrack > maxStateConntrack {
		return bad("%d bytes of connection table, want 0 to %d", s.Conntrack, int64(maxStateConntrack))
	}
	if len(s.VXLANRx) == 0 || len(s.VXLANTx) == 0 || len(s.Tun0) == 0 {
		return bad("vxlan0 (%d receive, %d send sockets) and tun0 (%d queues) need a descriptor each at least",
			len(s.VXLANRx), len(s.VXLANTx), len(s.Tun0))
	}
	seen := make(map[int]string, s.Fds)
	use := func(what string, i int) error {
		if i < 0 || i >= s.Fds {
			return bad("%s: descriptor %d of %d", what, i, s.Fds)
		}
		if prev, dup := seen[i]; dup {
			return bad("descriptor %d is both %s and %s", i, prev, what)
		}
		seen[i] = what
		return nil
	}
	for _, l := range []struct {
		what string
		is   []int
	}{{"vxlan0 receive socket", s.VXLANRx}, {"vxlan0 send socket", s.VXLANTx}, {"tun0", s.Tun0}} {
		for _, i := range l.is {
			if err := use(l.what, i); err != nil {
				return err
			}
		}
	}
	for _, l := range []struct {
		what string
		i    int
	}{{"CNI listener", s.CNIListener}, {"control listener", s.ControlListener}} {
		if l.i == -1 {
			continue
		}
		if err := use(l.what, l.i); err != nil {
			return err
		}
	}
	ports := make(map[uint32]bool, len(s.Pods))
	for _, p := range s.Pods {
		if p.ContainerID == "" || p.IfName == "" || p.Netns == "" || len(p.Queues) == 0 {
			return bad("pod %q/%q in %q: container ID, interface, namespace and a queue are required", p.ContainerID, p.IfName, p.Netns)
		}
		if ports[p.Port] || p.Port == 0 {
			return bad("pod %s: port %d is zero or taken twice", p.ContainerID, p.Port)
		}
		ports[p.Port] = true
		for _, i := range p.Queues {
			if err := use("pod "+p.ContainerID, i); err != nil {
				return err
			}
		}
	}
	if len(seen) != s.Fds {
		return bad("%d descriptors sent, %d of them named", s.Fds, len(seen))
	}
	return nil
}

// fdsStart decodes a TypeFds body: the index of its first descriptor.
func fdsStart(body []byte) (int, error) {
	if len(body) != 4 {
		return 0, fmt.Errorf("%w: fds body of %d bytes, want 4", ErrMalformed, len(body))
	}
	return int(binary.BigEndian.Uint32(body)), nil
}
