package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gvswitch/gvs/bench/floor"
)

// upFloorNode starts node i on the floor dataplane (package bench/floor):
// gvs-bench floor in the node's namespace, with the node's pods, peers and
// the gvs-switchd settings of Spec that the floor shares (queues, vxlan0
// readers and flow queues, I/O engine, busy polling, time slice). It waits
// until the pods are attached.
func (c *Cluster) upFloorNode(ctx context.Context, i int) error {
	n := &c.Nodes[i]
	cfg := floor.Config{NodeIP: n.IP, Subnet: n.Subnet, ClusterNetwork: c.Spec.ClusterNetwork, ServiceNetwork: c.Spec.ServiceNetwork,
		Queues: c.Spec.Queues, VXLANReaders: c.Spec.VXLANReaders, FlowQueues: c.Spec.FlowQueues, IOEngine: c.Spec.IOEngine,
		BusyPoll: c.Spec.BusyPoll, SchedSlice: c.Spec.SchedSlice}
	for j, o := range c.Nodes {
		if j != i {
			cfg.Peers = append(cfg.Peers, floor.Peer{IP: o.IP, Subnet: o.Subnet})
		}
	}
	for _, p := range n.Pods {
		cfg.Pods = append(cfg.Pods, floor.Pod{Netns: p.NSPath, IP: p.IP})
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	conf := filepath.Join(c.Lab.StateDir(), n.Name+"-floor.json")
	ready := conf + ".ready"
	_ = os.Remove(ready)
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return err
	}
	log := filepath.Join(c.Lab.StateDir(), n.Name+".log")
	if n.proc, err = c.Lab.Start(ctx, n.NS, log, filepath.Join(c.Spec.BinDir, "gvs-bench"), "floor", "-config", conf, "-ready", ready); err != nil {
		return err
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return nil
		}
		if n.proc.Exited() || time.Now().After(deadline) {
			out, _ := os.ReadFile(log)
			return fmt.Errorf("cluster: the floor on %s did not come up\n--- its log ---\n%s", n.Name, out)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
