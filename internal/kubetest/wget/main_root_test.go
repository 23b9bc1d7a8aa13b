package main

import (
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/nstest"
)

// TestWget runs the command against a server in a namespace of its own: the body on standard
// output and exit 0; a 404 and a server that never answers fail with exit 1,
// the latter within the timeout (what busybox 1.35 crashed on).
func TestWget(t *testing.T) {
	nstest.RequireRoot(t)
	ns := nstest.New(t, "wget", "a")
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v\n%s", err, out)
	}
	var ln net.Listener
	if err := nstest.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hostname":
			w.Write([]byte("pod-1"))
		case "/hang":
			<-hang
		default:
			http.NotFound(w, r)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	bin := t.TempDir() + "/wget"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	base := "http://" + ln.Addr().String()
	out, err := exec.Command("ip", "netns", "exec", ns, bin, "-q", "-O", "-", "-T", "1", base+"/hostname").Output()
	if err != nil || string(out) != "pod-1" {
		t.Fatalf("wget /hostname = %q, %v; want pod-1", out, err)
	}
	if err := exec.Command("ip", "netns", "exec", ns, bin, "-T", "5", "-qO-", base+"/missing").Run(); err == nil {
		t.Fatal("wget of a 404 exited 0")
	}
	start := time.Now()
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "-q", "-O", "-", "-T", "1", base+"/hang")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("wget of a hanging server: %v, want exit status 1", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("wget -T 1 took %v", d)
	}
	if !strings.Contains(stderr.String(), "timed out") {
		t.Errorf("stderr %q does not say it timed out", stderr.String())
	}
}
