package handoff

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func validState() State {
	return State{NodeName: "n1", Subnet: "10.128.0.0/23", VXLANRx: []int{0, 1}, VXLANTx: []int{2}, Tun0: []int{3},
		CNIListener: 4, ControlListener: -1,
		Pods: []Pod{{ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/p", Port: 1000, Queues: []int{5, 6}}}}
}

func TestParse(t *testing.T) {
	msg := Append(nil, TypeReady, []byte("x"))
	if ty, body, err := Parse(msg); err != nil || ty != TypeReady || string(body) != "x" {
		t.Fatalf("Parse(Append) = %v %q %v", ty, body, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"short", msg[:5]},
		{"magic", append([]byte("XVSH"), msg[4:]...)},
		{"version", append(append([]byte{}, msg[:4]...), append([]byte{9}, msg[5:]...)...)},
		{"type", Append(nil, Type(99), nil)},
		{"reserved", func() []byte { b := bytes.Clone(msg); b[6] = 1; return b }()},
		{"length", msg[:len(msg)-1]},
	} {
		if _, _, err := Parse(tc.b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Parse(%x) = %v, want ErrMalformed", tc.name, tc.b, err)
		}
	}
}

func TestStateValidate(t *testing.T) {
	st := validState()
	st.Fds = 7
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(*State){
		"out of range": func(s *State) { s.Tun0 = []int{7} },
		"twice":        func(s *State) { s.Tun0 = []int{0} },
		"unnamed":      func(s *State) { s.Fds = 8 },
		"no vxlan":     func(s *State) { s.VXLANRx = nil },
		"pod port 0":   func(s *State) { s.Pods[0].Port = 0 },
		"negative":     func(s *State) { s.Conntrack = -1 },
	} {
		s := validState()
		s.Fds = 7
		s.Pods = append([]Pod(nil), s.Pods...)
		edit(&s)
		if err := s.Validate(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// pair returns two connected Conns (a socketpair: no peer check).
func pair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var cs [2]*Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = newConn(c.(*net.UnixConn))
		t.Cleanup(func() { cs[i].Close() })
	}
	return cs[0], cs[1]
}

// TestStateRoundTrip sends a state with 7 descriptors and a table longer
// than one message.
func TestStateRoundTrip(t *testing.T) {
	a, b := pair(t)
	var fds []int
	for range 7 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		fds = append(fds, int(r.Fd()))
	}
	table := bytes.Repeat([]byte("ct"), MaxBody) // two messages
	errc := make(chan error, 1)
	go func() { errc <- a.SendState(validState(), fds, table) }()
	st, got, gotTable, err := b.RecvState()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, fd := range got {
			unix.Close(fd)
		}
	}()
	if len(got) != 7 || !bytes.Equal(gotTable, table) || st.Pods[0].ContainerID != "c1" || st.Fds != 7 {
		t.Errorf("received %d fds, %d bytes of table, %+v", len(got), len(gotTable), st)
	}
}

// TestRecvRejectsStrayFds: descriptors on a message other than fds are
// an error, and are closed.
func TestRecvRejectsStrayFds(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, _, err := a.c.WriteMsgUnix(Append(nil, TypeReady, nil), unix.UnixRights(int(r.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.Recv(); !errors.Is(err, ErrMalformed) {
		t.Errorf("Recv = %v, want ErrMalformed", err)
	}
}

// FuzzParse: Parse and DecodeState never panic, and what Parse accepts
// re-encodes to the same bytes.
func FuzzParse(f *testing.F) {
	st := validState()
	st.Fds = 7
	body, _ := json.Marshal(st)
	f.Add(Append(nil, TypeState, body))
	f.Add(Append(nil, TypeFds, []byte{0, 0, 0, 0}))
	f.Add(Append(nil, TypeHello, []byte(`{"version":1,"pid":1}`)))
	f.Add([]byte("GVSH"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ty, body, err := Parse(b)
		if err != nil {
			return
		}
		if !bytes.Equal(Append(nil, ty, body), b) {
			t.Fatalf("Parse(%x) does not re-encode", b)
		}
		switch ty {
		case TypeState:
			if s, err := DecodeState(body); err == nil {
				if err := s.Validate(); err != nil {
					t.Fatalf("DecodeState accepted a state Validate refuses: %v", err)
				}
			}
		case TypeFds:
			_, _ = fdsStart(body)
		}
	})
}
