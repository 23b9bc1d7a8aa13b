package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
)

// blastCmd is `gvs-bench blast`: the AF_PACKET frame blaster. It prints
// its result as one JSON line on stdout and a summary on stderr.
func blastCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("blast", flag.ContinueOnError)
	dev := fs.String("dev", "eth0", "interface to send on")
	dst := fs.String("dst", "", "destination IPv4 address")
	dstMAC := fs.String("dst-mac", "auto", "destination MAC, or auto: the next hop's, from the neighbour table (ARP)")
	src := fs.String("src", "", "source IPv4 address (default: the route's)")
	port := fs.Uint("port", 9000, "UDP destination port")
	size := fs.Int("size", 64, "Ethernet frame size without FCS, 64..9000 and at most MTU+14")
	rate := fs.Int("rate", 0, "frames per second, 0: as fast as possible")
	flows := fs.Int("flows", 64, fmt.Sprintf("flows (source ports 10000...), 1..%d", gen.MaxFlows))
	threads := fs.Int("threads", 1, "sending threads, each with its own socket and share of rate and flows")
	dur := fs.Duration("t", 5*time.Second, "how long to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := gen.BlastConfig{Dev: *dev, Size: *size, Rate: *rate, Flows: *flows, Threads: *threads, Duration: *dur}
	var err error
	if cfg.Dst, err = netip.ParseAddr(*dst); err != nil {
		return fmt.Errorf("blast needs -dst IPv4: %w", err)
	}
	if *src != "" {
		if cfg.Src, err = netip.ParseAddr(*src); err != nil {
			return fmt.Errorf("blast -src: %w", err)
		}
	}
	if *dstMAC != "auto" {
		if cfg.DstMAC, err = net.ParseMAC(*dstMAC); err != nil {
			return fmt.Errorf("blast -dst-mac: %w", err)
		}
	}
	if *port == 0 || *port > 65535 {
		return fmt.Errorf("blast -port %d", *port)
	}
	cfg.DstPort = uint16(*port)
	b, err := gen.NewBlaster(cfg)
	if err != nil {
		return err
	}
	defer b.Close()
	r, err := b.Run(ctx)
	if err != nil {
		return err
	}
	s := b.Spec()
	fmt.Fprintf(os.Stderr, "blast %s → %s (%s), %d B × %d flows, %d threads: %d frames in %.2fs = %.1f kpps accepted, %.1f kpps offered (%d refused by the device), qdisc bypass %v\n",
		s.Src, s.Dst, net.HardwareAddr(s.DstMAC[:]), r.Size, r.Flows, r.Threads, r.Frames, r.Duration.Seconds(), r.PPS()/1e3, r.OfferedPPS()/1e3, r.Dropped, r.QdiscBypass)
	return printJSON(r)
}

// blastSinkCmd is `gvs-bench blast-sink`: the blaster's receiver.
func blastSinkCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("blast-sink", flag.ContinueOnError)
	dev := fs.String("dev", "eth0", "interface to count on")
	port := fs.Uint("port", 9000, "UDP destination port of the blast")
	dur := fs.Duration("t", 5*time.Second, "how long to count at most")
	idle := fs.Duration("idle", 0, "stop once frames came and none has for this long (0: count for -t)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *port == 0 || *port > 65535 {
		return fmt.Errorf("blast-sink -port %d", *port)
	}
	r, err := gen.NewReceiver(gen.ReceiverConfig{Dev: *dev, Port: uint16(*port), Idle: *idle})
	if err != nil {
		return err
	}
	defer r.Close()
	tctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	res, err := r.Run(tctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintf(os.Stderr, "blast-sink %s: %d frames delivered (%d read, %d dropped by this socket) over %.2fs, %d flows (%d..%d each)\n",
		*dev, res.Delivered(), res.Frames, res.SocketDrops, res.Active.Seconds(), res.Flows, res.FlowMin, res.FlowMax)
	return printJSON(res)
}

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
