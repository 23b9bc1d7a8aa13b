package cniplugin

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/tap"
)

// poolNSEnv marks the copy of the test binary that TestTapPool runs
// inside its namespace.
const poolNSEnv = "GVS_TEST_POOL_IN_NS"

// TestTapPool runs TestTapPoolInNS in a namespace of its own (the whole
// process: the pool's refill goroutine creates TAPs in whatever namespace
// its thread is in, which must never be the host's).
func TestTapPool(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates TAPs in a network namespace")
	}
	name := fmt.Sprintf("gvst-pool-%d", os.Getpid())
	if _, err := netconf.CreateNamedNS(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netconf.DeleteNamedNS(name); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	args := []string{"netns", "exec", name, os.Args[0], "-test.run=^TestTapPoolInNS$", "-test.v", "-test.count=1"}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), poolNSEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestTapPoolInNS") {
		t.Fatalf("TestTapPoolInNS in %s: %v\n%s", name, err, out)
	}
	t.Logf("%s", out)
}

// gvspLinks counts the pool's interfaces (gvsp*) in this namespace.
func gvspLinks(t *testing.T) int {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, "gvsp") {
			n++
		}
	}
	return n
}

func TestTapPoolInNS(t *testing.T) {
	if os.Getenv(poolNSEnv) == "" {
		t.Skip("run by TestTapPool inside its namespace")
	}
	// A name left by someone else is skipped.
	squat, err := tap.Create(tap.Config{Name: "gvsp0"})
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()

	tmpl := tap.Config{Name: "ignored", Offloads: tap.OffloadsTSO}
	p := NewTapPool(3, tmpl, nil)
	if p.Len() != 3 {
		t.Errorf("Len after NewTapPool = %d, want 3 (the first fill is synchronous)", p.Len())
	}
	// More Gets than the pool holds: the rest are created on demand, and
	// concurrent Gets never hand out a device twice.
	const n = 8
	devs := make([]*tap.Device, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d, err := p.Get()
			if err != nil {
				t.Errorf("Get %d: %v", i, err)
				return
			}
			devs[i] = d
		})
	}
	wg.Wait()
	names := map[string]bool{}
	for _, d := range devs {
		if d == nil {
			t.FailNow()
		}
		if names[d.Name()] || d.Name() == "gvsp0" || !strings.HasPrefix(d.Name(), "gvsp") {
			t.Errorf("device name %q: duplicate, squatted or not gvsp*", d.Name())
		}
		names[d.Name()] = true
		if _, err := net.InterfaceByName(d.Name()); err != nil {
			t.Errorf("%s: %v", d.Name(), err)
		}
		// Pooled devices are not persistent: a failed ADD that closes
		// one leaves nothing.
		if persist, err := d.Persistent(); err != nil || persist {
			t.Errorf("%s persistent = %v (%v), want false", d.Name(), persist, err)
		}
	}
	// The pool refills in the background.
	testutil.WaitFor(t, 10*time.Second, "the pool to hold 3 devices", func() (bool, error) {
		n := p.Len()
		return n == 3, fmt.Errorf("it holds %d", n)
	})
	if got := gvspLinks(t); got != 1+n+3 {
		t.Errorf("%d gvsp links, want %d (squatter, %d taken, 3 pooled)", got, 1+n+3, n)
	}
	// Close deletes the pooled devices, not the ones handed out.
	p.Close()
	p.Close() // idempotent
	if got := gvspLinks(t); got != 1+n {
		t.Errorf("after Close: %d gvsp links, want %d", got, 1+n)
	}
	if p.Len() != 0 {
		t.Errorf("Len after Close = %d", p.Len())
	}
	for _, d := range devs {
		d.Close()
	}
	squat.Close()
	if got := gvspLinks(t); got != 0 {
		t.Errorf("after closing every device: %d gvsp links left", got)
	}

	// A pool of size 0 keeps nothing and creates on Get.
	p0 := NewTapPool(0, tmpl, nil)
	d, err := p0.Get()
	if err != nil {
		t.Fatal(err)
	}
	if p0.Len() != 0 || gvspLinks(t) != 1 {
		t.Errorf("size 0: Len %d, %d links", p0.Len(), gvspLinks(t))
	}
	d.Close()
	p0.Close()
	if got := gvspLinks(t); got != 0 {
		t.Errorf("size 0 pool left %d links", got)
	}
}
