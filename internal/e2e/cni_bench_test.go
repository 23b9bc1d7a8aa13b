package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
	"github.com/gvswitch/gvs/netconf"
)

// BenchmarkCNIAdd measures CNI ADD latency as a runtime sees it (libcni
// executing gvs-cni in the node namespace, the daemon leasing, attaching
// and installing rules) over 100 pods, with and without the TAP pool, and
// reports p50 and p99. Each iteration adds 100 pods one after the other,
// then deletes them.
//
//	go test -run '^$' -bench CNIAdd -benchtime 3x ./internal/e2e/
func BenchmarkCNIAdd(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: creates network namespaces and TAPs")
	}
	for _, pool := range []int{0, 16} {
		b.Run(fmt.Sprintf("tapPool=%d", pool), func(b *testing.B) { benchCNIAdd(b, pool) })
	}
}

func benchCNIAdd(b *testing.B, pool int) {
	const pods = 100
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("gvtcnb%d%d", pool, os.Getpid()%10000)
	c, err := cluster.Up(ctx, cluster.Spec{
		Lab:  lab.Spec{Prefix: prefix, Nodes: 1, PodsPerNode: 1, Projects: []string{"default"}, Underlay: underlay},
		Mode: "subnet", BinDir: binDir, CNI: true, TapPool: pool,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Down()
	var nss []string
	defer func() {
		for i := range nss {
			_ = netconf.DeleteNamedNS(fmt.Sprintf("%s-b%d", prefix, i))
		}
	}()
	for i := range pods {
		p, err := netconf.CreateNamedNS(fmt.Sprintf("%s-b%d", prefix, i))
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
	var lat []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		for i, ns := range nss {
			rt := cluster.RuntimeConf(fmt.Sprint("bench", i), ns, "eth0", "default", fmt.Sprint("b", i))
			start := time.Now()
			err := c.InNode(0, func() error { _, err := cni.AddNetworkList(ctx, list, rt); return err })
			lat = append(lat, time.Since(start))
			if err != nil {
				b.Fatalf("ADD %d: %v", i, err)
			}
		}
		b.StopTimer()
		for i, ns := range nss {
			rt := cluster.RuntimeConf(fmt.Sprint("bench", i), ns, "eth0", "default", fmt.Sprint("b", i))
			if err := c.InNode(0, func() error { return cni.DelNetworkList(ctx, list, rt) }); err != nil {
				b.Fatalf("DEL %d: %v", i, err)
			}
		}
		if pool > 0 {
			time.Sleep(200 * time.Millisecond) // let the pool refill, as between pod bursts
		}
		b.StartTimer()
	}
	pct := func(lat []time.Duration, p int) float64 {
		slices.Sort(lat)
		return float64(lat[(len(lat)-1)*p/100]) / 1e6
	}
	b.ReportMetric(pct(lat, 50), "p50-ms")
	b.ReportMetric(pct(lat, 99), "p99-ms")
	// The daemon's share: the attach time it logs for each ADD.
	log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), c.Nodes[0].Name+".log"))
	var att []time.Duration
	for _, m := range attachRE.FindAllSubmatch(log, -1) {
		if d, err := time.ParseDuration(string(m[1])); err == nil {
			att = append(att, d)
		}
	}
	if len(att) > 0 {
		b.ReportMetric(pct(att, 50), "daemon-p50-ms")
		b.ReportMetric(pct(att, 99), "daemon-p99-ms")
	}
	b.ReportMetric(0, "ns/op")
}

var attachRE = regexp.MustCompile(`msg="cni ADD" .* attach=([0-9.]+[µmn]?s)`)
