package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/internal/daemon"
	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/nstest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestIPFIXConfigMap: in Kubernetes mode gvs-switchd follows its IPFIX
// collectors in a ConfigMap (ipfix.configMap "gvs/gvs-ipfix", deploy/'s
// RBAC) and applies each change without a restart. The node's file names
// no collector; in the lab's external host Debian's nfcapd listens on UDP
// 4739 (A) and the test's own decoder on 4740 (B). UDP exchanges of 20
// datagrams each way between two pods of the node, one per step:
//
//  0. no ConfigMap: nothing is sent; the exchange's counts wait in the
//     tracker;
//  1. the ConfigMap names A: A receives exchanges 0 and 1 (0 with all its
//     packets: a change loses no count);
//  2. it names B instead: B receives exchange 2, A no more;
//  3. a malformed ConfigMap, then one naming a pod's address, are refused
//     (gvs_ipfix_config_errors_total) and exchange 3 still goes to B.
//
// nfdump then reads A's file: exchanges 0 and 1, not 2 or 3. The node's
// account reads that ConfigMap only and writes none.
func TestIPFIXConfigMap(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	kubetest.Require(t)
	if _, err := exec.LookPath("nfcapd"); err != nil {
		t.Skip("nfcapd is not installed (make deps installs nfdump)")
	}
	c := up(t, "ixk", cluster.Spec{
		Lab:          lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default", "alpha"}, External: true},
		Mode:         "networkpolicy", // every pod connection is committed to the tracker
		ControlPlane: cluster.ControlPlaneKube,
		CNI:          true, // pods attached by CNI, with their Pod objects (networkpolicy mode needs their labels)
		Configure: func(c *cluster.Cluster, i int, cfg *daemon.Config) {
			cfg.IPFIX = &daemon.IPFIXConfig{ConfigMap: "gvs/gvs-ipfix", IdleTimeout: "1s", TemplateRefresh: "1s"}
		},
	})
	ext, n1 := c.Lab.External, c.Nodes[0]
	client, echo := n1.Pods[0], n1.Pods[1]
	a, b := netip.AddrPortFrom(ext.IP, 4739), netip.AddrPortFrom(ext.IP, 4740)

	capDir := t.TempDir()
	nfcapd, err := c.Lab.Start(ctx(t), ext.NS, filepath.Join(t.TempDir(), "nfcapd.log"), "nfcapd", "-p", "4739", "-w", capDir, "-t", "60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nfcapd.Stop() })
	own := listenIPFIX(t, ext.NSPath, b)

	kc, err := kubernetes.NewForConfig(c.Kube.Admin())
	if err != nil {
		t.Fatal(err)
	}
	metric := func(name string) float64 {
		return metricValue(t, httpGet(t, n1.NSPath, "127.0.0.1:9101", "/metrics"), name)
	}
	waitMetric := func(name string, want float64) {
		t.Helper()
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%s %v", name, want), func() (bool, error) { return metric(name) == want, nil })
	}
	setConfigMap := func(body string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gvs", Name: "gvs-ipfix"},
			Data: map[string]string{daemon.IPFIXConfigMapKey: body}}
		_, err := kc.CoreV1().ConfigMaps("gvs").Update(ctx(t), cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = kc.CoreV1().ConfigMaps("gvs").Create(ctx(t), cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	exchange := func(port uint16) flowKey {
		t.Helper()
		local := ixUDPExchange(t, client, echo, port, 20, 500)
		return flowKey{local, netip.AddrPortFrom(echo.IP, port), 17}
	}
	waitSent := func(n float64) {
		t.Helper()
		testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%v records sent", n), func() (bool, error) {
			return metric("gvs_ipfix_records_sent_total") >= n, nil
		})
	}

	// 0: no ConfigMap, no collector.
	waitMetric("gvs_ipfix_collectors", 0)
	x0 := exchange(5400)
	time.Sleep(3 * time.Second) // past the idle timeout: a collector would have had the records
	if n := metric("gvs_ipfix_records_sent_total"); n != 0 {
		t.Fatalf("%v records sent with no collector", n)
	}
	// 1: A.
	setConfigMap(fmt.Sprintf(`{"collectors": [%q], "idleTimeout": "1s", "templateRefresh": "1s"}`, a))
	waitMetric("gvs_ipfix_config_updates_total", 1)
	x1 := exchange(5401)
	waitSent(4) // exchanges 0 and 1, both ways
	// 2: B instead.
	setConfigMap(fmt.Sprintf(`{"collectors": [%q], "idleTimeout": "1s", "templateRefresh": "1s"}`, b))
	waitMetric("gvs_ipfix_config_updates_total", 2)
	x2 := exchange(5402)
	waitSent(6)
	// 3: refused, twice; B stays.
	setConfigMap(`{"collectors": "192.0.2.1:4739"}`)
	waitMetric("gvs_ipfix_config_errors_total", 1)
	setConfigMap(fmt.Sprintf(`{"collectors": ["%v:4739"]}`, echo.IP))
	waitMetric("gvs_ipfix_config_errors_total", 2)
	if n := metric("gvs_ipfix_collectors"); n != 1 {
		t.Errorf("%v collectors after two refused ConfigMaps, want B's 1", n)
	}
	x3 := exchange(5403)
	waitSent(8)
	testutil.WaitFor(t, 30*time.Second, "B to have exchanges 2 and 3", func() (bool, error) {
		s := own.sums()
		return s[x2].packets == 20 && s[x2.reverse()].packets == 20 && s[x3].packets == 20 && s[x3.reverse()].packets == 20, nil
	})
	for _, k := range []flowKey{x0, x1} {
		if s := own.sums()[k]; s.packets != 0 {
			t.Errorf("B, named after exchange %v, has %d of its packets", k, s.packets)
		}
	}

	nstest.WaitUDPRead(t, ext.NS, 4739, 10*time.Second)
	if err := nfcapd.Stop(); err != nil {
		t.Fatal(err)
	}
	flows := readNfdump(t, capDir)
	for _, k := range []flowKey{x0, x0.reverse(), x1, x1.reverse()} {
		if f := flows[k]; f.packets != 20 {
			t.Errorf("A (nfdump): %v has %d packets, want 20", k, f.packets)
		}
	}
	for _, k := range []flowKey{x2, x3} {
		if f := flows[k]; f.packets != 0 {
			t.Errorf("A (nfdump), removed before %v, has %d of its packets", k, f.packets)
		}
	}

	// The node's account: that ConfigMap, read-only; no other.
	t.Run("rbac", func(t *testing.T) {
		rc, err := c.Kube.ServiceAccountConfig(ctx(t), "gvs", "gvs-node")
		if err != nil {
			t.Fatal(err)
		}
		nc, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		cm, err := nc.CoreV1().ConfigMaps("gvs").Get(ctx(t), "gvs-ipfix", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("gvs-node reads gvs-ipfix: %v", err)
		}
		if _, err := nc.CoreV1().ConfigMaps("gvs").Update(ctx(t), cm, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("gvs-node updates gvs-ipfix: %v, want forbidden", err)
		}
		if _, err := nc.CoreV1().ConfigMaps("gvs").Get(ctx(t), "gvs-node", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("gvs-node reads ConfigMap gvs-node: %v, want forbidden", err)
		}
		if _, err := nc.CoreV1().ConfigMaps("gvs").List(ctx(t), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("gvs-node lists gvs's ConfigMaps: %v, want forbidden", err)
		}
		// A tenant's account cannot write it.
		tc, err := c.Kube.ServiceAccountConfig(ctx(t), "alpha", "tenant")
		if err != nil {
			t.Fatal(err)
		}
		tk, err := kubernetes.NewForConfig(tc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tk.CoreV1().ConfigMaps("gvs").Update(ctx(t), cm, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("a tenant updates gvs-ipfix: %v, want forbidden", err)
		}
	})
}
