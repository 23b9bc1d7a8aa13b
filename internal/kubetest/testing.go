package kubetest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/sdn/kube/networkv1"
)

// Require skips the test unless it runs as root with the binaries the
// harness needs. In CI (CI set in the environment) a missing binary fails
// the test instead: `make test` builds them, so missing means broken.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if m := Missing(BinDir()); len(m) > 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v: %v", ErrNoBinary, m)
		}
		t.Skipf("%v: %v", ErrNoBinary, m)
	}
}

// Manifests returns the paths of deploy/'s manifests (CRDs, RBAC,
// gvs-master's Deployment, gvs-node's DaemonSet), in the order to apply
// them. Without controllers, the Deployment and DaemonSet start nothing:
// the API server validates and stores them.
func Manifests() []string {
	root := RepoRoot()
	var out []string
	for _, f := range []string{"crds/clusternetworks.yaml", "crds/hostsubnets.yaml", "crds/netnamespaces.yaml", "crds/egressnetworkpolicies.yaml", "rbac.yaml", "gvs-master.yaml", "gvs-node.yaml"} {
		out = append(out, filepath.Join(root, "deploy", f))
	}
	return out
}

// New makes a one-node lab named after short and the test's process id,
// runs an API server (and etcd) in its node namespace, applies deploy/'s
// CRDs and RBAC and waits until the network.openshift.io objects are
// served. Everything is removed when the test ends; the logs are printed
// if it failed. It calls Require first.
func New(t testing.TB, short string) *Server {
	t.Helper()
	Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("gvk%s%d", short, os.Getpid()%100000)
	_ = lab.DestroyPrefix(prefix) // left over from a crashed run with this pid
	l, err := lab.Create(ctx, lab.Spec{Prefix: prefix, Nodes: 1, Underlay: netip.MustParsePrefix("192.168.242.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	var s *Server
	t.Cleanup(func() {
		if s != nil {
			if t.Failed() {
				t.Logf("--- kube-apiserver log (tail) ---\n%s\n--- etcd log (tail) ---\n%s", s.LogTail(APIServerBinary, 60), s.LogTail("etcd", 20))
			}
			if err := s.Stop(); err != nil {
				t.Errorf("stopping the API server: %v", err)
			}
		}
		if err := l.Destroy(); err != nil {
			t.Errorf("destroying the lab: %v", err)
		}
	})
	s, err = Start(ctx, Options{Lab: l, NS: l.Nodes[0].NS, Addr: l.Nodes[0].IP})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, Manifests()...); err != nil {
		t.Fatal(err)
	}
	nc, err := networkv1.NewForConfig(s.Admin())
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := nc.NetNamespaces().List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("network.openshift.io not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return s
}
