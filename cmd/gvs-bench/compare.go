package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/bench/compare"
	"github.com/gvswitch/gvs/bench/gen"
)

// compareCmd is `gvs-bench compare`.
func compareCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	out := fs.String("o", "", "write the JSON report to this file")
	plot := fs.String("plot", "", "write an SVG bar chart to this file")
	runs := fs.Int("runs", 3, "runs of each workload per dataplane (the median is reported)")
	dur := fs.Duration("t", 5*time.Second, "duration of each workload")
	dps := fs.String("dataplanes", "gvs,kernel,ovs,floor", "dataplanes to compare, comma-separated (floor: gvs's TAPs and vxlan0 without the switch, the bar of gvs's targets)")
	flows := fs.Int("flows", 64, "UDP flows in the pps workloads")
	blastThreads := fs.Int("blast-threads", 2, "sending threads of the frame blaster workloads")
	queues := fs.Int("queues", 1, "gvs-switchd queues: queues of each pod TAP and receive sockets of vxlan0, a worker each")
	readers := fs.Int("vxlan-readers", 0, "gvs-switchd vxlanReaders: receive sockets of vxlan0 (0: as -queues)")
	goMaxProcs := fs.Int("go-max-procs", 0, "gvs-switchd goMaxProcs: its Go processors (0: its default)")
	flowQueues := fs.Int("vxlan-flow-queues", 0, "gvs-switchd vxlanFlowQueues: receive sockets each vxlan0 reader drains in round robin (0: its default, 16; 1: off)")
	slice := fs.String("sched-slice", "", "gvs-switchd schedSlice: the scheduler time slice of its threads while the CPUs are busy (\"\": its default, 100us; 0: the kernel's)")
	sliceWhen := fs.String("sched-slice-when", "", "gvs-switchd schedSliceWhen: busy (\"\") or always")
	busyPoll := fs.String("busy-poll", "", "gvs-switchd busyPoll: how long its readers may poll an empty queue before they sleep, such as 50us (\"\": its default, 50us; 0: off)")
	engine := fs.String("io-engine", "auto", "gvs-switchd ioEngine: how pod TAPs move frames (auto, uring, uring-always, tap)")
	prefix := fs.String("prefix", "gvc", "namespace prefix (at most 6 characters)")
	ct := fs.Bool("conntrack", false, "add the connection-tracking rows (a stateful rule set on every dataplane: TCP 1 stream, new connections/s)")
	ctOnly := fs.Bool("conntrack-only", false, "run only TCP 1 stream and the connection-tracking rows")
	netpolN := fs.Int("netpol-policies", compare.NetpolPolicies, "policies of the networkpolicy row")
	netpolOnly := fs.Bool("netpol-only", false, "run only TCP 1 stream and the networkpolicy row")
	blastOnly := fs.Bool("blast-only", false, "run only the frame blaster rows: UDP 64 B and 1400 B flat out and without loss (the packet rates)")
	cpuRate := fs.Int("cpu-rate", 0, "with -blast-only or not: add the rows of the dataplane's CPU µs per frame while the blaster offers this many 64 B (1400 B) frames/s (0: none)")
	cpuOnly := fs.Bool("cpu-only", false, "with -blast-only and -cpu-rate: run only the CPU per frame rows")
	tcp1Only := fs.Bool("tcp1-only", false, "run only TCP 1 stream (a smoke run of the harness)")
	rttOnly := fs.Bool("rtt-only", false, "run only TCP 1 stream and the round-trip rows")
	netpol := fs.Bool("netpol", false, "add the networkpolicy row: gvs TCP 1 stream in the networkpolicy mode with 100 policies (a cluster of its own with gvs-master)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	bin, err := labBinDir("compare")
	if err != nil {
		return err
	}
	cfg := compare.Config{
		BinDir:             bin,
		Dataplanes:         strings.Split(*dps, ","),
		Runs:               *runs,
		Duration:           *dur,
		Prefix:             *prefix,
		Flows:              *flows,
		BlastThreads:       *blastThreads,
		GVSQueues:          *queues,
		GVSVXLANReaders:    *readers,
		GVSVXLANFlowQueues: *flowQueues,
		GVSGoMaxProcs:      *goMaxProcs,
		GVSIOEngine:        *engine,
		GVSSchedSlice:      *slice,
		GVSSchedSliceWhen:  *sliceWhen,
		GVSBusyPoll:        *busyPoll,
		Conntrack:          *ct || *ctOnly,
		ConntrackOnly:      *ctOnly,
		NetworkPolicy:      *netpol,
		NetworkPolicyOnly:  *netpolOnly,
		NetpolPolicies:     *netpolN,
		TCP1Only:           *tcp1Only,
		RTTOnly:            *rttOnly,
		BlastOnly:          *blastOnly,
		CPURate:            *cpuRate,
		CPUOnly:            *cpuOnly,
		Progress:           os.Stderr,
	}
	rep, err := compare.Run(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Commit = gitCommit()
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	fmt.Println()
	if err := compare.WriteTargets(os.Stdout, compare.CheckTargets(rep)); err != nil {
		return err
	}
	if err := writeJSON(*out, rep); err != nil {
		return err
	}
	if *plot != "" {
		var b bytes.Buffer
		if err := rep.WriteSVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(*plot, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// labBinDir checks that cmd runs as root (it creates network namespaces)
// and returns the directory of this executable, where the other binaries
// are.
func labBinDir(cmd string) (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s needs root: it creates network namespaces", cmd)
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Dir(self), nil
}

// gitCommit is the short commit of the working directory's tree, or "".
func gitCommit() string {
	c, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(c))
}

// writeJSON writes v, indented, to path ("": nothing).
func writeJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// udpTool runs the udp-sink, udp-send, udp-echo and udp-probe commands,
// which print one JSON line with their result.
func udpTool(ctx context.Context, name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	listen := fs.String("l", ":9000", "listen address (udp-sink, udp-echo)")
	addr := fs.String("c", "", "destination host:port (udp-send, udp-probe)")
	dur := fs.Duration("t", 5*time.Second, "how long to run")
	size := fs.Int("size", 64, "frame size on the wire, 64..9000 (udp-send)")
	flows := fs.Int("flows", 1, "flows: distinct source ports (udp-send)")
	rate := fs.Int("rate", 0, "packets per second, 0: as fast as possible (udp-send)")
	gso := fs.Int("gso", 0, fmt.Sprintf("datagrams per UDP GSO send (UDP_SEGMENT), 2..%d; 0: none (udp-send)", gen.MaxGSO))
	count := fs.Int("n", 1000, "probes (udp-probe)")
	interval := fs.Duration("i", time.Millisecond, "probe interval (udp-probe)")
	ready := fs.String("ready", "", "file to create once listening (udp-sink, udp-echo)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var res any
	switch name {
	case "udp-sink", "udp-echo":
		la, err := net.ResolveUDPAddr("udp4", *listen)
		if err != nil {
			return err
		}
		conn, err := net.ListenUDP("udp4", la)
		if err != nil {
			return err
		}
		defer conn.Close()
		if *ready != "" {
			if err := os.WriteFile(*ready, nil, 0o644); err != nil {
				return err
			}
		}
		tctx, cancel := context.WithTimeout(ctx, *dur)
		defer cancel()
		if name == "udp-echo" {
			return gen.Echo(tctx, conn)
		}
		if res, err = gen.Sink(tctx, conn); err != nil {
			return err
		}
	case "udp-send":
		r, err := gen.Send(ctx, gen.FlowConfig{Addr: *addr, Frame: *size, Flows: *flows, Rate: *rate, Duration: *dur, GSO: *gso})
		if err != nil {
			return err
		}
		res = r
	case "udp-probe":
		r, err := gen.Probe(ctx, gen.ProbeConfig{Addr: *addr, Count: *count, Interval: *interval})
		if err != nil {
			return err
		}
		res = r
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
