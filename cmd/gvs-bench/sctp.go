package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gvswitch/gvs/bench/gen"
)

// sctpTool runs sctp-respond or sctp-probe (bench/gen's raw-socket SCTP
// INIT exchange).
func sctpTool(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	port := fs.Uint("port", 0, "port to answer (sctp-respond)")
	addr := fs.String("c", "", "destination IP:port (sctp-probe)")
	count := fs.Int("n", 10, "INITs to send (sctp-probe)")
	timeout := fs.Duration("timeout", 500*time.Millisecond, "how long to wait for each INIT ACK (sctp-probe)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cmd == "sctp-respond" {
		if *port == 0 || *port > 65535 {
			return errors.New("sctp-respond needs -port 1..65535")
		}
		return gen.SCTPRespond(ctx, uint16(*port))
	}
	ap, err := netip.ParseAddrPort(*addr)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("sctp-probe needs -c IPv4:port (%v)", err)
	}
	r, err := gen.SCTPProbe(ctx, ap, *count, *timeout)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// netpolTool runs netpol-serve or netpol-probe (bench/gen netpol_linux.go):
// the NetworkPolicy truth tables' server and prober.
func netpolTool(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	portList := fs.String("ports", "80,81", "ports to serve, comma-separated (netpol-serve)")
	timeout := fs.Duration("timeout", time.Second, "how long each try waits (netpol-probe)")
	tries := fs.Int("tries", 2, "tries per UDP or SCTP target; a TCP handshake gets tries × timeout (netpol-probe)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cmd == "netpol-serve" {
		var ports []uint16
		for _, s := range strings.Split(*portList, ",") {
			p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
			if err != nil || p == 0 {
				return fmt.Errorf("netpol-serve: port %q", s)
			}
			ports = append(ports, uint16(p))
		}
		return gen.NetpolServe(ctx, ports)
	}
	if fs.NArg() == 0 {
		return errors.New("netpol-probe needs targets PROTO/IP:PORT")
	}
	var targets []gen.NetpolTarget
	for _, a := range fs.Args() {
		t, err := gen.ParseNetpolTarget(a)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	got := gen.NetpolProbe(ctx, targets, *timeout, *tries)
	out := make(map[string]bool, len(targets))
	for i, t := range targets {
		out[t.String()] = got[i]
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
