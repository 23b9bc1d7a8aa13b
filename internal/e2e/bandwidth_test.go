package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/gvswitch/gvs/internal/kubetest"
	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// bwLimit is the limit the tests ask for: 50 Mbit/s.
const bwLimit = 50e6

// TestBandwidthEtcd and TestBandwidthKube: pods attached by CNI ADD with
// the bandwidth capability's arguments (runtimeConfig.bandwidth, as
// containerd passes a pod's kubernetes.io/egress-bandwidth and
// ingress-bandwidth) are held to the limit, measured with iperf3 over TCP
// within ±10 %; an unlimited pod of the same node is not; an invalid
// limit fails ADD with code 7 and leaves nothing. In Kubernetes mode the
// runtime uses the configuration the daemon installed, which must declare
// the capability for libcni to pass the arguments at all.
func TestBandwidthEtcd(t *testing.T) { testBandwidth(t, "bwe", cluster.ControlPlaneEmbedded) }

// TestBandwidthKube is TestBandwidthEtcd with the Kubernetes control plane.
func TestBandwidthKube(t *testing.T) {
	kubetest.Require(t)
	testBandwidth(t, "bwk", cluster.ControlPlaneKube)
}

func testBandwidth(t *testing.T, short, mode string) {
	c := up(t, short, cluster.Spec{
		Lab:          lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default"}},
		Mode:         "multitenant",
		ControlPlane: mode,
		CNI:          true,
	})
	list, cni := bandwidthCNI(t, c)
	free, server := c.Nodes[0].Pods[0], c.Nodes[0].Pods[1]
	add := bandwidthAdd(t, c, list, cni)
	egNS, _, err := add("eg", map[string]any{"egressRate": bwLimit})
	if err != nil {
		t.Fatalf("ADD with an egress limit: %v", err)
	}
	inNS, _, err := add("in", map[string]any{"ingressRate": bwLimit})
	if err != nil {
		t.Fatalf("ADD with an ingress limit: %v", err)
	}
	// Invalid: a burst without a rate. Code 7, no lease, no port.
	before, leases := show(t, c), leaseFiles(t, c)
	if _, _, err := add("bad", map[string]any{"egressBurst": 1000}); cniCode(err) != 7 || !strings.Contains(err.Error(), "bandwidth") {
		t.Errorf("ADD with a burst and no rate: %v, want code 7 naming the bandwidth", err)
	}
	if s := show(t, c); s != before || leaseFiles(t, c) != leases {
		t.Errorf("a refused ADD left something: %+v, %d leases (before %+v, %d)", s, leaseFiles(t, c), before, leases)
	}

	measure, within := bandwidthMeter(t, c, server)
	within("egress-limited pod sending", measure(egNS, false))
	within("ingress-limited pod receiving", measure(inNS, true))
	// The limits are one-way: the egress-limited pod receives freely.
	if got := measure(egNS, true); got < 3*bwLimit {
		t.Errorf("egress-limited pod receiving: %.1f Mbit/s, want well above %.0f", got/1e6, bwLimit/1e6)
	}
	if got := measure(free.NS, false); got < 3*bwLimit {
		t.Errorf("unlimited pod sending: %.1f Mbit/s, want well above the others' limit %.0f", got/1e6, bwLimit/1e6)
	} else {
		t.Logf("unlimited pod sending: %.1f Mbit/s", got/1e6)
	}
	// The counters: the metrics show the limited pods' passed and
	// dropped (egress) or delayed (ingress) frames.
	metrics := httpGet(t, c.Nodes[0].NSPath, "127.0.0.1:9101", "/metrics")
	for _, want := range []string{
		`gvs_pod_bandwidth_frames_total{direction="egress",namespace="default",pod="eg",port=`,
		`gvs_pod_bandwidth_frames_total{direction="ingress",namespace="default",pod="in",port=`,
		`gvs_pod_bandwidth_limit_bytes_per_second{direction="egress",namespace="default",pod="eg",port=`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, m := range []string{`direction="egress",namespace="default",pod="eg",port="`, `direction="ingress",namespace="default",pod="in",port="`} {
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "gvs_pod_bandwidth_frames_total{"+m) {
				t.Log(line)
			}
		}
	}
}

// bandwidthAdd returns a CNI ADD on node 0 through list and cni for a new
// pod namespace name, with the bandwidth capability's arguments bw (nil:
// none), DEL at cleanup; it returns the namespace and the pod's address.
func bandwidthAdd(t *testing.T, c *cluster.Cluster, list *libcni.NetworkConfigList, cni *libcni.CNIConfig) func(name string, bw map[string]any) (string, string, error) {
	return func(name string, bw map[string]any) (string, string, error) {
		ns := podNS(t, c, name)
		rt := cluster.RuntimeConf("ctr-"+name, ns, "eth0", "default", name)
		if bw != nil {
			rt.CapabilityArgs = map[string]any{"bandwidth": bw}
		}
		var res types.Result
		err := c.InNode(0, func() (err error) { res, err = cni.AddNetworkList(ctx(t), list, rt); return })
		if err != nil {
			return ns, "", err
		}
		t.Cleanup(func() { _ = c.InNode(0, func() error { return cni.DelNetworkList(ctx(t), list, rt) }) })
		r, err := types100.GetResult(res)
		if err != nil {
			t.Fatal(err)
		}
		return ns, r.IPs[0].Address.IP.String(), nil
	}
}

// bandwidthMeter measures with iperf3 against server: measure runs a 6 s
// TCP test from the pod in namespace ns (reverse: the server sends, the pod
// receives) and returns the bits per second received; within checks a
// measurement against bwLimit ± 10 %.
func bandwidthMeter(t *testing.T, c *cluster.Cluster, server cluster.Pod) (measure func(ns string, reverse bool) float64, within func(what string, got float64)) {
	// One iperf3 server per measurement, each on a port of its own: a
	// server that has just finished a test refuses the next client for a
	// moment ("the server is busy running a test").
	port := 5202
	listen := func() string {
		t.Helper()
		port++
		p := fmt.Sprint(port)
		srv, err := c.Lab.Start(ctx(t), server.NS, filepath.Join(t.TempDir(), "iperf-"+p+".log"), "iperf3", "-s", "-1", "-p", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Stop() })
		// iperf3 buffers its "listening" line when its output is a file:
		// ask the server's namespace for the listening socket instead.
		err = testutil.Poll(10*time.Second, "iperf3 to listen on "+p, func() (bool, error) {
			out, err := nsExec(t, server.NS, "ss", "-Hltn", "sport = :"+p)
			return err == nil && len(bytes.TrimSpace(out)) > 0, fmt.Errorf("ss: %v %q", err, out)
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	measure = func(ns string, reverse bool) float64 {
		t.Helper()
		argv := []string{"iperf3", "-c", server.IP.String(), "-p", listen(), "-t", "6", "-O", "1", "-J"}
		if reverse {
			argv = append(argv, "-R") // the server sends: the pod receives
		}
		out, err := nsExec(t, ns, argv...)
		if err != nil {
			t.Fatalf("iperf3 in %s: %v\n%s", ns, err, out)
		}
		var r struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("iperf3's report: %v\n%s", err, out)
		}
		if r.End.SumReceived.BitsPerSecond == 0 {
			t.Logf("iperf3 reported nothing received:\n%s", out)
		}
		return r.End.SumReceived.BitsPerSecond
	}
	within = func(what string, got float64) {
		t.Helper()
		t.Logf("%s: %.1f Mbit/s (limit %.0f)", what, got/1e6, bwLimit/1e6)
		if got < 0.9*bwLimit || got > 1.1*bwLimit {
			t.Errorf("%s: %.1f Mbit/s, want %.0f ± 10 %%", what, got/1e6, bwLimit/1e6)
		}
	}
	return measure, within
}

// bandwidthCNI is the network configuration and runtime a container
// runtime on node 0 uses: in Kubernetes mode what the daemon installed
// (its conflist declares the bandwidth capability); otherwise the
// cluster's "gvs" list with the capability declared, as an administrator
// writes it.
func bandwidthCNI(t *testing.T, c *cluster.Cluster) (*libcni.NetworkConfigList, *libcni.CNIConfig) {
	t.Helper()
	if c.Spec.ControlPlane == cluster.ControlPlaneKube {
		dir := c.NodeCNIDir(0)
		list, err := libcni.LoadConfList(filepath.Join(dir, "net.d"), "gvs")
		if err != nil {
			t.Fatal(err)
		}
		exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
		return list, libcni.NewCNIConfigWithCacheDir([]string{filepath.Join(dir, "bin")}, filepath.Join(c.Lab.StateDir(), "cni-cache"), exec)
	}
	b := fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"gvs-pods","plugins":[{"type":"gvs","socket":%q,"capabilities":{"bandwidth":true}}]}`, c.CNISocket(0))
	list, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return list, c.CNI()
}
