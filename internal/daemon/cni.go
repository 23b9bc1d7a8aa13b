package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gvswitch/gvs/cniplugin"
	"github.com/gvswitch/gvs/internal/daemon/pods"
	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/tap"
)

// startCNI opens the leases, re-attaches the leased pods whose namespaces
// still exist and serves the CNI socket (Config.CNISocket) until ctx is
// done. Serving errors go to errc.
func (d *Daemon) startCNI(ctx context.Context, errc chan<- error) error {
	sock := d.cfg.CNISocket
	if sock == "" || sock == "off" {
		return nil
	}
	dir := d.cfg.StateDir
	n := d.node.prog.Node()
	if dir == "" {
		dir = filepath.Join("/var/lib/gvs", n.NodeName)
	}
	ipam, err := cniplugin.OpenIPAM(filepath.Join(dir, "ipam"), n.Subnet, CNIFirstPort)
	if ipam == nil {
		return fmt.Errorf("cni: %w", err)
	}
	if err != nil {
		d.log.Warn("cni: some lease files were ignored", "err", err)
	}
	d.node.mu.Lock()
	d.node.ipam = ipam
	d.node.mu.Unlock()
	pool := cniplugin.NewTapPool(d.cfg.TapPool, tap.Config{Offloads: d.dp.podOffloads(), MultiQueue: d.dp.podQueues() > 1, Logger: d.log}, d.log)
	var pooled *cniplugin.TapPool // nil: each TAP is made in its pod's namespace (faster, docs/cni.md)
	if d.cfg.TapPool > 0 {
		pooled = pool
	}
	be := pods.NewCNI(d.node.pods, pooled)
	scfg := cniplugin.ServerConfig{IPAM: ipam, Backend: be, Logger: d.log, Observe: d.cniMetrics.observe}
	if pb, ok := d.cp.src.(source.PodBandwidther); ok { // Kubernetes: the pods' bandwidth annotations
		scfg.PodBandwidth = pb.PodBandwidth
	}
	srv := cniplugin.NewServer(scfg)
	if err := d.up.inheritPods(); err != nil { // a live upgrade's TAP queues (handoff.go)
		pool.Close()
		return fmt.Errorf("cni: %w", err)
	}
	restoreStart := time.Now()
	st := srv.Restore(ctx)
	d.log.Info("cni: leases restored", "kept", st.Adopted, "recreated", st.Recreated, "netnsGone", st.NetnsGone,
		"failed", st.Failed, "took", time.Since(restoreStart).Round(time.Microsecond))
	idx := -1
	if d.up.inherit != nil {
		idx = d.up.inherit.st.CNIListener
	}
	l, err := d.listenLocal(sock, cniplugin.Listen, cniplugin.Refuse, idx, &d.up.listeners.cni)
	if err != nil {
		pool.Close()
		return err
	}
	go func() {
		errc <- srv.Serve(ctx, l)
		pool.Close()
	}()
	if err := d.installCNI(sock); err != nil {
		l.Close() // ends Serve
		return err
	}
	d.log.Info("cni: serving", "socket", sock, "leases", len(ipam.Leases()), "state", dir, "tapPool", d.cfg.TapPool)
	return nil
}
