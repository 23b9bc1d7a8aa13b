package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// binDir holds the binaries TestMain builds for the tests.
var binDir string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: not root; the namespace tests skip")
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "gvs-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out, err := exec.Command("go", "build", "-o", dir+"/", "github.com/gvswitch/gvs/cmd/...").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: building binaries: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, TAPs and veths")
	}
}

// underlay is the tests' underlay network; it exists only inside the
// namespaces the tests create.
var underlay = netip.MustParsePrefix("192.168.241.0/24")

// up brings up a cluster whose namespaces are named after the test and
// removes it when the test ends.
func up(t testing.TB, short string, spec cluster.Spec) *cluster.Cluster {
	t.Helper()
	needRoot(t)
	spec.Lab.Prefix = fmt.Sprintf("gvt%s%d", short, os.Getpid()%100000)
	if !spec.Lab.Underlay.IsValid() {
		spec.Lab.Underlay = underlay
	}
	spec.BinDir = binDir
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range c.Nodes {
				log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n.Name+".log"))
				t.Logf("--- %s log ---\n%s", n.Name, log)
			}
		}
		if err := c.Down(); err != nil {
			t.Errorf("tearing down: %v", err)
		}
	})
	return c
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return c
}

// ping pings to from a namespace and reports whether replies came back.
func ping(t *testing.T, l *lab.Lab, ns string, to netip.Addr, size int, extra ...string) (bool, string) {
	t.Helper()
	argv := append([]string{"ping", "-c", "3", "-i", "0.2", "-W", "2", "-s", fmt.Sprint(size)}, extra...)
	out, err := l.Exec(ctx(t), ns, append(argv, to.String())...)
	return err == nil && !strings.Contains(string(out), " 100% packet loss"), string(out)
}

// ctl runs gvsctl on node i and fails the test on error.
func ctl(t *testing.T, c *cluster.Cluster, i int, args ...string) string {
	t.Helper()
	out, err := c.Ctl(ctx(t), i, args...)
	if err != nil {
		t.Fatalf("gvsctl %v on %s: %v\n%s", args, c.Nodes[i].Name, err, out)
	}
	return string(out)
}
