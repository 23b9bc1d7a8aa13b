package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvswitch/gvs/internal/control"
	"github.com/gvswitch/gvs/internal/flagargs"
)

const captureUsage = `usage: gvsctl capture PORT -w FILE [-c COUNT] [-G DURATION] [-d in|out|both] [--snaplen N]

Captures the frames the switch reads from (in) and writes to (out) PORT and
writes them to FILE as a pcap file (Ethernet, nanosecond timestamps) that
tcpdump, Wireshark and tshark read. PORT is a port number, a port name
(vxlan0, tun0, gvs1000) or a pod name. -w - writes to standard output:
  gvsctl capture vxlan0 -w - | tcpdump -nr -
On vxlan0 each frame carries the outer IPv4/UDP/VXLAN headers vxlan0 gives
it on the wire: node addresses, UDP ports and VNI as sent and received
(the MACs, IP ID and UDP checksum are the kernel's, not shown). The capture runs
until COUNT frames, DURATION, or Ctrl-C; then it prints how many frames
were captured and how many the switch had to drop because the reader
fell behind (it never slows the datapath down).

`

// captureCmd runs "gvsctl capture".
func captureCmd(ctx context.Context, socket string, jsonOut bool, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("w", "", "write the capture to `FILE` (- for standard output)")
	count := fs.Int("c", 0, "stop after `COUNT` frames")
	var dur time.Duration
	fs.DurationVar(&dur, "G", 0, "stop after `DURATION` (e.g. 10s)")
	fs.DurationVar(&dur, "duration", 0, "same as -G")
	dir := fs.String("d", "both", "direction seen from the switch: in, out or both")
	snap := fs.Int("snaplen", 0, "keep at most `N` bytes per frame (default 262144)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), captureUsage); fs.PrintDefaults() }
	pos, err := flagargs.Parse(fs, args) // flags may come before or after PORT
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		fs.Usage()
		return fmt.Errorf("capture takes one PORT, not %q and %q", pos[0], pos[1])
	}
	var port string
	if len(pos) == 1 {
		port = pos[0]
	}
	if port == "" || *file == "" {
		fs.Usage()
		return errors.New("capture needs a PORT and -w FILE")
	}
	req := control.CaptureRequest{Port: port, Dir: *dir, Count: *count, Seconds: dur.Seconds(), Snaplen: *snap}

	// Ctrl-C is caught from before the capture starts: one that comes
	// as soon as the daemon has started it (a script that waits for the
	// daemon's capture and interrupts) must stop it cleanly, not kill
	// gvsctl before it wrote the file's header.
	sig, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var start control.CaptureStart
	s, err := control.Open(ctx, socket, control.Request{Command: "capture", Capture: &req}, &start)
	if err != nil {
		return err
	}
	defer s.Close()
	out := stdout
	if *file != "-" {
		f, err := os.OpenFile(*file, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	fmt.Fprintf(stderr, "capturing on port %d (%s), direction %s, snap length %d; Ctrl-C stops\n",
		start.Port, start.Name, start.Dir, start.Snaplen)

	// Ctrl-C asks the daemon to stop; it answers with the summary.
	go func() {
		<-sig.Done()
		_ = s.CloseWrite()
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	}()
	progress := isTerminal(stderr) && *file != "-"
	var total int64
	last := time.Now()
	var buf []byte
	for {
		typ, p, err := control.ReadChunk(s, buf)
		if err != nil {
			return fmt.Errorf("capture: %w (after %d bytes)", err, total)
		}
		buf = p[:0]
		if typ == control.ChunkEnd {
			if progress {
				fmt.Fprint(stderr, "\r\033[K")
			}
			var sum control.CaptureSummary
			if err := json.Unmarshal(p, &sum); err != nil {
				return fmt.Errorf("capture: bad summary: %w", err)
			}
			fmt.Fprintf(stderr, "%d frames captured, %d written, %d dropped by the switch (stopped: %s)\n",
				sum.Captured, sum.Written, sum.Dropped, sum.Reason)
			if jsonOut && *file != "-" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(sum)
			}
			return nil
		}
		if _, err := out.Write(p); err != nil {
			_ = s.CloseWrite()
			return fmt.Errorf("capture: writing %s: %w", *file, err)
		}
		total += int64(len(p))
		if progress && time.Since(last) > time.Second {
			fmt.Fprintf(stderr, "\r%d bytes written to %s", total, *file)
			last = time.Now()
		}
	}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
