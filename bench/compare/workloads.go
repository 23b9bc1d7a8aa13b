package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// Ports the workloads use inside the pods.
const (
	tcpPort   = 5201
	udpPort   = 9000
	echoPort  = 9001
	blastPort = 9002
	probeStep = time.Millisecond
	pingStep  = 2 * time.Millisecond
	// sparseStep is the sparse ping's interval: CPUs go idle in between.
	sparseStep = 200 * time.Millisecond
	// gsoDatagrams is the GSO sender's datagrams per send: 44 of 1358 B
	// fill one 64 KiB message and a gvs pod's gso_max_segs at MTU 1450.
	gsoDatagrams = 44
)

// env is one dataplane's running cluster. Traffic goes from node 0's pods
// to node 1's: pod 0 → pod 0 carries the load, pod 1 → pod 1 the probes.
type env struct {
	c   *cluster.Cluster
	cfg Config
	dp  string
	p   *progress
}

func (e *env) pods(k int) (src, dst cluster.Pod) {
	return e.c.Nodes[0].Pods[k], e.c.Nodes[1].Pods[k]
}

// warmUp pings across both pod pairs until replies come (learning, ARP).
func (e *env) warmUp(ctx context.Context) error {
	for k := range 2 {
		src, dst := e.pods(k)
		var err error
		for range 10 {
			if _, err = lab.Ping(ctx, e.c.Lab, src.NS, dst.IP, 0, 2); err == nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("no connectivity %s → %s: %w", src.Name, dst.IP, err)
		}
	}
	return nil
}

func (e *env) run(ctx context.Context, run int) (Metrics, error) {
	var m Metrics
	step := func(what string) { e.p.printf("%s run %d/%d: %s", e.dp, run, e.cfg.Runs, what) }
	src, dst := e.pods(0)
	var err error
	if e.cfg.BlastOnly {
		return m, e.blastRows(ctx, &m, src, dst, step)
	}

	step("TCP, 1 stream")
	before := e.cpu()
	if m.TCP1Gbps, err = e.tcp(ctx, src, dst, 1, e.cfg.Duration); err != nil {
		return m, err
	}
	after := e.cpu()
	if gbit := m.TCP1Gbps * e.cfg.Duration.Seconds(); gbit > 0 {
		m.CPUSecPerGbit = (after.busy - before.busy) / gbit
		m.DataplaneCPUSecPerGbit = (after.dataplane - before.dataplane) / gbit
	}
	if e.cfg.ConntrackOnly {
		return m, e.conntrack(ctx, &m, step)
	}
	if e.cfg.NetworkPolicyOnly || e.cfg.TCP1Only {
		return m, nil
	}
	if !e.cfg.RTTOnly {
		if err := e.throughput(ctx, &m, step); err != nil {
			return m, err
		}
	}
	psrc, pdst := e.pods(1)
	step("RTT (UDP probe and ping), idle")
	idle, ping, err := e.latency(ctx, psrc, pdst)
	if err != nil {
		return m, err
	}
	m.RTTIdleP50us, m.RTTIdleP99us = idle.P50us, idle.P99us
	m.RTTPingIdleP50us, m.RTTPingIdleP99us = us(ping.P50), us(ping.P99)
	step("RTT (ping, one request every 200 ms)")
	sparse, err := e.ping(ctx, psrc, pdst, sparseStep)
	if err != nil {
		return m, err
	}
	m.RTTPingSparseP50us, m.RTTPingSparseP99us = us(sparse.P50), us(sparse.P99)
	step("RTT (UDP probe and ping), under TCP load")
	var tcpErr error
	var wg sync.WaitGroup
	wg.Go(func() { _, tcpErr = e.tcp(ctx, src, dst, 1, e.cfg.Duration+time.Second) })
	time.Sleep(500 * time.Millisecond)
	load, lping, err := e.latency(ctx, psrc, pdst)
	wg.Wait()
	if err != nil {
		return m, err
	}
	if tcpErr != nil {
		return m, fmt.Errorf("load: %w", tcpErr)
	}
	m.RTTLoadP50us, m.RTTLoadP99us = load.P50us, load.P99us
	m.RTTPingLoadP50us, m.RTTPingLoadP99us = us(lping.P50), us(lping.P99)
	if e.cfg.Conntrack {
		return m, e.conntrack(ctx, &m, step)
	}
	return m, nil
}

// throughput runs the rows between TCP 1 stream and the round trips:
// TCP 4 streams, the UDP socket and blaster rows and the underlay's
// ceiling, all on pod pair 0.
func (e *env) throughput(ctx context.Context, m *Metrics, step func(string)) (err error) {
	src, dst := e.pods(0)
	step("TCP, 4 streams")
	if m.TCP4Gbps, err = e.tcp(ctx, src, dst, 4, e.cfg.Duration); err != nil {
		return err
	}
	step("UDP 64 B")
	if m.UDP64Kpps, m.UDP64Loss, err = e.udp(ctx, src, dst, 64); err != nil {
		return err
	}
	step("UDP 1400 B")
	if m.UDP1400Kpps, m.UDP1400Loss, err = e.udp(ctx, src, dst, 1400); err != nil {
		return err
	}
	step("UDP 1400 B, GSO sender")
	if m.UDP1400GSOKpps, m.UDP1400GSOLoss, err = e.udpGSO(ctx, src, dst, 1400, gsoDatagrams); err != nil {
		return err
	}
	if err = e.blastRows(ctx, m, src, dst, step); err != nil {
		return err
	}
	step("UDP 64 B, frame blaster: highest rate without loss, node to node on the underlay")
	if m.UDP64NoDropBareKpps, err = e.blastCeiling(ctx, 64); err != nil {
		return err
	}
	return nil
}

// conntrack runs the connection-tracking rows: the stateful rule set on
// both nodes, TCP 1 stream and short connections per second through it,
// and the rule set removed again. The floor has no rules: its rows are
// the same workloads without them, the least a stateful dataplane could
// cost.
func (e *env) conntrack(ctx context.Context, m *Metrics, step func(string)) (err error) {
	src, dst := e.pods(0)
	for i := range e.c.Nodes {
		if e.dp == cluster.DataplaneFloor {
			break
		}
		if err := e.c.StatefulRules(ctx, i, true); err != nil {
			return err
		}
	}
	defer func() {
		for i := range e.c.Nodes {
			if e.dp == cluster.DataplaneFloor {
				break
			}
			err = errors.Join(err, e.c.StatefulRules(ctx, i, false))
		}
	}()
	step("TCP, 1 stream, stateful rules")
	if m.TCP1CTGbps, err = e.tcp(ctx, src, dst, 1, e.cfg.Duration); err != nil {
		return err
	}
	step("new TCP connections per second, stateful rules")
	if m.ConnPerSecCT, err = e.connRate(ctx, src.NS, dst.NS, dst.IP, e.cfg.Duration); err != nil {
		return err
	}
	// The generator's ceiling: the same connections between the nodes'
	// own namespaces, over the underlay's veths and bridge, which neither
	// gvs nor the kernel dataplane touches (OVS's underlay runs through
	// its br-ul).
	step("new TCP connections per second, node to node on the underlay")
	n0, n1 := e.c.Nodes[0], e.c.Nodes[1]
	m.ConnPerSecBare, err = e.connRate(ctx, n0.NS, n1.NS, n1.IP, e.cfg.Duration)
	return err
}

// connRate measures short TCP connections per second from namespace
// srcNS to a conn-server on dstIP in namespace dstNS.
func (e *env) connRate(ctx context.Context, srcNS, dstNS string, dstIP netip.Addr, d time.Duration) (float64, error) {
	sctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	srv, err := e.c.Lab.Start(sctx, dstNS, filepath.Join(e.c.Lab.StateDir(), "conn-server.log"), e.bin(), "conn-server", "-l", ":"+strconv.Itoa(connPort))
	if err != nil {
		return 0, err
	}
	defer srv.Stop()
	var r gen.ConnRateResult
	for try := 0; try < 30; try++ {
		time.Sleep(100 * time.Millisecond)
		out, err := e.c.Lab.Exec(sctx, srcNS, e.bin(), "conn-rate", "-c", netip.AddrPortFrom(dstIP, connPort).String(),
			"-t", d.String(), "-workers", strconv.Itoa(connWorkers))
		if err = decode(out, err, &r); err == nil {
			return r.PerSec, nil
		}
		if !bytes.Contains(out, []byte("refused")) {
			return 0, fmt.Errorf("conn-rate %s → %s: %w", srcNS, dstIP, err)
		}
	}
	return 0, fmt.Errorf("conn-rate %s → %s: the server never listened", srcNS, dstIP)
}

// connPort is the conn-server's port in the conntrack rows.
const connPort = 5301

// connWorkers is how many connections conn-rate opens at a time: enough
// that the rate measures what a new connection costs the dataplane more
// than the round trips of one at a time.
const connWorkers = 16

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// tcp measures TCP throughput from src to dst with iperf3 if installed,
// else with gvs-bench's own tcp-client (one process per stream).
// blastRows measures the frame blaster rows from src to dst into m: UDP
// 64 B and 1400 B flat out, then the highest rate of each without loss.
func (e *env) blastRows(ctx context.Context, m *Metrics, src, dst cluster.Pod, step func(string)) error {
	var err error
	if e.cfg.CPURate > 0 {
		step(fmt.Sprintf("UDP 64 B and 1400 B at %d frames/s: dataplane CPU per frame", e.cfg.CPURate))
		if m.UDP64CPUus, err = e.cpuPerFrame(ctx, src, dst, 64); err != nil {
			return err
		}
		if m.UDP1400CPUus, err = e.cpuPerFrame(ctx, src, dst, 1400); err != nil {
			return err
		}
		if e.cfg.CPUOnly {
			return nil
		}
	}
	step("UDP 64 B, frame blaster")
	if m.UDP64BlastKpps, m.UDP64BlastOfferedKpps, m.UDP64BlastLoss, err = e.blast(ctx, src, dst, 64); err != nil {
		return err
	}
	step("UDP 1400 B, frame blaster")
	if m.UDP1400BlastKpps, m.UDP1400BlastOfferedKpps, m.UDP1400BlastLoss, err = e.blast(ctx, src, dst, 1400); err != nil {
		return err
	}
	step("UDP 64 B, frame blaster: highest rate without loss")
	if m.UDP64NoDropKpps, err = e.blastNoDrop(ctx, src, dst, 64, m.UDP64BlastOfferedKpps); err != nil {
		return err
	}
	step("UDP 1400 B, frame blaster: highest rate without loss")
	if m.UDP1400NoDropKpps, err = e.blastNoDrop(ctx, src, dst, 1400, m.UDP1400BlastOfferedKpps); err != nil {
		return err
	}
	return nil
}

// cpuPerFrame offers cfg.CPURate frames/s of the given size from src to
// dst for cfg.Duration and returns the CPU microseconds the dataplane's
// processes spent per delivered frame meanwhile.
func (e *env) cpuPerFrame(ctx context.Context, src, dst cluster.Pod, frame int) (float64, error) {
	before := e.cpu()
	kpps, _, loss, err := e.blastAt(ctx, podEnd(src), podEnd(dst), frame, e.cfg.CPURate, e.cfg.Duration)
	after := e.cpu()
	if err != nil {
		return 0, err
	}
	e.p.printf("    %d B at %.1f kpps: %.1f kpps delivered, %.2f %% lost, dataplane CPU %.2f s", frame, float64(e.cfg.CPURate)/1e3, kpps, 100*loss, after.dataplane-before.dataplane)
	frames := kpps * 1e3 * e.cfg.Duration.Seconds()
	if frames <= 0 {
		return 0, nil
	}
	return (after.dataplane - before.dataplane) / frames * 1e6, nil
}

func (e *env) tcp(ctx context.Context, src, dst cluster.Pod, streams int, d time.Duration) (float64, error) {
	if _, err := exec.LookPath("iperf3"); err == nil {
		return e.iperf3(ctx, src, dst, streams, d)
	}
	return e.ownTCP(ctx, src, dst, streams, d)
}

func (e *env) iperf3(ctx context.Context, src, dst cluster.Pod, streams int, d time.Duration) (float64, error) {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	sctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		_, _ = e.c.Lab.Exec(sctx, dst.NS, "iperf3", "-s", "-1", "-p", strconv.Itoa(tcpPort))
	}()
	defer func() { cancel(); <-srvDone }()
	var out []byte
	var err error
	for try := 0; try < 30; try++ {
		time.Sleep(100 * time.Millisecond)
		out, err = e.c.Lab.Exec(sctx, src.NS, "iperf3", "-c", dst.IP.String(), "-p", strconv.Itoa(tcpPort),
			"-P", strconv.Itoa(streams), "-t", strconv.Itoa(secs), "-J")
		// With -J, iperf3 3.12 reports a refused connection in its JSON
		// and may exit 0: look at the output, not the exit status.
		if !bytes.Contains(out, []byte("Connection refused")) {
			break
		}
	}
	var r struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if jerr := json.Unmarshal(out, &r); jerr != nil || r.Error != "" || err != nil {
		if err = errors.Join(err, jerr); err == nil {
			err = errors.New("iperf3 failed")
		}
		return 0, fmt.Errorf("iperf3 %s → %s: %w: %s", src.Name, dst.IP, err, firstLine(out, r.Error))
	}
	return r.End.SumReceived.BitsPerSecond / 1e9, nil
}

var gbpsRE = regexp.MustCompile(`([0-9.]+) Gbit/s, intact=true`)

func (e *env) ownTCP(ctx context.Context, src, dst cluster.Pod, streams int, d time.Duration) (float64, error) {
	sctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		_, _ = e.c.Lab.Exec(sctx, dst.NS, e.bin(), "tcp-server", "-l", fmt.Sprintf(":%d", tcpPort))
	}()
	defer func() { cancel(); <-srvDone }()
	time.Sleep(300 * time.Millisecond)
	total := make([]float64, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for s := range streams {
		wg.Go(func() {
			out, err := e.c.Lab.Exec(sctx, src.NS, e.bin(), "tcp-client", "-c", fmt.Sprintf("%s:%d", dst.IP, tcpPort), "-t", d.String())
			m := gbpsRE.FindSubmatch(out)
			if err != nil || m == nil {
				errs[s] = fmt.Errorf("tcp-client %s → %s: %w: %s", src.Name, dst.IP, err, firstLine(out, ""))
				return
			}
			total[s], _ = strconv.ParseFloat(string(m[1]), 64)
		})
	}
	wg.Wait()
	sum := 0.0
	for _, v := range total {
		sum += v
	}
	return sum, errors.Join(errs...)
}

// udp sends frames of the given size from src to dst as fast as the sender
// can for the configured duration, over cfg.Flows flows, and returns the
// delivered kpps and the loss fraction.
func (e *env) udp(ctx context.Context, src, dst cluster.Pod, frame int) (kpps, loss float64, err error) {
	return e.udpGSO(ctx, src, dst, frame, 0)
}

// udpGSO is udp with a sender that puts gso datagrams in each UDP_SEGMENT
// message (0: none).
func (e *env) udpGSO(ctx context.Context, src, dst cluster.Pod, frame, gso int) (kpps, loss float64, err error) {
	d := e.cfg.Duration
	var sink gen.SinkResult
	var sinkErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		out, err := e.c.Lab.Exec(ctx, dst.NS, e.bin(), "udp-sink", "-l", fmt.Sprintf(":%d", udpPort), "-t", (d + time.Second).String())
		sinkErr = decode(out, err, &sink)
	})
	time.Sleep(300 * time.Millisecond)
	var sent gen.SendResult
	out, err := e.c.Lab.Exec(ctx, src.NS, e.bin(), "udp-send", "-c", fmt.Sprintf("%s:%d", dst.IP, udpPort),
		"-size", strconv.Itoa(frame), "-flows", strconv.Itoa(e.cfg.Flows), "-gso", strconv.Itoa(gso), "-t", d.String())
	sendErr := decode(out, err, &sent)
	wg.Wait()
	if err := errors.Join(sendErr, sinkErr); err != nil {
		return 0, 0, fmt.Errorf("udp %d B %s → %s: %w", frame, src.Name, dst.IP, err)
	}
	if sent.Packets == 0 || sent.Duration <= 0 {
		return 0, 0, fmt.Errorf("udp %d B: nothing sent", frame)
	}
	kpps = float64(sink.Packets) / sent.Duration.Seconds() / 1e3
	loss = 1 - float64(min(sink.Packets, sent.Packets))/float64(sent.Packets)
	return kpps, loss, nil
}

// blast sends raw frames of the given size from src's eth0 to dst with the
// AF_PACKET frame blaster, as fast as it can for the configured duration
// over cfg.Flows flows, while blast-sink counts them on dst's eth0. It
// returns the delivered and offered kpps and the loss fraction. Frames the
// source interface refuses (the dataplane behind it is full) count as
// offered and lost.
func (e *env) blast(ctx context.Context, src, dst cluster.Pod, frame int) (kpps, offered, loss float64, err error) {
	return e.blastAt(ctx, podEnd(src), podEnd(dst), frame, 0, e.cfg.Duration)
}

// end is where the blaster sends from or to: a namespace whose eth0 has
// address IP.
type end struct {
	Name, NS string
	IP       netip.Addr
}

func podEnd(p cluster.Pod) end { return end{p.Name, p.NS, p.IP} }

func nodeEnd(n cluster.Node) end { return end{n.Name, n.NS, n.IP} }

// blastCeiling is the blaster's no-loss rate between the two nodes' own
// namespaces, over the underlay's veths and bridge: on gvs and kernel
// nodes no dataplane touches that path, so it is what the generator and
// the machine allow at all (on OVS nodes eth0 is a port of br-ul).
func (e *env) blastCeiling(ctx context.Context, frame int) (float64, error) {
	src, dst := nodeEnd(e.c.Nodes[0]), nodeEnd(e.c.Nodes[1])
	_, offered, _, err := e.blastAt(ctx, src, dst, frame, 0, min(e.cfg.Duration, searchTrial))
	if err != nil {
		return 0, err
	}
	return e.blastSearch(ctx, src, dst, frame, offered)
}

// blastAt is blast at a given rate (frames/s, 0: flat out) for d.
func (e *env) blastAt(ctx context.Context, src, dst end, frame, rate int, d time.Duration) (kpps, offered, loss float64, err error) {
	var sink gen.ReceiveResult
	var sinkErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		// The sink ends 0.5 s after the last frame, or 3 s after the
		// blast should have ended.
		out, err := e.c.Lab.Exec(ctx, dst.NS, e.bin(), "blast-sink", "-dev", "eth0", "-port", strconv.Itoa(blastPort),
			"-idle", "500ms", "-t", (d + 3*time.Second).String())
		sinkErr = decode(out, err, &sink)
	})
	time.Sleep(300 * time.Millisecond)
	var sent gen.BlastResult
	out, err := e.c.Lab.Exec(ctx, src.NS, e.bin(), "blast", "-dev", "eth0", "-dst", dst.IP.String(), "-dst-mac", "auto",
		"-port", strconv.Itoa(blastPort), "-size", strconv.Itoa(frame), "-flows", strconv.Itoa(e.cfg.Flows), "-threads", strconv.Itoa(e.cfg.BlastThreads), "-rate", strconv.Itoa(rate), "-t", d.String())
	sendErr := decode(out, err, &sent)
	wg.Wait()
	if err := errors.Join(sendErr, sinkErr); err != nil {
		return 0, 0, 0, fmt.Errorf("blast %d B %s → %s: %w", frame, src.Name, dst.IP, err)
	}
	if sent.Offered() == 0 || sent.Duration <= 0 {
		return 0, 0, 0, fmt.Errorf("blast %d B: nothing sent", frame)
	}
	got := min(sink.Delivered(), sent.Offered())
	secs := sent.Duration.Seconds()
	return float64(got) / secs / 1e3, float64(sent.Offered()) / secs / 1e3, 1 - float64(got)/float64(sent.Offered()), nil
}

// Throughput search of the blaster workloads.
const (
	// noDropLoss is the loss a trial may have and still pass: RFC 2544
	// asks for none, but on a shared 2-core machine a stray stall loses a
	// few frames at any rate.
	noDropLoss = 0.005
	// retryLoss is the most loss a failed trial may have and be tried
	// once more at the same rate: up to 5 % of a 1 s trial is a stall of
	// 50 ms, which a shared machine has now and then at any rate, and one
	// such stall must not halve the result. More loss than that is the
	// dataplane falling behind, and the rate fails at once.
	retryLoss = 0.05
	// searchRes ends the search once the highest passing and the lowest
	// failing rate are less than 1/searchRes of the latter apart.
	searchRes = 32
	// searchTrials bounds the trials of one search, retries included.
	searchTrials = 12
	searchTrial  = time.Second
)

// blastNoDrop searches the highest rate at which frames of the given size
// arrive with loss ≤ noDropLoss (RFC 2544 §26.1 throughput, bisection):
// the first trial offers the flat-out rate, paced; each next one halves the
// interval between the highest passing and the lowest failing rate. It
// returns the delivered kpps of the best passing trial (0 if none passed).
// Flat out, a sender can starve a userspace dataplane of CPU on a small
// machine; paced at this rate it leaves the dataplane what it needs.
func (e *env) blastNoDrop(ctx context.Context, src, dst cluster.Pod, frame int, flatOfferedKpps float64) (float64, error) {
	return e.blastSearch(ctx, podEnd(src), podEnd(dst), frame, flatOfferedKpps)
}

// blastSearch is blastNoDrop between any two ends; each trial's outcome
// goes to the progress log.
func (e *env) blastSearch(ctx context.Context, src, dst end, frame int, flatOfferedKpps float64) (float64, error) {
	d := min(e.cfg.Duration, searchTrial)
	return searchNoDrop(flatOfferedKpps*1e3, func(rate int) (float64, float64, error) {
		got, _, loss, err := e.blastAt(ctx, src, dst, frame, rate, d)
		if err == nil {
			e.p.printf("    %d B at %.1f kpps: %.1f kpps delivered, %.2f %% lost", frame, float64(rate)/1e3, got, 100*loss)
		}
		return got, loss, err
	})
}

// searchNoDrop is the search itself: trial(rate) offers rate frames/s and
// returns the delivered kpps and the loss fraction. A trial that fails by
// at most retryLoss is tried once more, and the rate passes if either
// trial did; the search bisects between 0 and flat (frames/s) until the
// interval is under 1/searchRes of its upper end or searchTrials trials
// have run, and returns the delivered kpps of the best passing trial.
func searchNoDrop(flat float64, trial func(rate int) (kpps, loss float64, err error)) (float64, error) {
	lo, hi := 0.0, flat
	rate, best := hi, 0.0
	for trials := 0; trials < searchTrials; {
		passed := false
		for try := 0; try < 2 && trials < searchTrials; try++ {
			got, loss, err := trial(max(int(rate), 1))
			trials++
			if err != nil {
				return 0, err
			}
			if loss <= noDropLoss {
				best, passed = max(best, got), true
				break
			}
			if loss > retryLoss {
				break
			}
		}
		if passed {
			if rate >= hi {
				break // passed at the flat-out rate: nothing higher to try
			}
			lo = rate
		} else {
			hi = rate
		}
		if hi-lo < hi/searchRes {
			break
		}
		rate = (lo + hi) / 2
	}
	return best, nil
}

// latency measures round trips from src to dst for the configured
// duration with the UDP prober (one probe a millisecond, to udp-echo) and,
// at the same time, ICMP echo (iputils ping, one every pingStep).
func (e *env) latency(ctx context.Context, src, dst cluster.Pod) (gen.LatencyResult, lab.PingResult, error) {
	var ping lab.PingResult
	var pingErr error
	var wg sync.WaitGroup
	wg.Go(func() { ping, pingErr = e.ping(ctx, src, dst, pingStep) })
	probe, err := e.probe(ctx, src, dst)
	wg.Wait()
	return probe, ping, errors.Join(err, pingErr)
}

// ping runs iputils ping from src to dst, one echo request every step for
// the configured duration but at least 10 (intervals under 0.2 s need
// root, which compare has), and parses every reply's time.
func (e *env) ping(ctx context.Context, src, dst cluster.Pod, step time.Duration) (lab.PingResult, error) {
	n := max(int(e.cfg.Duration/step), 10)
	out, err := e.c.Lab.Exec(ctx, src.NS, "ping", "-n", "-i", strconv.FormatFloat(step.Seconds(), 'f', -1, 64),
		"-c", strconv.Itoa(n), "-W", "1", dst.IP.String())
	r, perr := lab.ParsePing(out)
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		perr = errors.Join(err, perr) // exit 1: some replies missing, a result
	}
	if perr != nil {
		return r, fmt.Errorf("ping %s → %s: %w: %s", src.Name, dst.IP, perr, firstLine(out, ""))
	}
	if len(r.RTTs) == 0 {
		return r, fmt.Errorf("ping %s → %s: no reply to %d requests", src.Name, dst.IP, r.Transmitted)
	}
	return r, nil
}

// probe measures UDP round trips from src to an echo server on dst, one
// probe a millisecond for the configured duration.
func (e *env) probe(ctx context.Context, src, dst cluster.Pod) (gen.LatencyResult, error) {
	d := e.cfg.Duration
	ectx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	ready := filepath.Join(e.c.Lab.StateDir(), dst.Name+"-echo.ready")
	_ = os.Remove(ready)
	echoDone := make(chan struct{})
	wg.Go(func() {
		defer close(echoDone)
		_, _ = e.c.Lab.Exec(ectx, dst.NS, e.bin(), "udp-echo", "-l", fmt.Sprintf(":%d", echoPort), "-t", (d + 5*time.Second).String(), "-ready", ready)
	})
	// The probe starts once the echo server listens (on a loaded machine
	// that took more than the 300 ms once given: the first probes were
	// refused); if it never says so, the probe tells.
	waitFile(ctx, ready, echoDone, 5*time.Second)
	var r gen.LatencyResult
	out, err := e.c.Lab.Exec(ctx, src.NS, e.bin(), "udp-probe", "-c", fmt.Sprintf("%s:%d", dst.IP, echoPort),
		"-n", strconv.Itoa(int(d/probeStep)), "-i", probeStep.String())
	if err := decode(out, err, &r); err != nil {
		return r, fmt.Errorf("probe %s → %s: %w", src.Name, dst.IP, err)
	}
	if r.Received == 0 {
		return r, fmt.Errorf("probe %s → %s: no reply to %d probes", src.Name, dst.IP, r.Sent)
	}
	if r.Slow > 0 {
		e.p.printf("%s: probe %s → %s: %d of %d replies took %v or more (probes %d–%d), p99 %.0f µs",
			e.dp, src.Name, dst.IP, r.Slow, r.Received, gen.SlowRTT, r.SlowFirst, r.SlowLast, r.P99us)
	}
	return r, nil
}

func (e *env) bin() string { return filepath.Join(e.cfg.BinDir, "gvs-bench") }

// decode parses the last line of a tool's output as JSON into v.
func decode(out []byte, err error, v any) error {
	if err != nil {
		return fmt.Errorf("%w: %s", err, firstLine(out, ""))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), v); jerr != nil {
		return fmt.Errorf("bad output %q: %w", firstLine(out, ""), jerr)
	}
	return nil
}

func firstLine(out []byte, alt string) string {
	if alt != "" {
		return alt
	}
	s, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return s
}

// cpuSample is CPU time in seconds: the machine's busy time and the
// dataplane processes' time.
type cpuSample struct {
	busy, dataplane float64
}

// clockTick is USER_HZ, the unit of /proc/stat and /proc/PID/stat.
const clockTick = 100.0

func (e *env) cpu() cpuSample {
	var s cpuSample
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		// cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			if i == 4 || i == 5 {
				continue // idle, iowait
			}
			v, _ := strconv.ParseFloat(f[i], 64)
			s.busy += v / clockTick
		}
	}
	for i := range e.c.Nodes {
		for _, pid := range e.c.DataplanePIDs(i) {
			s.dataplane += procCPU(pid)
		}
	}
	return s
}

// procCPU returns the user+system CPU seconds of process pid (all its
// threads), or 0.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3; utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / clockTick
}

// waitFile waits until path exists, for at most timeout, or until done is
// closed or ctx ends.
func waitFile(ctx context.Context, path string, done <-chan struct{}, timeout time.Duration) {
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}
