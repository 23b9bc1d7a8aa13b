package iofloor

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/gvswitch/gvs/netconf"
	"github.com/gvswitch/gvs/tap"
)

// Lab is a throwaway network namespace holding the ports of one benchmark
// or test. It is removed, with everything in it, when the test ends.
type Lab struct {
	// Name is the namespace's name, gvst-iofloor-<pid>-<n>.
	Name string
	// Path is its path under /run/netns, for netconf.Do.
	Path string
	tb   testing.TB
}

var labSeq atomic.Int64

// NewLab creates a namespace for tb, with lo up, and removes it at
// cleanup. It skips tb unless it runs as root.
func NewLab(tb testing.TB) *Lab {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces)")
	}
	name := fmt.Sprintf("gvst-iofloor-%d-%d", os.Getpid(), labSeq.Add(1))
	path, err := netconf.CreateNamedNS(name)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := netconf.DeleteNamedNS(name); err != nil {
			tb.Errorf("delete netns: %v", err)
		}
	})
	l := &Lab{Name: name, Path: path, tb: tb}
	l.IP("link", "set", "lo", "up")
	return l
}

// Do runs fn inside the namespace (netconf.Do).
func (l *Lab) Do(fn func() error) error { return netconf.Do(l.Path, fn) }

// IP runs `ip -n <ns> args...` and fails the test on error.
func (l *Lab) IP(args ...string) {
	l.tb.Helper()
	l.run("ip", append([]string{"-n", l.Name}, args...)...)
}

// TC runs `ip netns exec <ns> tc args...` and fails the test on error.
func (l *Lab) TC(args ...string) {
	l.tb.Helper()
	l.run("ip", append([]string{"netns", "exec", l.Name, "tc"}, args...)...)
}

func (l *Lab) run(cmd string, args ...string) {
	l.tb.Helper()
	var out bytes.Buffer
	c := exec.Command(cmd, args...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		l.tb.Fatalf("%s %v: %v\n%s", cmd, args, err, out.String())
	}
}

// TAP creates the TAP name in the namespace with the given TUN_F_* offloads,
// brings it up (MTU 1500, no IPv6 so that the kernel sends nothing of its
// own) and closes it at cleanup.
func (l *Lab) TAP(name string, offloads uint) *tap.Device {
	l.tb.Helper()
	var dev *tap.Device
	if err := l.Do(func() (err error) {
		dev, err = tap.Create(tap.Config{Name: name, Offloads: offloads})
		return err
	}); err != nil {
		l.tb.Fatalf("tap %s: %v", name, err)
	}
	l.tb.Cleanup(func() { dev.Close() })
	l.quiet(name)
	l.IP("link", "set", name, "up")
	return dev
}

// Veth creates the veth pair a–b in the namespace, both ends up and quiet.
func (l *Lab) Veth(a, b string) {
	l.tb.Helper()
	l.IP("link", "add", a, "type", "veth", "peer", "name", b)
	for _, n := range []string{a, b} {
		l.quiet(n)
		l.IP("link", "set", n, "up")
	}
}

// quiet turns IPv6 off on the link, so that no router solicitation or
// DAD frame mixes with a benchmark's frames.
func (l *Lab) quiet(link string) {
	l.tb.Helper()
	l.run("ip", "netns", "exec", l.Name, "sysctl", "-q", "-w", "net.ipv6.conf."+link+".disable_ipv6=1")
}

// Mirror redirects every frame that arrives on link from to link to's
// egress: tc ingress qdisc, u32 match-all, mirred egress redirect. The
// redirect runs in the softirq of the CPU that received the frame, which
// for a TAP write or an AF_XDP/veth transmit is the writer's own system
// call.
func (l *Lab) Mirror(from, to string) {
	l.tb.Helper()
	l.TC("qdisc", "add", "dev", from, "ingress")
	l.TC("filter", "add", "dev", from, "parent", "ffff:", "protocol", "all",
		"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", to)
}
