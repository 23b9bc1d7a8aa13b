package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn"
)

// Master is gvs-master's loop: it publishes the configuration, creates the
// default and global projects, and gives every registered node a subnet.
// Several masters may run at once: allocation is by compare-and-swap, so
// they never hand out a subnet twice. Subnet records live on the node's
// lease, so a node gone past its lease loses its subnet with it.
type Master struct {
	Reg    *Registry
	Config Config
	Log    *slog.Logger
}

// Run serves until ctx is done. It rebuilds everything it needs from the
// registry, so a restarted master simply carries on.
func (m *Master) Run(ctx context.Context) error {
	log := m.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := m.Reg.GetConfig(ctx); errors.Is(err, ErrNoConfig) || err == nil {
		if err := m.Reg.PutConfig(ctx, m.Config); err != nil {
			return err
		}
	} else {
		return err
	}
	if md, err := sdn.ParseMode(m.Config.Mode); err != nil {
		return err
	} else if md != sdn.ModeSubnet {
		names := append([]string{"default"}, m.Config.GlobalProjects...)
		if err := m.Reg.EnsureProjects(ctx, m.Config.GlobalProjects, names...); err != nil {
			return err
		}
	}
	for ctx.Err() == nil {
		err := m.follow(ctx, log)
		if ctx.Err() != nil {
			break
		}
		log.Warn("master: registry watch ended; re-listing", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// follow lists the nodes, allocates what is missing, then watches.
func (m *Master) follow(ctx context.Context, log *slog.Logger) error {
	resp, err := m.Reg.c.Get(ctx, NodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	for _, kv := range resp.Kvs {
		m.allocate(ctx, log, strings.TrimPrefix(string(kv.Key), NodesPrefix))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := m.Reg.c.Watch(wctx, NodesPrefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wc {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			name := strings.TrimPrefix(string(ev.Kv.Key), NodesPrefix)
			switch ev.Type {
			case clientv3.EventTypePut:
				if ev.IsCreate() {
					var n Node
					_ = json.Unmarshal(ev.Kv.Value, &n)
					log.Info("node registered", "node", name, "ip", n.IP)
				}
				m.allocate(ctx, log, name)
			case clientv3.EventTypeDelete:
				log.Info("node gone; releasing its subnet", "node", name)
				if err := m.Reg.ReleaseSubnet(ctx, name); err != nil {
					log.Warn("release subnet", "node", name, "err", err)
				}
			}
		}
	}
	return fmt.Errorf("watch closed: %w", ctx.Err())
}

func (m *Master) allocate(ctx context.Context, log *slog.Logger, name string) {
	s, err := m.Reg.AllocateSubnet(ctx, m.Config.ClusterNetworks, name)
	switch {
	case errors.Is(err, ErrNoSuchNode):
	case err != nil:
		log.Error("subnet allocation failed", "node", name, "err", err)
	default:
		log.Debug("node subnet", "node", name, "subnet", s.Subnet)
	}
}
