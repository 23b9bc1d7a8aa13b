package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvswitch/gvs/internal/demo/netns"
	"github.com/gvswitch/gvs/lab"
)

// TestDemoNetns runs make demo's steps (the etcd mode) on a prefix of its
// own, checks what the demo observed (who reaches whom, the Service, NAT
// egress, throughput, multicast per project, live isolation), and that Down leaves no namespace,
// process or state directory behind.
func TestDemoNetns(t *testing.T) {
	t.Parallel() // its lab is its own (internal/e2e/doc.go)
	needRoot(t)
	const prefix = "gvsn-demo"
	t.Cleanup(func() { _ = netns.Down(prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	res, err := netns.Up(ctx, netns.Config{Prefix: prefix, Mode: netns.ModeEtcd, Out: &out, BinDir: binDir,
		ThroughputTime: time.Second}) // the number is not what the test is about
	t.Logf("demo up took %v; output:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	switch {
	case errors.Is(err, netns.ErrChecks):
		t.Errorf("%v: %q", err, res.Problems) // the results below say more
	case err != nil:
		t.Fatal(err)
	}

	m := res.Reachability
	if len(m.Pods) != 6 {
		t.Fatalf("%d pods in the matrix, want 6", len(m.Pods))
	}
	sameAcross, otherRefused := 0, 0
	for i, a := range m.Pods {
		for j, b := range m.Pods {
			switch {
			case a.Node != b.Node && a.Project == b.Project:
				sameAcross++
				if !m.Got[i][j] {
					t.Errorf("%s → %s (both %s, on different nodes): not reached", a.Name, b.Name, a.Project)
				}
			case a.Project != b.Project && a.Project != "default" && b.Project != "default":
				otherRefused++
				if m.Got[i][j] {
					t.Errorf("%s (%s) → %s (%s): reached across projects", a.Name, a.Project, b.Name, b.Project)
				}
			}
		}
	}
	if sameAcross == 0 || otherRefused == 0 {
		t.Errorf("the matrix has %d same-project pairs across nodes and %d cross-project pairs; want some of each", sameAcross, otherRefused)
	}
	if !res.Service.OwnReached || !res.Service.Own.Intact || res.Service.Own.Bytes == 0 {
		t.Errorf("the Service did not answer its own project: %+v", res.Service)
	}
	if !res.Service.OtherRefused {
		t.Errorf("the Service answered another project")
	}
	if g := res.Throughput.Gbps(); g <= 0 || !res.Throughput.Intact {
		t.Errorf("throughput %v Gbit/s, intact=%v; want > 0 and intact", g, res.Throughput.Intact)
	} else {
		t.Logf("throughput across nodes: %.3f Gbit/s", g)
	}
	if !strings.HasPrefix(res.Egress.SeenAs, res.EgressNode.String()+":") {
		t.Errorf("NAT egress: the external host saw %q, want the node %s", res.Egress.SeenAs, res.EgressNode)
	}
	if !res.ControlPlaneRefused {
		t.Errorf("a tenant pod got an answer from the registry")
	}
	if eip := res.EgressIP; !eip.IP.IsValid() || !strings.HasPrefix(eip.AlphaSeenAs, eip.IP.String()+":") {
		t.Errorf("egress IP: the external host saw %s (%s) as %q, want the egress IP %v", eip.Alpha.Name, eip.Alpha.Project, eip.AlphaSeenAs, eip.IP)
	} else if node := res.EgressNode.String(); !strings.HasPrefix(eip.BetaSeenAs, node+":") || !eip.BackToNode {
		t.Errorf("egress IP: %s (%s) seen as %q, want its node %s; back to the node's address after removal: %v",
			eip.Beta.Name, eip.Beta.Project, eip.BetaSeenAs, node, eip.BackToNode)
	}
	mc := res.Multicast
	if !mc.OffBefore || !mc.Disabled {
		t.Errorf("multicast: received before the opt-in or after the opt-out: %+v", mc)
	}
	sameOther := false
	for _, p := range mc.Received {
		if p.Project != mc.Sender.Project {
			t.Errorf("multicast: %s (%s) received %s's (%s)", p.Name, p.Project, mc.Sender.Name, mc.Sender.Project)
		}
		if p.Node != mc.Sender.Node {
			sameOther = true
		}
	}
	if !sameOther {
		t.Errorf("multicast: no pod of %s on the other node received: %+v", mc.Sender.Project, mc.Received)
	}
	otherProject := 0
	for _, p := range mc.NotReceived {
		if p.Project == mc.Sender.Project {
			t.Errorf("multicast: %s (%s) did not receive", p.Name, p.Project)
		} else {
			otherProject++
		}
	}
	if otherProject == 0 {
		t.Errorf("multicast: no receiver of another project to stay quiet: %+v", mc.NotReceived)
	}
	if iso := res.Isolation; !iso.BlockedBefore || !iso.Joined || !iso.Isolated {
		t.Errorf("live isolation: %+v", iso)
	}
	for _, s := range []string{"demo: all checks passed",
		"n2-p2 (alpha) on n2: received", "n2-p3 (beta) on n2: nothing (another project)",
		"gvsctl projects disable-multicast alpha (the demo leaves multicast off)", "Tear it down with:  " + filepath.Join(binDir, "gvs-demo") + " down -prefix " + prefix} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("the output lacks %q", s)
		}
	}

	pids := recordedPIDs(t, prefix)
	if len(pids) == 0 {
		t.Errorf("the demo recorded no processes")
	}
	if err := netns.Down(prefix); err != nil {
		t.Fatalf("Down: %v", err)
	}
	for pid, st := range pids {
		if running(pid, st) {
			t.Errorf("process %d still runs after Down", pid)
		}
	}
	ents, _ := os.ReadDir(lab.NetnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			t.Errorf("namespace %s left", e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(lab.StateRoot, prefix)); err == nil {
		t.Errorf("state directory %s left", filepath.Join(lab.StateRoot, prefix))
	}
}

// recordedPIDs reads the lab's pids file ("PID STARTTIME NS" lines):
// every process the demo started, by PID and start time.
func recordedPIDs(t *testing.T, prefix string) map[int]uint64 {
	t.Helper()
	f, err := os.Open(filepath.Join(lab.StateRoot, prefix, "pids"))
	if err != nil {
		t.Fatalf("the demo's pids: %v", err)
	}
	defer f.Close()
	pids := map[int]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var pid int
		var st uint64
		if _, err := fmt.Sscan(sc.Text(), &pid, &st); err == nil && pid > 1 {
			pids[pid] = st
		}
	}
	return pids
}

// running reports whether process pid with start time st (clock ticks
// after boot, /proc/PID/stat field 22) still runs and is not a zombie.
func running(pid int, st uint64) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')') // the command name may hold spaces
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	var start uint64
	if len(f) < 20 || f[0] == "Z" {
		return false
	}
	if _, err := fmt.Sscan(f[19], &start); err != nil {
		return false
	}
	return start == st
}
