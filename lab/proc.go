package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopTimeout is how long Proc.Stop waits after SIGTERM before SIGKILL.
const StopTimeout = 5 * time.Second

// Proc is a process started in a lab namespace by Lab.Start. Its methods are
// safe for concurrent use.
type Proc struct {
	// PID is the process id (of `ip netns exec`, which execs the command).
	PID int
	// NS is the namespace it runs in.
	NS string
	// Argv is the command line.
	Argv []string
	// LogFile receives its stdout and stderr.
	LogFile string

	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done is closed
	stop sync.Once
	serr error
}

// Start runs argv inside the lab namespace ns (`ip netns exec ns argv...`)
// in its own process group, with stdout and stderr appended to logFile
// (default: <StateDir>/<ns>-<command>.log). The process id is recorded in
// the state directory so that Destroy and DestroyPrefix can end it, even
// from another process. The process outlives ctx, which only bounds the
// start; it outlives the calling program too, until stopped.
func (l *Lab) Start(ctx context.Context, ns string, logFile string, argv ...string) (*Proc, error) {
	if !l.hasNS(ns) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNS, ns)
	}
	if len(argv) == 0 {
		return nil, errors.New("lab: start: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(l.StateDir(), 0o755); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	if logFile == "" {
		logFile = filepath.Join(l.StateDir(), ns+"-"+filepath.Base(argv[0])+".log")
	}
	f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lab: start: %w", err)
	}
	defer f.Close()
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lab: start %s in %s: %w", argv[0], ns, err)
	}
	p := &Proc{PID: cmd.Process.Pid, NS: ns, Argv: argv, LogFile: logFile, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := l.record(p); err != nil {
		_ = p.Stop()
		return nil, err
	}
	l.mu.Lock()
	l.procs = append(l.procs, p)
	l.mu.Unlock()
	return p, nil
}

// record appends "PID STARTTIME NS" to the pids file.
func (l *Lab) record(p *Proc) error {
	st, err := startTime(p.PID)
	if err != nil {
		return fmt.Errorf("lab: record pid %d: %w", p.PID, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(filepath.Join(l.StateDir(), pidsFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("lab: record pid: %w", err)
	}
	_, err = fmt.Fprintf(f, "%d %d %s\n", p.PID, st, p.NS)
	return errors.Join(err, f.Close())
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process to end and returns its exit status as
// exec.Cmd.Wait does.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM to the process, waits up to StopTimeout for it to end,
// then sends SIGKILL. It returns nil if the process is gone (whatever its
// exit status); calling it again returns the first result.
func (p *Proc) Stop() error {
	p.stop.Do(func() {
		// os.Process signals through a pidfd: never a reused pid.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			p.serr = fmt.Errorf("lab: stop %d: %w", p.PID, err)
			return
		}
		select {
		case <-p.done:
			return
		case <-time.After(StopTimeout):
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
			p.serr = fmt.Errorf("lab: kill %d: %w", p.PID, err)
			return
		}
		select {
		case <-p.done:
		case <-time.After(StopTimeout):
			p.serr = fmt.Errorf("lab: pid %d did not end after SIGKILL", p.PID)
		}
	})
	return p.serr
}

func stopAll(procs []*Proc) error {
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { errs[i] = p.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Exec runs argv inside the lab namespace ns and returns its combined
// output. ctx cancellation kills it.
func (l *Lab) Exec(ctx context.Context, ns string, argv ...string) ([]byte, error) {
	if !l.hasNS(ns) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownNS, ns)
	}
	if len(argv) == 0 {
		return nil, errors.New("lab: exec: empty command")
	}
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("lab: %s in %s: %w", strings.Join(argv, " "), ns, err)
	}
	return out, nil
}

// startTime returns the start time of process pid (field 22 of
// /proc/PID/stat, in clock ticks since boot), which with the pid identifies
// the process.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	st, _, err := parseStat(b)
	return st, err
}

// parseStat returns the start time and state of a /proc/PID/stat line.
func parseStat(b []byte) (start uint64, state byte, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, errors.New("bad /proc stat")
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	return start, f[0][0], err
}

// killRecorded ends the processes listed in dir's pids file that still run
// with the recorded start time: SIGTERM, up to StopTimeout, SIGKILL.
func killRecorded(dir string) error {
	f, err := os.Open(filepath.Join(dir, pidsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	defer f.Close()
	var errs []error
	var live []*os.Process
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var st uint64
		if _, err := fmt.Sscan(sc.Text(), &pid, &st); err != nil || pid <= 1 {
			continue
		}
		// FindProcess holds a pidfd from here on, so the check below and
		// the signals refer to the same process.
		p, err := os.FindProcess(pid)
		if err != nil {
			continue
		}
		if got, err := startTime(pid); err != nil || got != st {
			p.Release()
			continue
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			p.Release()
			if !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, fmt.Errorf("lab: stop %d: %w", pid, err))
			}
			continue
		}
		live = append(live, p)
	}
	deadline := time.Now().Add(StopTimeout)
	for len(live) > 0 {
		next := live[:0]
		for _, p := range live {
			if gone(p) {
				p.Release()
			} else {
				next = append(next, p)
			}
		}
		live = next
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, p := range live {
				if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					errs = append(errs, fmt.Errorf("lab: kill %d: %w", p.Pid, err))
				}
				p.Release()
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Join(errs...)
}

// gone reports whether a process that is not our child has ended (it may be
// a zombie waiting for its parent).
func gone(p *os.Process) bool {
	if err := p.Signal(syscall.Signal(0)); errors.Is(err, os.ErrProcessDone) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
	if err != nil {
		return true
	}
	_, state, err := parseStat(b)
	return err == nil && (state == 'Z' || state == 'X')
}
