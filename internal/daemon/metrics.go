package daemon

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gvswitch/gvs/tap/uring"
	vswitch "github.com/gvswitch/gvs/vswitch"
	"github.com/gvswitch/gvs/vxlan"
)

// collector exports the switch's counters at scrape time; nothing on the
// data path knows about Prometheus.
type collector struct {
	d *Daemon

	rxPackets, rxBytes, txPackets, txBytes, rxDrops, txDrops *prometheus.Desc
	drops, tableDrops, rules, lookups, cacheHits, misses     *prometheus.Desc
	peers, pods, buildInfo                                   *prometheus.Desc
	tunnelDrops, captured, captureDrops, captures            *prometheus.Desc
	certExpiry, bufferReleases                               *prometheus.Desc
	rxBufferBytes, rxBufferBudget, rxBufferDenials           *prometheus.Desc
	rings                                                    *prometheus.Desc
	limitFrames, limitBytes, limitRate                       *prometheus.Desc
}

func newCollector(d *Daemon) *collector {
	port := []string{"port", "name"}
	return &collector{
		d:          d,
		rxPackets:  prometheus.NewDesc("gvs_port_rx_packets_total", "Frames read from the port.", port, nil),
		rxBytes:    prometheus.NewDesc("gvs_port_rx_bytes_total", "Bytes of frames read from the port.", port, nil),
		txPackets:  prometheus.NewDesc("gvs_port_tx_packets_total", "Frames written to the port.", port, nil),
		txBytes:    prometheus.NewDesc("gvs_port_tx_bytes_total", "Bytes of frames written to the port.", port, nil),
		rxDrops:    prometheus.NewDesc("gvs_port_rx_drops_total", "Frames read from the port and dropped.", port, nil),
		txDrops:    prometheus.NewDesc("gvs_port_tx_drops_total", "Frames that could not be written to the port.", port, nil),
		drops:      prometheus.NewDesc("gvs_drops_total", "Dropped frames by reason.", []string{"reason"}, nil),
		tableDrops: prometheus.NewDesc("gvs_flow_table_drops_total", "Frames dropped in each flow table (table 20: anti-spoofing).", []string{"table"}, nil),
		rules:      prometheus.NewDesc("gvs_flow_rules", "Rules installed in the flow table.", nil, nil),
		lookups:    prometheus.NewDesc("gvs_flow_lookups_total", "Pipeline lookups, cached or not.", nil, nil),
		cacheHits:  prometheus.NewDesc("gvs_flow_cache_hits_total", "Lookups answered by a worker's exact-match cache.", nil, nil),
		misses:     prometheus.NewDesc("gvs_flow_cache_misses_total", "Lookups that ran the full pipeline.", nil, nil),
		peers:      prometheus.NewDesc("gvs_tunnel_peers", "Remote nodes whose VXLAN is accepted.", nil, nil),
		pods:       prometheus.NewDesc("gvs_pods", "Pods attached to this node.", nil, nil),
		buildInfo:  prometheus.NewDesc("gvs_build_info", "Build information; the value is always 1.", []string{"version", "goversion"}, nil),
		tunnelDrops: prometheus.NewDesc("gvs_tunnel_drops_total",
			"VXLAN datagrams vxlan0 dropped before the pipeline, by reason.", []string{"reason"}, nil),
		captured: prometheus.NewDesc("gvs_capture_frames_total",
			"Frames copied by packet captures (gvsctl capture).", nil, nil),
		captureDrops: prometheus.NewDesc("gvs_capture_dropped_frames_total",
			"Frames packet captures lost because their reader fell behind.", nil, nil),
		captures: prometheus.NewDesc("gvs_captures_active", "Packet captures running.", nil, nil),
		bufferReleases: prometheus.NewDesc("gvs_buffer_releases_total",
			"Idle pod queues whose frame buffers' memory went back to the system (trimIdle).", nil, nil),
		rxBufferBytes: prometheus.NewDesc("gvs_rx_buffer_bytes",
			"Bytes of the receive-buffer budget (rxBufferBudgetMiB) the pod queues' receive buffers hold now.", nil, nil),
		rxBufferBudget: prometheus.NewDesc("gvs_rx_buffer_budget_bytes",
			"The receive-buffer budget (rxBufferBudgetMiB) in bytes; absent without a bound.", nil, nil),
		rxBufferDenials: prometheus.NewDesc("gvs_rx_buffer_denials_total",
			"Times a pod queue could not take another receive buffer because the budget was spent.", nil, nil),
		rings: prometheus.NewDesc("gvs_io_uring_rings",
			"io_uring rings the TAP queues (pods' and tun0's) hold now, by direction (a receive ring holds an OS thread too); absent without io_uring.",
			[]string{"direction"}, nil),
		limitFrames: prometheus.NewDesc("gvs_pod_bandwidth_frames_total",
			"Frames of a pod with a bandwidth limit, by direction (ingress: toward the pod, shaped; egress: from the pod, held back) and result: passed, delayed (ingress: queued, counted again as passed or dropped; egress: passed into debt, reading paused after them), dropped.",
			[]string{"port", "namespace", "pod", "direction", "result"}, nil),
		limitBytes: prometheus.NewDesc("gvs_pod_bandwidth_bytes_total",
			"Bytes of the frames gvs_pod_bandwidth_frames_total counts.",
			[]string{"port", "namespace", "pod", "direction", "result"}, nil),
		limitRate: prometheus.NewDesc("gvs_pod_bandwidth_limit_bytes_per_second",
			"A pod's bandwidth limit by direction; absent for a direction without one.",
			[]string{"port", "namespace", "pod", "direction"}, nil),
		certExpiry: prometheus.NewDesc("gvs_registry_certificate_expiry_timestamp_seconds",
			"When the certificate the node last presented to etcd expires (Unix time): alert well before it.", nil, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.rxPackets, c.rxBytes, c.txPackets, c.txBytes, c.rxDrops, c.txDrops,
		c.drops, c.tableDrops, c.rules, c.lookups, c.cacheHits, c.misses, c.peers, c.pods, c.buildInfo,
		c.tunnelDrops, c.captured, c.captureDrops, c.captures, c.certExpiry, c.bufferReleases,
		c.rxBufferBytes, c.rxBufferBudget, c.rxBufferDenials, c.rings, c.limitFrames, c.limitBytes, c.limitRate} {
		ch <- d
	}
}

// collectLimit exports a limited pod port's counters.
func (c *collector) collectLimit(ch chan<- prometheus.Metric, port string, pod Pod, ls *vswitch.LimitStats) {
	for _, d := range []struct {
		dir string
		bw  vswitch.Bandwidth
		lc  vswitch.LimitCounters
	}{{"ingress", ls.Limit.Ingress, ls.Ingress}, {"egress", ls.Limit.Egress, ls.Egress}} {
		if d.bw.Rate == 0 {
			continue
		}
		l := []string{port, pod.Project, pod.Name, d.dir}
		ch <- prometheus.MustNewConstMetric(c.limitRate, prometheus.GaugeValue, float64(d.bw.Rate), l...)
		for _, r := range []struct {
			result        string
			frames, bytes uint64
		}{{"passed", d.lc.PassedFrames, d.lc.PassedBytes}, {"delayed", d.lc.DelayedFrames, d.lc.DelayedBytes},
			{"dropped", d.lc.DroppedFrames, d.lc.DroppedBytes}} {
			ch <- prometheus.MustNewConstMetric(c.limitFrames, prometheus.CounterValue, float64(r.frames), append(l, r.result)...)
			ch <- prometheus.MustNewConstMetric(c.limitBytes, prometheus.CounterValue, float64(r.bytes), append(l, r.result)...)
		}
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	var podOf map[uint32]Pod // by port, made when a port has a limit
	for _, p := range c.d.dp.sw.Ports() {
		if p.Limit != nil {
			if podOf == nil {
				podOf = map[uint32]Pod{}
				for _, pod := range c.d.Pods() {
					podOf[pod.Port] = pod
				}
			}
			c.collectLimit(ch, strconv.FormatUint(uint64(p.No), 10), podOf[p.No], p.Limit)
		}
		l := []string{strconv.FormatUint(uint64(p.No), 10), p.Name}
		counter(c.rxPackets, p.Stats.RxPackets, l...)
		counter(c.rxBytes, p.Stats.RxBytes, l...)
		counter(c.txPackets, p.Stats.TxPackets, l...)
		counter(c.txBytes, p.Stats.TxBytes, l...)
		counter(c.rxDrops, p.Stats.RxDrops, l...)
		counter(c.txDrops, p.Stats.TxDrops, l...)
	}
	st := c.d.dp.sw.Stats()
	for r := vswitch.DropReason(0); r < vswitch.NumDropReasons; r++ {
		counter(c.drops, st.Drops[r], r.String())
	}
	for t, n := range st.TableDrops {
		if n > 0 {
			counter(c.tableDrops, n, strconv.Itoa(t))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.rules, prometheus.GaugeValue, float64(c.d.dp.table.Len()))
	counter(c.lookups, st.Lookups)
	counter(c.cacheHits, st.CacheHits)
	counter(c.misses, st.Lookups-st.CacheHits)
	counter(c.bufferReleases, st.BufferReleases)
	if b := c.d.dp.rxBudget; b != nil {
		ch <- prometheus.MustNewConstMetric(c.rxBufferBytes, prometheus.GaugeValue, float64(b.InUse()))
		ch <- prometheus.MustNewConstMetric(c.rxBufferBudget, prometheus.GaugeValue, float64(b.Total()))
		counter(c.rxBufferDenials, b.Denied())
	}
	if c.d.dp.usesUring() {
		rx, tx := uring.LiveRings()
		ch <- prometheus.MustNewConstMetric(c.rings, prometheus.GaugeValue, float64(rx), "receive")
		ch <- prometheus.MustNewConstMetric(c.rings, prometheus.GaugeValue, float64(tx), "transmit")
	}
	ch <- prometheus.MustNewConstMetric(c.peers, prometheus.GaugeValue, float64(len(c.d.dp.peers.List())))
	ch <- prometheus.MustNewConstMetric(c.pods, prometheus.GaugeValue, float64(len(c.d.Pods())))
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, Version(), runtime.Version())
	if c.d.dp.vx != nil {
		vs := c.d.dp.vx.Stats()
		for r := vxlan.DropReason(0); r < vxlan.NumDropReasons; r++ {
			counter(c.tunnelDrops, vs.Drops[r], r.String())
		}
	}
	ct := c.d.dp.sw.CaptureTotals()
	counter(c.captured, ct.Captured)
	counter(c.captureDrops, ct.Dropped)
	ch <- prometheus.MustNewConstMetric(c.captures, prometheus.GaugeValue, float64(ct.Active))
	if r := c.d.cp.registryInfo(); r != nil && !r.CertNotAfter.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.certExpiry, prometheus.GaugeValue, float64(r.CertNotAfter.Unix()))
	}
}

// cniMetrics holds the CNI request histogram; the zero value is ready.
type cniMetrics struct {
	once    sync.Once
	latency *prometheus.HistogramVec
}

func (m *cniMetrics) histogram() *prometheus.HistogramVec {
	m.once.Do(func() {
		m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gvs_cni_request_duration_seconds",
			Help: "Time gvs-switchd took to answer CNI requests, by verb and result (success or error).",
			// The target is ADD p99 ≤ 20 ms (docs/cni.md "Latency").
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"verb", "result"})
	})
	return m.latency
}

// observe records one CNI request (cniplugin.ServerConfig.Observe).
func (m *cniMetrics) observe(verb string, took time.Duration, err error) {
	switch verb { // a closed set of label values
	case "ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION":
	default:
		verb = "other"
	}
	result := "success"
	if err != nil {
		result = "error"
	}
	m.histogram().WithLabelValues(verb, result).Observe(took.Seconds())
}

// registry returns a registry with the daemon's metrics (an own registry,
// not the global one).
func (d *Daemon) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(d), d.cniMetrics.histogram(), newSubnetCollector(d.node), newCTCollector(d.dp))
	if d.dp.exporter != nil {
		reg.MustRegister(newIPFIXCollector(d.dp.exporter, &d.dp.ipfixLive))
	}
	return reg
}

// Version returns the module version gvs was built from, or "devel".
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// serveMetrics serves /metrics, and /healthz for a liveness probe (the
// DaemonSet's), on addr.
func (d *Daemon) serveMetrics(ctx context.Context, addr string) error {
	reg := d.registry()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	l, err := net.Listen("tcp", addr)
	for tries := 0; err != nil && d.up.tookOver && errors.Is(err, syscall.EADDRINUSE) && tries < 250 && ctx.Err() == nil; tries++ {
		// A live upgrade: the old daemon holds the address until it has
		// exited, a moment after the handoff (handoff.go).
		time.Sleep(20 * time.Millisecond)
		l, err = net.Listen("tcp", addr)
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
