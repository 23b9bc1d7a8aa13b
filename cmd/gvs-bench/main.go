// Command gvs-bench is gvs's benchmark tool: it compares gvs with the kernel
// and Open vSwitch, runs A/B trials of gvs-switchd's settings, and carries the
// traffic tools the benchmarks, the demo (cmd/gvs-demo) and the tests run
// inside pods.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
	"github.com/gvswitch/gvs/bench/traffic"
)

const usage = `usage: gvs-bench COMMAND [ARGS]

commands:
  tcp-server -l ADDR [-name N]  TCP sink: greets each client with the address it sees (and its name N), answers with a CRC-32C
  tcp-client -c ADDR [-bytes N | -t DURATION]
                          send to a tcp-server, check the digest, print throughput and the address seen
  compare [-o FILE.json] [-plot FILE.svg] [-runs N] [-t DURATION] [-dataplanes gvs,kernel,ovs,floor]
          [-flows N] [-blast-threads T] [-queues Q] [-vxlan-readers R] [-vxlan-flow-queues F] [-io-engine E] [-conntrack | -conntrack-only | -rtt-only]
                          measure gvs, the kernel, Open vSwitch and the floor on the same topology (as root),
                          the dataplanes' runs interleaved, in another order each run:
                          TCP, UDP pps from sockets and from the frame blaster, UDP-probe and ping RTT
  check-targets [-strict] REPORT.json
                          the ratios of docs/targets.md of gvs to the floor, OVS and (-conntrack rows) the kernel in a compare report, and which
                          are met (-strict: fail if one is not)
  floor -config FILE [-ready FILE]
                          the floor dataplane of one node (run by compare inside the node's namespace):
                          gvs's TAPs and vxlan0 with a static map instead of the switch, until interrupted
  trials -setting NAME[={"field":"value"}] -setting ... [-trials N] [-t DURATION] [-o FILE.json]
                          A/B of gvs-switchd settings (as root): a fresh 2-node cluster per trial and
                          setting in rotating order; TCP alone, UDP-probe RTT idle and beside a TCP
                          stream; medians, and in how many trials each setting beat the first
  udp-sink -l ADDR -t D [-ready FILE]
                          count UDP datagrams for D, print JSON (FILE: created once listening)
  udp-send -c ADDR [-size B] [-flows N] [-rate PPS] [-gso N] -t D
                          send UDP frames of B bytes over N flows, print JSON
  udp-echo -l ADDR -t D [-ready FILE]
                          echo UDP datagrams for D (FILE: created once listening)
  udp-probe -c ADDR [-n N] [-i INTERVAL]
                          UDP round-trip prober against udp-echo, print percentiles as JSON
  conn-server -l ADDR     accept TCP connections, answer each with one byte and close it
  conn-rate -c ADDR [-t D] [-workers N]
                          open short connections to a conn-server for D, print connections/s as JSON
  dns-serve -l ADDR -records FILE
                          answer DNS A queries from a file of "name address" lines (the lab's
                          resolver for egress firewalls' DNS names), until interrupted
  sctp-respond -port P     answer SCTP INITs to port P with INIT ACKs over a raw IP socket
                          (no kernel SCTP needed), until interrupted
  sctp-probe -c ADDR [-n N] [-timeout D]
                          send N SCTP INITs to ADDR, count the INIT ACKs, print JSON
  netpol-serve [-ports 80,81]
                          serve TCP (accept), UDP (echo) and SCTP (INIT ACK) on the ports, until
                          interrupted: the NetworkPolicy truth tables' server
  netpol-probe [-timeout D] [-tries N] PROTO/IP:PORT...
                          probe every target at once (tcp, udp, sctp), print JSON target → answered
  blast -dev IF -dst IP [-dst-mac MAC|auto] [-size B] [-rate PPS] [-flows N] [-threads T] [-port P] -t D
                          AF_PACKET frame blaster (as root): raw Ethernet/IPv4/UDP frames of B bytes
                          (64..9000, at most MTU+14) over N flows from T threads, rate 0 = as fast as
                          possible, print JSON
  blast-sink -dev IF [-port P] [-idle D] -t D
                          count the blaster's frames arriving on IF per flow (AF_PACKET), print JSON
  registry-probe -c HOST:PORT
                          what a stranger gets from etcd: plain HTTP and TLS without a client
                          certificate; fails if either is answered
`

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gvs-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "compare":
		return compareCmd(ctx, args[1:])
	case "trials":
		return trialsCmd(ctx, args[1:])
	case "floor":
		return floorCmd(ctx, args[1:])
	case "check-targets":
		return checkTargetsCmd(args[1:])
	case "udp-sink", "udp-send", "udp-echo", "udp-probe":
		return udpTool(ctx, args[0], args[1:])
	case "conn-server", "conn-rate":
		return connTool(ctx, args[0], args[1:])
	case "sctp-respond", "sctp-probe":
		return sctpTool(ctx, args[0], args[1:])
	case "netpol-serve", "netpol-probe":
		return netpolTool(ctx, args[0], args[1:])
	case "dns-serve":
		fs := flag.NewFlagSet("dns-serve", flag.ContinueOnError)
		addr := fs.String("l", ":53", "UDP address to answer on")
		records := fs.String("records", "", "file of \"name address\" lines, read again for every query")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *records == "" {
			return errors.New("dns-serve needs -records FILE")
		}
		pc, err := net.ListenPacket("udp", *addr)
		if err != nil {
			return err
		}
		go func() { <-ctx.Done(); pc.Close() }()
		err = gen.DNSServe(pc, *records) // returns when pc is closed
		if ctx.Err() != nil {
			return nil
		}
		return err
	case "blast":
		return blastCmd(ctx, args[1:])
	case "blast-sink":
		return blastSinkCmd(ctx, args[1:])
	case "registry-probe":
		return registryProbe(ctx, args[1:])
	case "tcp-server":
		fs := flag.NewFlagSet("tcp-server", flag.ContinueOnError)
		addr := fs.String("l", ":5201", "listen address")
		name := fs.String("name", "", "a name for this server, which clients print (to tell a service's backends apart)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		l, err := net.Listen("tcp", *addr)
		if err != nil {
			return err
		}
		fmt.Println("listening on", l.Addr())
		return traffic.ServeNamed(ctx, l, *name, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	case "tcp-client":
		fs := flag.NewFlagSet("tcp-client", flag.ContinueOnError)
		addr := fs.String("c", "", "server address host:port")
		size := fs.Int64("bytes", 0, "bytes to send (0: send for -t)")
		dur := fs.Duration("t", 5*time.Second, "how long to send when -bytes is 0")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *addr == "" {
			return errors.New("tcp-client needs -c host:port")
		}
		cctx, cancel := context.WithTimeout(ctx, *dur+30*time.Second)
		defer cancel()
		r, err := traffic.Send(cctx, *addr, *size, *dur)
		if err != nil {
			return err
		}
		fmt.Printf("sent %d bytes in %v: %.3f Gbit/s, intact=%v, seen as %s", r.Bytes, r.Duration.Round(time.Microsecond), r.Gbps(), r.Intact, r.SeenAs)
		if r.Server != "" {
			fmt.Printf(" by %s", r.Server)
		}
		fmt.Println()
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
