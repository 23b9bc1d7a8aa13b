package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/testutil"
	"github.com/gvswitch/gvs/lab"
	"github.com/gvswitch/gvs/lab/cluster"
)

// TestConntrackSurvivesRestart: a long-lived TCP connection through a
// Service keeps working while gvs-switchd restarts. The connection's
// state is what makes it work: the node DNATs the ClusterIP to a backend
// on the same node, and only the tracker knows to send the backend's
// replies back through tun0 (docs/openshift-rules.md, "Services"). The
// daemon saves its table when it stops and the next one loads it. The
// negative control restarts the daemon with the saved table removed: the
// next connection's replies then go straight to the client, which drops
// them, and the transfer fails.
func TestConntrackSurvivesRestart(t *testing.T) {
	c := up(t, "ctr", cluster.Spec{
		Lab:  lab.Spec{Nodes: 1, PodsPerNode: 2, Projects: []string{"default"}, External: true},
		Mode: "subnet",
		CNI:  true,
	})
	n1 := c.Nodes[0]
	client, backend := n1.Pods[0], n1.Pods[1]
	bench := filepath.Join(binDir, "gvs-bench")
	srv, err := c.Lab.Start(ctx(t), backend.NS, filepath.Join(t.TempDir(), "srv.log"), bench, "tcp-server", "-l", ":5201")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	svc := netip.MustParseAddr("172.30.0.10")
	if err := c.ServiceDNAT(ctx(t), 0, svc, "tcp", 80, netip.AddrPortFrom(backend.IP, 5201)); err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(c.CNIStateDir(0), "conntrack.table")
	// iperf3 in reverse: the backend sends, so that after a restart the
	// first packet of the connection the switch sees is the backend's. The
	// client's packets would make the tracker take the connection up again
	// (it commits what comes back from the host mid-stream, as Linux's
	// conntrack picks up TCP), which would hide a lost table.
	if err := c.ServiceDNAT(ctx(t), 0, svc, "tcp", 81, netip.AddrPortFrom(backend.IP, 5202)); err != nil {
		t.Fatal(err)
	}
	iperf, err := c.Lab.Start(ctx(t), backend.NS, filepath.Join(t.TempDir(), "iperf.log"), "iperf3", "-s", "-p", "5202")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { iperf.Stop() })

	// stream has the backend send to the client through the service for d
	// and returns iperf3's report; restart runs while it sends.
	stream := func(d time.Duration, restart func()) (string, error) {
		cctx, cancel := context.WithTimeout(ctx(t), d+20*time.Second)
		defer cancel()
		type result struct {
			out []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := c.Lab.Exec(cctx, client.NS, "iperf3", "-c", svc.String(), "-p", "81", "-R",
				"-t", fmt.Sprint(int(d.Seconds())), "--connect-timeout", "3000", "--rcv-timeout", "4000")
			done <- result{out, err}
		}()
		time.Sleep(d / 4) // pacing: restart a quarter into the transfer
		restart()
		r := <-done
		return string(r.out), r.err
	}
	// The connection is through the service before anything restarts.
	var out string
	if !testutil.Eventually(10*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
		defer cancel()
		o, err := c.Lab.Exec(cctx, client.NS, bench, "tcp-client", "-c", svc.String()+":80", "-bytes", "100000")
		out = string(o)
		return err == nil && strings.Contains(out, "intact=true")
	}) {
		t.Fatalf("the service does not answer before the restart:\n%s", out)
	}

	t.Run("survives", func(t *testing.T) {
		out, err := stream(8*time.Second, func() {
			if err := c.RestartDaemon(ctx(t), 0); err != nil {
				t.Error(err)
			}
		})
		if err != nil || !strings.Contains(out, "receiver") {
			t.Errorf("the connection did not survive the restart: %v\n%s", err, out)
		}
		log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n1.Name+".log"))
		if !strings.Contains(string(log), "connections taken over from the last run") {
			t.Errorf("the daemon's log does not say it loaded the saved table")
		}
	})
	// A live upgrade hands the table over in memory (handoff.go): the
	// connection's state goes with it.
	t.Run("survives-handoff", func(t *testing.T) {
		out, err := stream(8*time.Second, func() {
			if err := c.UpgradeDaemon(ctx(t), 0); err != nil {
				t.Error(err)
			}
		})
		if err != nil || !strings.Contains(out, "receiver") {
			t.Errorf("the connection did not survive the live upgrade: %v\n%s", err, out)
		}
		log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n1.Name+".log"))
		if !regexp.MustCompile(`connections taken over from the running daemon" loaded=[1-9]`).Match(log) {
			t.Errorf("the daemon's log does not say it loaded connections from the running daemon")
		}
	})
	t.Run("negative-control", func(t *testing.T) {
		out, err := stream(8*time.Second, func() {
			if err := c.StopDaemon(0); err != nil {
				t.Error(err)
			}
			if err := os.Remove(saved); err != nil {
				t.Errorf("the stopped daemon saved no table: %v", err)
			}
			if err := c.StartDaemon(ctx(t), 0); err != nil {
				t.Error(err)
			}
		})
		if err == nil {
			t.Errorf("the connection survived a restart without its state: the test cannot tell\n%s", out)
		}
	})
	// A corrupt saved table is refused whole; the daemon starts empty and
	// forwards new connections.
	t.Run("corrupt-table", func(t *testing.T) {
		if err := c.StopDaemon(0); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(saved, []byte("not a table"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.StartDaemon(ctx(t), 0); err != nil {
			t.Fatal(err)
		}
		log, _ := os.ReadFile(filepath.Join(c.Lab.StateDir(), n1.Name+".log"))
		if !strings.Contains(string(log), "saved table refused") {
			t.Errorf("the daemon's log does not say it refused the corrupt table")
		}
		var out string
		if !testutil.Eventually(10*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx(t), 5*time.Second)
			defer cancel()
			o, err := c.Lab.Exec(cctx, client.NS, bench, "tcp-client", "-c", svc.String()+":80", "-bytes", fmt.Sprint(100000))
			out = string(o)
			return err == nil && strings.Contains(out, "intact=true")
		}) {
			t.Errorf("no new connection after a corrupt table:\n%s", out)
		}
	})
	t.Run("gvsctl", func(t *testing.T) {
		// dump-conntrack shows the service connections (committed in the
		// tun0 path with mark 1); flush-conntrack forgets them.
		done := make(chan struct{})
		go func() {
			defer close(done)
			cctx, cancel := context.WithTimeout(ctx(t), 20*time.Second)
			defer cancel()
			_, _ = c.Lab.Exec(cctx, client.NS, bench, "tcp-client", "-c", svc.String()+":80", "-t", "3s")
		}()
		var dump string
		if !testutil.Eventually(5*time.Second, func() bool {
			dump = ctl(t, c, 0, "dump-conntrack")
			return strings.Contains(dump, "dport=5201") && strings.Contains(dump, "mark=1")
		}) {
			t.Errorf("dump-conntrack does not show the service connection:\n%s", dump)
		}
		// The dump can show the connection while its SYN-ACK is still on
		// the way (syn_sent); established follows a moment later.
		var stats string
		if !testutil.Eventually(5*time.Second, func() bool {
			stats = ctl(t, c, 0, "conntrack-stats")
			return strings.Contains(stats, "tcp_established")
		}) {
			t.Errorf("conntrack-stats never shows the connection established:\n%s", stats)
		}
		<-done
		if out := ctl(t, c, 0, "flush-conntrack"); !strings.Contains(out, "flushed") {
			t.Errorf("flush-conntrack: %s", out)
		}
		if dump := ctl(t, c, 0, "dump-conntrack"); strings.Contains(dump, "dport=5201") {
			t.Errorf("connections left after flush-conntrack:\n%s", dump)
		}
		if _, err := c.Ctl(ctx(t), 0, "flush-conntrack", "ct_nw_src=10.0.0.1"); err == nil {
			t.Error("flush-conntrack accepted a tuple without ct_nw_dst and ct_nw_proto")
		}
	})
}
