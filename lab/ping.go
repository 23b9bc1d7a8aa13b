package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// ErrNoReply is returned (wrapped, with the PingResult filled in) when Ping
// received no reply at all.
var ErrNoReply = errors.New("lab: ping: no reply")

// PingResult is what a ping run measured. RTT statistics are zero when no
// reply came back.
type PingResult struct {
	Transmitted int
	Received    int
	// Loss is the fraction of probes without a reply, 0..1.
	Loss float64
	// Min, Avg, Max and Mdev are from ping's summary line.
	Min, Avg, Max, Mdev time.Duration
	// P50, P90 and P99 are percentiles (nearest rank) of RTTs.
	P50, P90, P99 time.Duration
	// RTTs are the round-trip times of the replies, in arrival order.
	RTTs []time.Duration
}

// Ping runs iputils ping in namespace fromNS of lab l: count probes
// (at least 1) of size bytes of payload (0: ping's default of 56), 0.2 s
// apart, waiting up to 1 s for each reply. If no reply came back it returns
// the result and an error wrapping ErrNoReply.
func Ping(ctx context.Context, l *Lab, fromNS string, to netip.Addr, size int, count int) (PingResult, error) {
	count = max(count, 1)
	args := []string{"ping", "-n", "-c", strconv.Itoa(count), "-W", "1", "-i", "0.2"}
	if size > 0 {
		args = append(args, "-s", strconv.Itoa(size))
	}
	args = append(args, to.String())
	out, err := l.Exec(ctx, fromNS, args...)
	var ee *exec.ExitError
	r, perr := ParsePing(out)
	if perr != nil {
		if errors.As(err, &ee) && ee.ExitCode() == 2 && ctx.Err() == nil {
			// ping could not send at all (e.g. "connect: Network is
			// unreachable"): nothing came back.
			return PingResult{Loss: 1}, fmt.Errorf("%w from %s to %s: %s", ErrNoReply, fromNS, to, bytes.TrimSpace(out))
		}
		return r, errors.Join(err, perr)
	}
	if r.Received == 0 {
		return r, fmt.Errorf("%w from %s to %s (%d sent)", ErrNoReply, fromNS, to, r.Transmitted)
	}
	// ping exits 1 when some replies are missing: that is a result, not an
	// error; anything else is.
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return r, err
	}
	return r, nil
}

var (
	pingSummaryRE = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)
	pingRTTRE     = regexp.MustCompile(`(?:rtt|round-trip) min/avg/max(?:/mdev|/stddev)? = ([0-9.]+)/([0-9.]+)/([0-9.]+)(?:/([0-9.]+))? ms`)
	pingReplyRE   = regexp.MustCompile(`\bicmp_seq=\d+ .*\btime[=<]([0-9.]+) ms`)
)

// ParsePing parses the output of iputils ping (and the similar output of
// BusyBox ping). It fails if there is no statistics line.
func ParsePing(out []byte) (PingResult, error) {
	var r PingResult
	sawSummary := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Bytes()
		if m := pingReplyRE.FindSubmatch(line); m != nil {
			if d, ok := ms(m[1]); ok && !bytes.Contains(line, []byte("(DUP!)")) {
				r.RTTs = append(r.RTTs, d)
			}
			continue
		}
		if m := pingSummaryRE.FindSubmatch(line); m != nil {
			tx, err1 := strconv.Atoi(string(m[1]))
			rx, err2 := strconv.Atoi(string(m[2]))
			if err1 != nil || err2 != nil {
				return r, fmt.Errorf("lab: ping output: bad statistics line %q", line)
			}
			r.Transmitted, r.Received, sawSummary = tx, rx, true
			continue
		}
		if m := pingRTTRE.FindSubmatch(line); m != nil {
			r.Min, _ = ms(m[1])
			r.Avg, _ = ms(m[2])
			r.Max, _ = ms(m[3])
			r.Mdev, _ = ms(m[4])
		}
	}
	if !sawSummary {
		return r, errors.New("lab: ping output has no statistics line")
	}
	if r.Transmitted > 0 {
		r.Loss = 1 - float64(min(r.Received, r.Transmitted))/float64(r.Transmitted)
	}
	if len(r.RTTs) > 0 {
		s := slices.Clone(r.RTTs)
		slices.Sort(s)
		r.P50, r.P90, r.P99 = percentile(s, 50), percentile(s, 90), percentile(s, 99)
	}
	return r, nil
}

// ms parses a decimal number of milliseconds.
func ms(b []byte) (time.Duration, bool) {
	if len(b) == 0 {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0 || f > 1e9 || math.IsNaN(f) {
		return 0, false
	}
	return time.Duration(f * float64(time.Millisecond)), true
}

// percentile returns the nearest-rank p-th percentile of sorted s.
func percentile(s []time.Duration, p int) time.Duration {
	i := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(i, 1)-1]
}
