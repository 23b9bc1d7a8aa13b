package accept

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// When GVS_PEER_DIAL is set, the test binary is the client: it dials the
// socket, sends a line and prints what came back.
func TestMain(m *testing.M) {
	if sock := os.Getenv("GVS_PEER_DIAL"); sock != "" {
		c, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(2)
		}
		fmt.Fprintln(c, "hello")
		line, _ := bufio.NewReader(c).ReadString('\n')
		fmt.Print(strings.TrimSpace(line))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The socket accepts root, and the policy's group (primary or
// supplementary); anybody else gets the refusal and no service.
func TestPeerPolicy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs clients as other users")
	}
	dir, err := os.MkdirTemp("", "gvs-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // let other users reach the socket file
		t.Fatal(err)
	}
	// The client is this test binary, copied where other users may run it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(dir, "client")
	if err := os.WriteFile(client, self, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy PeerPolicy
		cred   *syscall.Credential
		served bool
	}{
		{"root", RootOnly, nil, true},
		{"nobody, root only", RootOnly, &syscall.Credential{Uid: 65534, Gid: 65534}, false},
		{"nobody in the group", PeerPolicy{Group: 4242}, &syscall.Credential{Uid: 65534, Gid: 4242}, true},
		{"nobody, supplementary group", PeerPolicy{Group: 4242}, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4242}}, true},
		{"nobody, another group", PeerPolicy{Group: 4242}, &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{4243}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, 0o666); err != nil { // the file mode must not be what refuses
				t.Fatal(err)
			}
			g := Guard(l, tc.policy, func(c net.Conn, err error) { fmt.Fprintf(c, "refused: %v\n", err) })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- Loop(ctx, g, func(c net.Conn) {
					defer c.Close()
					line, _ := bufio.NewReader(c).ReadString('\n')
					fmt.Fprintf(c, "served %s", line)
				})
			}()
			defer func() { cancel(); <-done }()
			cmd := exec.Command(client)
			cmd.Env = append(os.Environ(), "GVS_PEER_DIAL="+sock)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: tc.cred}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("client: %v %s", err, out)
			}
			got := string(out)
			if tc.served != strings.HasPrefix(got, "served hello") {
				t.Errorf("client got %q, want served=%v", got, tc.served)
			}
			if !tc.served && !strings.Contains(got, "permission denied") {
				t.Errorf("refusal %q does not say why", got)
			}
		})
	}
}

func TestSocketMode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		p    PeerPolicy
		mode os.FileMode
		gid  int
	}{{RootOnly, 0o600, 0}, {PeerPolicy{Group: 4242}, 0o660, 4242}} {
		sock := filepath.Join(dir, fmt.Sprintf("s%d", tc.gid))
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if err := SocketMode(sock, tc.p); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != tc.mode || int(st.Sys().(*syscall.Stat_t).Gid) != tc.gid {
			t.Errorf("%+v: mode %v gid %d, want %v %d", tc.p, st.Mode().Perm(), st.Sys().(*syscall.Stat_t).Gid, tc.mode, tc.gid)
		}
	}
}
