package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"github.com/gvswitch/gvs/bench/traffic"
)

// transferRE matches the line gvs-bench tcp-client prints (cmd/gvs-bench):
//
//	sent N bytes in DURATION: G Gbit/s, intact=BOOL, seen as ADDR[ by NAME]
var transferRE = regexp.MustCompile(`(?m)^sent (\d+) bytes in (\S+): [0-9.]+ Gbit/s, intact=(true|false), seen as (\S+)(?: by (.*))?$`)

// ErrNoTransfer is returned by ParseTransfer when the output holds no
// tcp-client result line.
var ErrNoTransfer = errors.New("no tcp-client result in the output")

// ParseTransfer reads the result line of gvs-bench tcp-client from its
// output (other lines, such as errors, may surround it).
func ParseTransfer(out []byte) (traffic.Result, error) {
	m := transferRE.FindSubmatch(out)
	if m == nil {
		return traffic.Result{}, ErrNoTransfer
	}
	n, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return traffic.Result{}, fmt.Errorf("tcp-client bytes %q: %w", m[1], err)
	}
	d, err := time.ParseDuration(string(m[2]))
	if err != nil {
		return traffic.Result{}, fmt.Errorf("tcp-client duration %q: %w", m[2], err)
	}
	return traffic.Result{Bytes: n, Duration: d, Intact: string(m[3]) == "true", SeenAs: string(m[4]), Server: string(m[5])}, nil
}

// seenFrom reports whether seenAs, an address:port a server saw, is from
// addr.
func seenFrom(seenAs string, addr netip.Addr) bool {
	ap, err := netip.ParseAddrPort(seenAs)
	return err == nil && ap.Addr() == addr
}
