// Package ovs runs Open vSwitch's userspace daemons inside a lab namespace
// (package lab), for the tests and benchmarks that use OVS as the
// reference: an ovsdb-server and an ovs-vswitchd of their own, with their
// database, sockets and logs in a directory of the caller's, never the
// host's /var/run/openvswitch. They are started through the lab, so that
// Lab.Destroy ends them by process id. lab/cluster builds its OVS nodes
// with it; conntrack/ctdiff compares gvs's connection tracking with OVS's.
package ovs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gvswitch/gvs/lab"
)

// Schema is the OVSDB schema Debian's openvswitch-switch installs.
const Schema = "/usr/share/openvswitch/vswitch.ovsschema"

// ErrMissing is returned (wrapped) when Open vSwitch is not installed.
var ErrMissing = errors.New("ovs: Open vSwitch is not installed (apt-get install openvswitch-switch)")

// Available reports, with an error wrapping ErrMissing, whether the Open
// vSwitch programs and schema Start needs are installed.
func Available() error {
	for _, p := range []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"} {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %v", ErrMissing, err)
		}
	}
	if _, err := os.Stat(Schema); err != nil {
		return fmt.Errorf("%w: %v", ErrMissing, err)
	}
	return nil
}

// Daemons are an ovsdb-server and an ovs-vswitchd running in namespace NS
// of a lab, with everything of theirs in Dir.
type Daemons struct {
	Lab   *lab.Lab
	NS    string
	Dir   string
	Procs []*lab.Proc // ovsdb-server, then ovs-vswitchd
}

// Start creates a database in dir (made if missing) and starts an
// ovsdb-server and an ovs-vswitchd on it in namespace ns of l. On failure
// the processes it started are stopped.
func Start(ctx context.Context, l *lab.Lab, ns, dir string) (_ *Daemons, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("ovs %s: %w", ns, err)
	}
	d := &Daemons{Lab: l, NS: ns, Dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Stop())
		}
	}()
	db := filepath.Join(dir, "conf.db")
	if out, err := exec.CommandContext(ctx, "ovsdb-tool", "create", db, Schema).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ovs %s: ovsdb-tool create: %w: %s", ns, err, out)
	}
	sock := filepath.Join(dir, "db.sock")
	p, err := l.Start(ctx, ns, filepath.Join(dir, "ovsdb-server.log"), d.Env(
		"ovsdb-server", db, "--remote=punix:"+sock,
		"--pidfile="+filepath.Join(dir, "ovsdb-server.pid"),
		"--unixctl="+filepath.Join(dir, "ovsdb-server.ctl"))...)
	if err != nil {
		return nil, err
	}
	d.Procs = append(d.Procs, p)
	if err := WaitFile(ctx, sock, p.Done()); err != nil {
		return nil, fmt.Errorf("ovs %s: ovsdb-server: %w (log %s)", ns, err, p.LogFile)
	}
	if _, err := d.Vsctl(ctx, "--no-wait", "init"); err != nil {
		return nil, err
	}
	p, err = l.Start(ctx, ns, filepath.Join(dir, "ovs-vswitchd.log"), d.Env(
		"ovs-vswitchd", "unix:"+sock,
		"--pidfile="+filepath.Join(dir, "ovs-vswitchd.pid"),
		"--unixctl="+filepath.Join(dir, "ovs-vswitchd.ctl"))...)
	if err != nil {
		return nil, err
	}
	d.Procs = append(d.Procs, p)
	if err := WaitFile(ctx, filepath.Join(dir, "ovs-vswitchd.ctl"), p.Done()); err != nil {
		return nil, fmt.Errorf("ovs %s: ovs-vswitchd: %w (log %s)", ns, err, p.LogFile)
	}
	return d, nil
}

// Env prefixes argv so that an OVS program uses only d's directory.
func (d *Daemons) Env(argv ...string) []string {
	return append([]string{"env", "OVS_RUNDIR=" + d.Dir, "OVS_DBDIR=" + d.Dir, "OVS_LOGDIR=" + d.Dir, "OVS_SYSCONFDIR=" + d.Dir}, argv...)
}

// run runs an OVS program in d's namespace with d's directory.
func (d *Daemons) run(ctx context.Context, prog string, args ...string) ([]byte, error) {
	out, err := d.Lab.Exec(ctx, d.NS, d.Env(append([]string{prog}, args...)...)...)
	if err != nil {
		return out, fmt.Errorf("ovs %s: %s %s: %w: %s", d.NS, prog, strings.Join(args, " "), err, out)
	}
	return out, nil
}

// Vsctl runs ovs-vsctl against d's database.
func (d *Daemons) Vsctl(ctx context.Context, args ...string) ([]byte, error) {
	return d.run(ctx, "ovs-vsctl", append([]string{"--timeout=20", "--db=unix:" + filepath.Join(d.Dir, "db.sock")}, args...)...)
}

// Ofctl runs ovs-ofctl against d's ovs-vswitchd (a bridge's management
// socket is in d's directory).
func (d *Daemons) Ofctl(ctx context.Context, args ...string) ([]byte, error) {
	return d.run(ctx, "ovs-ofctl", args...)
}

// Appctl runs ovs-appctl against d's ovs-vswitchd.
func (d *Daemons) Appctl(ctx context.Context, args ...string) ([]byte, error) {
	return d.run(ctx, "ovs-appctl", append([]string{"-t", filepath.Join(d.Dir, "ovs-vswitchd.ctl")}, args...)...)
}

// Stop ends the daemons, ovs-vswitchd first.
func (d *Daemons) Stop() error {
	var errs []error
	for i := len(d.Procs) - 1; i >= 0; i-- {
		if err := d.Procs[i].Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	d.Procs = nil
	return errors.Join(errs...)
}

// WaitFile waits up to 10 s for path to exist, or until done is closed.
func WaitFile(ctx context.Context, path string, done <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear", path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("process ended before %s appeared", path)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
