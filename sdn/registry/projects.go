package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
)

// UpdateProjects runs fn on the current project → VNID map (with its
// allocator) and commits what fn changed in one transaction guarded by the
// revisions of every project and VNID record it touches; on conflict it
// re-reads and runs fn again. It returns the map after the change.
// Projects named in global (and "default") get VNID 0 when created.
func (r *Registry) UpdateProjects(ctx context.Context, global []string, fn func(*master.VNIDs) error) (map[string]uint32, error) {
	for range maxAttempts {
		resp, err := r.c.Txn(ctx).Then(
			clientv3.OpGet(ProjectsPrefix, clientv3.WithPrefix()),
			clientv3.OpGet(VNIDsPrefix, clientv3.WithPrefix()),
			clientv3.OpGet(VNIDCursor),
		).Commit()
		if err != nil {
			return nil, fmt.Errorf("projects: %w", err)
		}
		v := master.NewVNIDs(global)
		projRev := map[string]int64{}
		recs := map[string]Project{}
		for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
			var p Project
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				continue
			}
			name := strings.TrimPrefix(string(kv.Key), ProjectsPrefix)
			v.Load(name, p.VNID)
			projRev[name] = kv.ModRevision
			recs[name] = p
		}
		vnidRev := map[uint32]int64{}
		for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
			n, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), VNIDsPrefix), 10, 32)
			if err == nil {
				vnidRev[uint32(n)] = kv.ModRevision
			}
		}
		if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
			if c, err := strconv.ParseUint(string(kvs[0].Value), 10, 32); err == nil {
				v.SetCursor(uint32(c))
			}
		}
		before := v.Projects()
		if err := fn(v); err != nil {
			return nil, err
		}
		after := v.Projects()
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		touched := map[uint32]bool{}
		for name, old := range before {
			nv, ok := after[name]
			switch {
			case !ok:
				ops = append(ops, clientv3.OpDelete(ProjectKey(name)))
			case nv != old:
				// The rest of the record (the multicast opt-in) stays.
				rec := recs[name]
				rec.VNID = nv
				ops = append(ops, clientv3.OpPut(ProjectKey(name), jsonOf(rec)))
				touched[nv] = true
			default:
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ProjectKey(name)), "=", projRev[name]))
			touched[old] = true
		}
		for name, nv := range after {
			if _, ok := before[name]; !ok {
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ProjectKey(name)), "=", 0))
				ops = append(ops, clientv3.OpPut(ProjectKey(name), jsonOf(Project{VNID: nv})))
				touched[nv] = true
			}
		}
		if len(ops) == 0 {
			return after, nil
		}
		for n := range touched {
			if n == master.GlobalVNID {
				continue
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(VNIDKey(n)), "=", vnidRev[n]))
			var use VNIDUse
			for name, pv := range after {
				if pv == n {
					use.Projects = append(use.Projects, name)
				}
			}
			if len(use.Projects) == 0 {
				ops = append(ops, clientv3.OpDelete(VNIDKey(n)))
			} else {
				slices.Sort(use.Projects)
				ops = append(ops, clientv3.OpPut(VNIDKey(n), jsonOf(use)))
			}
		}
		ops = append(ops, clientv3.OpPut(VNIDCursor, strconv.FormatUint(uint64(v.Cursor()), 10)))
		tr, err := r.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("projects: %w", err)
		}
		if tr.Succeeded {
			return after, nil
		}
	}
	return nil, fmt.Errorf("projects: %w", ErrContention)
}

// SetProjectMulticast opts the named projects in to multicast (on) or out,
// in their records, in one transaction guarded by their revisions (retried
// on conflict). Every project must exist: an unknown one is an error
// wrapping ErrNoProject, and nothing changes.
func (r *Registry) SetProjectMulticast(ctx context.Context, on bool, names ...string) error {
	for range maxAttempts {
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, name := range names {
			resp, err := r.c.Get(ctx, ProjectKey(name))
			if err != nil {
				return fmt.Errorf("project %s: %w", name, err)
			}
			if len(resp.Kvs) == 0 {
				return fmt.Errorf("project %s: %w", name, ErrNoProject)
			}
			var p Project
			if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil {
				return fmt.Errorf("project %s: bad record: %w", name, err)
			}
			p.Multicast = on
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ProjectKey(name)), "=", resp.Kvs[0].ModRevision))
			ops = append(ops, clientv3.OpPut(ProjectKey(name), jsonOf(p)))
		}
		tr, err := r.c.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("projects: %w", err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("projects: %w", ErrContention)
}

// ProjectRecords returns every project's record, by name.
func (r *Registry) ProjectRecords(ctx context.Context) (map[string]Project, error) {
	resp, err := r.c.Get(ctx, ProjectsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	out := make(map[string]Project, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p Project
		if err := json.Unmarshal(kv.Value, &p); err == nil {
			out[strings.TrimPrefix(string(kv.Key), ProjectsPrefix)] = p
		}
	}
	return out, nil
}

// EnsureProjects creates the named projects that do not exist yet.
func (r *Registry) EnsureProjects(ctx context.Context, global []string, names ...string) error {
	_, err := r.UpdateProjects(ctx, global, func(v *master.VNIDs) error {
		for _, n := range names {
			if _, ok := v.Get(n); !ok {
				if _, err := v.Create(n); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return err
}
