package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gvswitch/gvs/lab"
)

// StopDaemon stops node i's gvs-switchd as an upgrade does (SIGTERM, then
// SIGKILL after lab.StopTimeout) and waits until it has ended. The pods'
// interfaces stay (their TAPs are persistent). StartDaemon starts it again.
func (c *Cluster) StopDaemon(i int) error {
	n := &c.Nodes[i]
	if n.proc == nil {
		return fmt.Errorf("cluster: node %s runs no gvs-switchd", n.Name)
	}
	return n.proc.Stop()
}

// KillDaemon ends node i's gvs-switchd with SIGKILL, as a crash would, and
// waits until it has ended. The signal goes to the PID the cluster started
// (`ip netns exec` execs the daemon, so it is the daemon's), and is not
// sent once the process is known to have ended (the window between that
// check and the signal is not closed: lab.Proc keeps its pidfd private).
func (c *Cluster) KillDaemon(i int) error {
	n := &c.Nodes[i]
	if n.proc == nil {
		return fmt.Errorf("cluster: node %s runs no gvs-switchd", n.Name)
	}
	if !n.proc.Exited() {
		if err := syscall.Kill(n.proc.PID, syscall.SIGKILL); err != nil {
			return fmt.Errorf("cluster: kill gvs-switchd %d on %s: %w", n.proc.PID, n.Name, err)
		}
	}
	select {
	case <-n.proc.Done():
		return nil
	case <-time.After(lab.StopTimeout):
		return fmt.Errorf("cluster: gvs-switchd %d on %s did not end after SIGKILL", n.proc.PID, n.Name)
	}
}

// StartDaemon starts node i's gvs-switchd again, with the same
// configuration, after StopDaemon or KillDaemon, and waits until it
// answers on its control socket.
func (c *Cluster) StartDaemon(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("cluster: gvs-switchd %d on %s is still running", n.proc.PID, n.Name)
	}
	log := filepath.Join(c.Lab.StateDir(), n.Name+".log")
	var err error
	n.proc, err = c.Lab.Start(ctx, n.NS, log, filepath.Join(c.Spec.BinDir, "gvs-switchd"), "-config", n.Config)
	if err != nil {
		return err
	}
	return c.waitReady(ctx, i)
}

// HandoffSocket is node i's gvs-switchd handoff socket (a live upgrade,
// UpgradeDaemon).
func (c *Cluster) HandoffSocket(i int) string {
	return filepath.Join(c.Lab.StateDir(), c.Nodes[i].Name+"-handoff", "handoff.sock")
}

// UpgradeDaemon upgrades node i's gvs-switchd live: it starts a new one
// while the old one runs, which hands its devices, sockets and state over
// (internal/daemon's handoff.go) and exits; UpgradeDaemon waits for the
// old one to end and the new one to answer on its control socket. It
// fails if the old one does not end within lab.StopTimeout (the new one,
// which then could not take over, is stopped).
func (c *Cluster) UpgradeDaemon(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	old := n.proc
	if old == nil || old.Exited() {
		return fmt.Errorf("cluster: node %s runs no gvs-switchd to upgrade", n.Name)
	}
	log := filepath.Join(c.Lab.StateDir(), n.Name+".log")
	next, err := c.Lab.Start(ctx, n.NS, log, filepath.Join(c.Spec.BinDir, "gvs-switchd"), "-config", n.Config)
	if err != nil {
		return err
	}
	select {
	case <-old.Done():
	case <-next.Done():
		return fmt.Errorf("cluster: the new gvs-switchd on %s exited while taking over (see %s)", n.Name, log)
	case <-time.After(lab.StopTimeout):
		_ = next.Stop()
		return fmt.Errorf("cluster: the old gvs-switchd %d on %s did not hand over and exit within %v", old.PID, n.Name, lab.StopTimeout)
	}
	n.proc = next
	return c.waitReady(ctx, i)
}

// UpgradeDaemonWaiting is UpgradeDaemon for a node whose running daemon
// was started with "afterHandoff": "wait", as the DaemonSet runs it: the
// old daemon stays, idle, after handing over, until it gets SIGTERM (the
// controller deleting the old pod). It waits for the old daemon to log
// the handoff, then stops it with SIGTERM and waits for it to end.
func (c *Cluster) UpgradeDaemonWaiting(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	old := n.proc
	if old == nil || old.Exited() {
		return fmt.Errorf("cluster: node %s runs no gvs-switchd to upgrade", n.Name)
	}
	log := filepath.Join(c.Lab.StateDir(), n.Name+".log")
	const line = "handed over to a successor; waiting for SIGTERM"
	before := countInFile(log, line)
	next, err := c.Lab.Start(ctx, n.NS, log, filepath.Join(c.Spec.BinDir, "gvs-switchd"), "-config", n.Config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(lab.StopTimeout)
	for countInFile(log, line) == before {
		switch {
		case old.Exited():
			_ = next.Stop()
			return fmt.Errorf("cluster: the old gvs-switchd %d on %s exited instead of waiting (see %s)", old.PID, n.Name, log)
		case next.Exited():
			return fmt.Errorf("cluster: the new gvs-switchd on %s exited while taking over (see %s)", n.Name, log)
		case time.Now().After(deadline):
			_ = next.Stop()
			return fmt.Errorf("cluster: the old gvs-switchd %d on %s did not hand over within %v", old.PID, n.Name, lab.StopTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.proc = next
	if err := old.Stop(); err != nil {
		return fmt.Errorf("cluster: stopping the old gvs-switchd %d: %w", old.PID, err)
	}
	return c.waitReady(ctx, i)
}

func countInFile(name, s string) int {
	b, _ := os.ReadFile(name)
	return strings.Count(string(b), s)
}
