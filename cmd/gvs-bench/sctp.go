package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
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
