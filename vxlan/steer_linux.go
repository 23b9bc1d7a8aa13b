//go:build linux

package vxlan

// Steering: which receive socket a datagram lands in.
//
// Flow queues (flowq_linux.go) keep a sparse flow out of a bulk flow's
// backlog only if the two land in different receive sockets. Left to the
// kernel, a datagram's socket is a secret hash of its outer addresses and
// ports, so two send sockets of a peer share a receive socket by chance
// (1 in N, N = Readers × FlowQueues sockets); with two flows of a peer
// sharing a send socket 1 in SendSockets as well, a sparse flow sat in a
// given bulk flow's socket in about 1 draw of 5 with 16 send sockets and 8
// flow queues (1/16 + 15/16 × 1/8), for as long as both daemons ran.
// (bench/results/history.md measured one such draw: a UDP probe's p99 of 14 ms
// under a TCP stream, against 2.3 ms for a ping beside it.)
//
// Two things together take the chance out:
//
//   - The send sockets are bound to consecutive ports, a block of
//     SendSockets ports aligned to its size inside the ephemeral port
//     range (bindTxBlock); send socket i leaves from base+i.
//   - The receive sockets' SO_REUSEPORT group runs a classic BPF program
//     (SO_ATTACH_REUSEPORT_CBPF, steerProgram) that picks socket
//     (outer UDP source port mod N).
//
// So send socket i of a gvs peer lands in receive socket (base+i) mod N:
// a peer's send sockets spread evenly over the receive sockets, and with
// SendSockets ≤ N no two share one. With several readers, reader r reads
// sockets r, r+Readers, r+2·Readers, … (initRx), so consecutive ports
// also go round the readers. A sparse flow then meets a given bulk
// flow of the same peer only when both hash to the same send socket (1 in
// SendSockets) — 1 in 16 with the defaults, for every cluster rather than
// on average — or to send sockets N apart if SendSockets > N. Flows of
// different peers, or from the kernel's vxlan (which picks a port per flow
// from its own range), still meet 1 in N, as before.
//
// Both halves fall back to what the kernel does on its own: if no free
// block is found the send sockets take ports from the kernel (one per
// socket, as bound to port 0), and a datagram the program cannot place (an
// IPv4 header with options) returns an index past the group, which makes
// the kernel use its hash. Neither changes which datagrams are accepted:
// the program only picks among the port's own sockets, and every datagram
// is still checked against Peers after it is read. (A host on the
// underlay can now aim a flood at one receive socket by its source port;
// it could always fill all of them by spraying ports, which costs it
// nothing more.)

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// skfNetOff is SKF_NET_OFF: classic BPF loads at skfNetOff+k read byte k
// of the network (IPv4) header.
const skfNetOff = 0xfff00000 // -0x100000 as the uint32 of a sock_filter's K

// steerProgram is the classic BPF program that puts a datagram into
// receive socket (outer UDP source port mod n): the reuseport group's
// socket with that index, in the order the sockets were bound. A
// datagram whose IPv4 header has options returns 0xffffffff, an index no
// group has, and the kernel falls back to its hash.
func steerProgram(n int) []unix.SockFilter {
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: skfNetOff},        // A = version and IHL
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 0x0f},            // A = IHL
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: 5, Jt: 0, Jf: 3}, // 20 bytes, no options?
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: skfNetOff + 20},   // A = UDP source port
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},       // A %= n
		{Code: unix.BPF_RET | unix.BPF_A},                                    // socket A
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffffffff},                     // the kernel's hash
	}
}

// steer attaches steerProgram to the reuseport group of socks (all of
// them, in bind order). The program's index is a position in the group,
// which holds the sockets in bind order only while none leaves it: the
// receive sockets are closed together (Close), never one at a time.
func steer(socks []rxSocket) error {
	prog := steerProgram(len(socks))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return socks[0].control(func(fd int) error {
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	})
}

// blockTries is how many random blocks bindTxBlock tries before it lets
// the kernel pick the ports.
const blockTries = 16

// openTxSockets opens n send sockets on local: on a block of consecutive
// ports if one is free (consecutive true), else on ports the kernel picks.
func openTxSockets(local [4]byte, n int) (socks []txSocket, consecutive bool, err error) {
	lo, hi, reserved := ephemeralPorts()
	bases := blockBases(lo, hi, n, reserved)
	rand.Shuffle(len(bases), func(i, j int) { bases[i], bases[j] = bases[j], bases[i] })
	for _, base := range bases[:min(len(bases), blockTries)] {
		// Any failure (a port in use, a port a cgroup hook or an LSM
		// refuses) moves on; what the kernel's own ports cannot do either
		// is the error below.
		if socks, err := bindTxBlock(local, base, n); err == nil {
			return socks, true, nil
		}
	}
	for range n {
		s, err := openTx(local, 0)
		if err != nil {
			closeTx(socks)
			return nil, false, err
		}
		socks = append(socks, s)
	}
	return socks, false, nil
}

// bindTxBlock opens n send sockets on ports base..base+n-1, or none.
func bindTxBlock(local [4]byte, base, n int) ([]txSocket, error) {
	socks := make([]txSocket, 0, n)
	for i := range n {
		s, err := openTx(local, base+i)
		if err != nil {
			closeTx(socks)
			return nil, err
		}
		socks = append(socks, s)
	}
	return socks, nil
}

func closeTx(socks []txSocket) {
	for _, s := range socks {
		s.f.Close()
	}
}

// blockBases returns the first ports of the blocks of n consecutive ports,
// aligned to n, that lie inside lo..hi and hold no reserved port.
func blockBases(lo, hi, n int, reserved [][2]int) []int {
	var out []int
	if n < 1 {
		return nil
	}
	for base := (lo + n - 1) / n * n; base+n-1 <= hi; base += n {
		free := true
		for _, r := range reserved {
			if r[0] <= base+n-1 && base <= r[1] {
				free = false
				break
			}
		}
		if free {
			out = append(out, base)
		}
	}
	return out
}

// ephemeralPorts reads the calling thread's network namespace's
// ephemeral port range and reserved ports (net.ipv4.ip_local_port_range
// and ip_local_reserved_ports); unreadable, it returns Linux's defaults
// and no reserved ports.
func ephemeralPorts() (lo, hi int, reserved [][2]int) {
	lo, hi = 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if l, h, err := parsePortRange(string(b)); err == nil {
			lo, hi = l, h
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_reserved_ports"); err == nil {
		if r, err := parseReservedPorts(string(b)); err == nil {
			reserved = r
		} else {
			// Not knowing which ports are reserved, take none.
			return lo, hi, [][2]int{{0, 65535}}
		}
	}
	return lo, hi, reserved
}

// parsePortRange parses ip_local_port_range: "low<whitespace>high".
func parsePortRange(s string) (lo, hi int, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("port range %q: want two numbers", s)
	}
	if lo, err = parsePort(f[0]); err != nil {
		return 0, 0, err
	}
	if hi, err = parsePort(f[1]); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("port range %q: low above high", s)
	}
	return lo, hi, nil
}

// parseReservedPorts parses ip_local_reserved_ports: comma-separated
// ports and ranges ("8080,9000-9100"), or nothing.
func parseReservedPorts(s string) ([][2]int, error) {
	var out [][2]int
	for _, item := range strings.Split(strings.TrimSpace(s), ",") {
		if item == "" {
			continue
		}
		l, h, ok := strings.Cut(item, "-")
		if !ok {
			h = l
		}
		lo, err := parsePort(l)
		if err != nil {
			return nil, err
		}
		hi, err := parsePort(h)
		if err != nil {
			return nil, err
		}
		if lo > hi {
			return nil, fmt.Errorf("reserved ports %q: low above high", item)
		}
		out = append(out, [2]int{lo, hi})
	}
	return out, nil
}

func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("port %q: not 0..65535", s)
	}
	return p, nil
}
