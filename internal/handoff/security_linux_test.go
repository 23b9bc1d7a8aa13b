package handoff

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the handoff socket is root's")
	}
}

// TestListenRefusesOpenDir: the socket's directory must be root's and
// writable by root only; the socket is 0600.
func TestListenRefusesOpenDir(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(filepath.Join(dir, "h.sock")); err == nil {
		l.Close()
		t.Fatal("Listen in a world-writable directory succeeded")
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "h.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v %v, want 0600", st.Mode(), err)
	}
}

// TestAcceptRefusesNonRoot: a process that is not root and reaches the
// socket anyway (its directory and mode opened up here on purpose) is
// refused by SO_PEERCRED.
func TestAcceptRefusesNonRoot(t *testing.T) {
	needRoot(t)
	if os.Getenv("GVS_HANDOFF_DIAL") != "" {
		t.Skip("helper")
	}
	dir, err := os.MkdirTemp("", "gvs-handoff-sock-") // its parent is /tmp: reachable by all
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "h.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, p := range []struct {
		name string
		mode os.FileMode
	}{{dir, 0o755}, {path, 0o666}} {
		if err := os.Chmod(p.name, p.mode); err != nil {
			t.Fatal(err)
		}
	}
	// The test binary, where uid 65534 can run it.
	bin, err := os.MkdirTemp("", "gvs-handoff-helper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(bin, "handoff.test")
	if err := os.WriteFile(helper, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helper, "-test.run=^TestHelperDial$")
	cmd.Env = append(os.Environ(), "GVS_HANDOFF_DIAL="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	_ = l.SetDeadline(time.Now().Add(10 * time.Second))
	if c, err := Accept(l); !errors.Is(err, ErrNotRoot) {
		if c != nil {
			c.Close()
		}
		_ = cmd.Wait()
		t.Fatalf("Accept of uid 65534: %v, want ErrNotRoot; the helper said:\n%s", err, out.String())
	}
}

// TestHelperDial connects to $GVS_HANDOFF_DIAL as TestAcceptRefusesNonRoot's
// unprivileged peer (Dial's own check passes: the listener is root).
func TestHelperDial(t *testing.T) {
	path := os.Getenv("GVS_HANDOFF_DIAL")
	if path == "" {
		t.Skip("helper of TestAcceptRefusesNonRoot")
	}
	c, err := Dial(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SendJSON(TypeHello, Hello{Version: Version, PID: os.Getpid()})
	// Connected until the daemon side has checked and closes (end of file).
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _, _, _ = c.Recv()
}

// TestListenStaleAndLive: a stale socket (nobody accepts) is replaced; a
// live one is not taken from its daemon (ErrInUse); a regular file or a
// symbolic link at the path, or a directory that is a symbolic link, is
// refused and left alone.
func TestListenStaleAndLive(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "h.sock")

	live, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(path); !errors.Is(err, ErrInUse) {
		if l != nil {
			l.Close()
		}
		t.Fatalf("second Listen on a live socket: %v, want ErrInUse", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the live daemon's socket was removed: %v", err)
	}
	// Stale: the listener's descriptor closed, its path kept (as after a
	// SIGKILL).
	live.SetUnlinkOnClose(false)
	live.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(file); err == nil {
		l.Close()
		t.Fatal("Listen over a regular file succeeded")
	}
	if _, err := os.Stat(file); err != nil {
		t.Errorf("the regular file was removed: %v", err)
	}
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(link); err == nil {
		l.Close()
		t.Fatal("Listen over a symbolic link succeeded")
	}

	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(real, linkDir); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(filepath.Join(linkDir, "h.sock")); err == nil {
		l.Close()
		t.Fatal("Listen in a directory reached by a symbolic link succeeded")
	}
}
