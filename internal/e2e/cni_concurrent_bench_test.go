package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// BenchmarkCNIAddConcurrent measures a burst of 20 CNI ADDs on one node,
// issued one after the other ("sequential") and all at once
// ("concurrent"), as a kubelet starting a deployment's pods does. It
// reports the burst's wall time and the ADDs' p50/p99 latency; if ADDs of
// different pods ran one at a time inside the daemon, the concurrent burst
// would take as long as the sequential one.
//
//	go test -run '^$' -bench CNIAddConcurrent -benchtime 5x ./internal/e2e/
func BenchmarkCNIAddConcurrent(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: creates network namespaces and TAPs")
	}
	const pods = 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("gvtcnc%d", os.Getpid()%10000)
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab:  lab.Spec{Prefix: prefix, Nodes: 1, PodsPerNode: 1, Projects: []string{"default"}, Underlay: underlay},
		Mode: "subnet", BinDir: binDir, CNI: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Down()
	var nss []string
	defer func() {
		for i := range nss {
			_ = netconf.DeleteNamedNS(fmt.Sprintf("%s-c%d", prefix, i))
		}
	}()
	for i := range pods {
		p, err := netconf.CreateNamedNS(fmt.Sprintf("%s-c%d", prefix, i))
		if err != nil {
			b.Fatal(err)
		}
		nss = append(nss, p)
	}
	cni := c.CNI()
	list, err := c.CNIConfList(0, "1.1.0")
	if err != nil {
		b.Fatal(err)
	}
	rt := func(i int) *libcni.RuntimeConf {
		return cluster.RuntimeConf(fmt.Sprint("conc", i), nss[i], "eth0", "default", fmt.Sprint("c", i))
	}
	add := func(i int) (time.Duration, error) {
		start := time.Now()
		err := c.InNode(0, func() error { _, err := cni.AddNetworkList(ctx, list, rt(i)); return err })
		return time.Since(start), err
	}
	del := func() {
		for i := range nss {
			if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx, list, rt(i)) }); err != nil {
				b.Fatalf("DEL %d: %v", i, err)
			}
		}
	}
	logFile := filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log")
	logSize := func() int64 {
		st, err := os.Stat(logFile)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	for _, mode := range []string{"sequential", "concurrent"} {
		b.Run(mode, func(b *testing.B) {
			from := logSize()
			var lat, bursts []time.Duration
			var mu sync.Mutex
			for b.Loop() {
				start := time.Now()
				var wg sync.WaitGroup
				for i := range nss {
					run := func() {
						d, err := add(i)
						if err != nil {
							b.Errorf("ADD %d: %v", i, err)
						}
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					}
					if mode == "sequential" {
						run()
					} else {
						wg.Go(run)
					}
				}
				wg.Wait()
				bursts = append(bursts, time.Since(start))
				b.StopTimer()
				del()
				b.StartTimer()
			}
			b.ReportMetric(pctMS(bursts, 50), "burst-p50-ms")
			b.ReportMetric(pctMS(lat, 50), "add-p50-ms")
			b.ReportMetric(pctMS(lat, 99), "add-p99-ms")
			// The daemon's share: the attach time it logs for each ADD of
			// this run (a lock held across attachments shows up here as
			// attach times that grow with the burst).
			if log, err := os.ReadFile(logFile); err == nil && int64(len(log)) > from {
				var att []time.Duration
				for _, m := range attachRE.FindAllSubmatch(log[from:], -1) {
					if d, err := time.ParseDuration(string(m[1])); err == nil {
						att = append(att, d)
					}
				}
				b.ReportMetric(pctMS(att, 50), "daemon-p50-ms")
				b.ReportMetric(pctMS(att, 99), "daemon-p99-ms")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// pctMS is the p-th percentile of ds in milliseconds.
func pctMS(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100]) / 1e6
}
