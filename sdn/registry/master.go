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
	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/projectname"
)

// Master is gvs-master's loop: it publishes the configuration, creates the
// default and global projects, gives every registered node a subnet
// (AssignSubnet) and answers the nodes' project requests. Several masters
// may run at once: every write is a compare-and-swap, so they never hand
// out a subnet or a VNID twice. A node gone past its lease loses its
// subnet: its record expires with the lease and the master, watching,
// deletes its subnet record and claim (at start, those of nodes that went
// while no master ran). The subnet records are not on the node's lease:
// etcd renews a lease only for a user who may write every key on it.
type Master struct {
	Reg    *Registry
	Config Config
	// CreateProjects makes the master create a project a node asks for
	// (a pod of a project nobody created): it gets a fresh VNID of its own,
	// as OpenShift gives every new namespace. When false such requests are
	// refused (logged) and the pod's CNI ADD fails after its wait.
	CreateProjects bool
	// SetupAuth makes the master create etcd's users and roles and turn
	// authentication on at start (docs/security.md); it needs the root
	// role. Lab clusters without TLS leave it off.
	SetupAuth bool
	Log       *slog.Logger
}

// Run serves until ctx is done. It rebuilds everything it needs from the
// registry, so a restarted master simply carries on.
func (m *Master) Run(ctx context.Context) error {
	log := m.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m.SetupAuth {
		if err := m.Reg.SetupAuth(ctx); err != nil {
			return err
		}
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
		names := append([]string{master.DefaultProject}, m.Config.GlobalProjects...)
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

// follow lists the nodes and the project requests, answers them, then
// watches for more.
func (m *Master) follow(ctx context.Context, log *slog.Logger) error {
	resp, err := m.Reg.c.Txn(ctx).Then(
		clientv3.OpGet(NodesPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(RequestsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(SubnetsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
	).Commit()
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		name := strings.TrimPrefix(string(kv.Key), NodesPrefix)
		live[name] = true
		m.assign(ctx, log, name)
	}
	// Subnets of nodes that went while no master watched.
	for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
		if name := strings.TrimPrefix(string(kv.Key), SubnetsPrefix); !live[name] {
			log.Info("node gone; releasing its subnet", "node", name)
			if err := m.Reg.ReleaseSubnet(ctx, name); err != nil {
				log.Warn("release subnet", "node", name, "err", err)
			}
		}
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		m.answer(ctx, log, string(kv.Key))
	}
	m.assignEgress(ctx, log)
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wc := m.Reg.c.Watch(wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wc {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			key := string(ev.Kv.Key)
			switch {
			case strings.HasPrefix(key, NodesPrefix):
				name := strings.TrimPrefix(key, NodesPrefix)
				if ev.Type == clientv3.EventTypeDelete {
					log.Info("node gone; releasing its subnet", "node", name)
					if err := m.Reg.ReleaseSubnet(ctx, name); err != nil {
						log.Warn("release subnet", "node", name, "err", err)
					}
					continue
				}
				if ev.IsCreate() {
					var n Node
					_ = json.Unmarshal(ev.Kv.Value, &n)
					log.Info("node registered", "node", name, "ip", n.IP, "wants", n.Want)
				}
				m.assign(ctx, log, name)
			case strings.HasPrefix(key, RequestsPrefix) && ev.Type == clientv3.EventTypePut:
				m.answer(ctx, log, key)
			case strings.HasPrefix(key, SubnetsPrefix),
				strings.HasPrefix(key, ProjectEgressPrefix), strings.HasPrefix(key, NodeEgressPrefix):
				m.assignEgress(ctx, log) // a node came or went, or an egress record changed
			}
		}
	}
	return fmt.Errorf("watch closed: %w", ctx.Err())
}

func (m *Master) assign(ctx context.Context, log *slog.Logger, name string) {
	s, err := m.Reg.AssignSubnet(ctx, m.Config.ClusterNetworks, name)
	switch {
	case errors.Is(err, ErrNoSuchNode):
	case err != nil:
		log.Error("subnet assignment failed", "node", name, "err", err)
	default:
		log.Debug("node subnet", "node", name, "subnet", s.Subnet)
	}
}

// answer handles one project request key: it creates the project with a
// fresh VNID when it does not exist and creation is on, and deletes the
// request either way (the node sees the project, or its wait times out).
func (m *Master) answer(ctx context.Context, log *slog.Logger, key string) {
	node, project, ok := strings.Cut(strings.TrimPrefix(key, RequestsPrefix), "/")
	if ok && m.CreateProjects && projectname.Valid(project) {
		if err := m.Reg.EnsureProjects(ctx, m.Config.GlobalProjects, project); err != nil {
			log.Error("creating a requested project", "project", project, "node", node, "err", err)
			return // the request stays: the next re-list tries again
		}
		log.Info("project created on a node's request", "project", project, "node", node)
	} else {
		log.Warn("project request refused", "project", project, "node", node,
			"why", refusal(ok, m.CreateProjects, project))
	}
	if _, err := m.Reg.c.Delete(ctx, key); err != nil {
		log.Warn("deleting a project request", "key", key, "err", err)
	}
}

func refusal(wellFormed, create bool, project string) string {
	switch {
	case !wellFormed:
		return "malformed request key"
	case !create:
		return "project creation is turned off (gvs-master --create-projects=false); an administrator creates projects"
	}
	return fmt.Sprintf("%q is not a valid project name", project)
}

// RequestProject asks gvs-master to create project for node: a key under
// the node's own request prefix, which gvs-master deletes once it has
// answered. The node then waits for the project's record (gvs-master
// creates it with a fresh VNID, or refuses). The key is on no lease: etcd
// lets a user attach a key to a lease only if it may write every key on the
// lease, and the node's lease carries its subnet, which only gvs-master
// writes.
func (r *Registry) RequestProject(ctx context.Context, node, project string) error {
	if !projectname.Valid(project) {
		return fmt.Errorf("%w: %q", master.ErrInvalidProjName, project)
	}
	if _, err := r.c.Put(ctx, RequestsPrefix+node+"/"+project, ""); err != nil {
		return fmt.Errorf("request project %s: %w", project, err)
	}
	return nil
}

// assignEgress runs the automatic egress IP assignment (AssignEgress). A
// node is live while its subnet record is there: gvs-master deletes it
// when the node's lease expires, so an egress IP moves off a node that
// stopped within the lease TTL.
func (m *Master) assignEgress(ctx context.Context, log *slog.Logger) {
	got, err := m.Reg.AssignEgress(ctx)
	if err != nil {
		log.Error("egress IP assignment", "err", err)
		return
	}
	log.Debug("egress IPs assigned", "count", len(got))
}
