package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
)

// AllocateSubnet gives a registered node a subnet of the cluster networks,
// or returns the one it already has. The subnet record and its claim are
// written on the node's lease, in one transaction that succeeds only if the
// node record is unchanged, the node has no subnet and nobody claimed the
// subnet meanwhile; on conflict it re-reads and retries.
func (r *Registry) AllocateSubnet(ctx context.Context, nets []master.ClusterNetwork, node string) (Subnet, error) {
	for range maxAttempts {
		resp, err := r.c.Txn(ctx).Then(
			clientv3.OpGet(NodeKey(node)),
			clientv3.OpGet(SubnetKey(node)),
			clientv3.OpGet(ClaimsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
			clientv3.OpGet(SubnetCursor),
		).Commit()
		if err != nil {
			return Subnet{}, fmt.Errorf("allocate subnet for %s: %w", node, err)
		}
		nodeKVs := resp.Responses[0].GetResponseRange().Kvs
		if len(nodeKVs) == 0 {
			return Subnet{}, fmt.Errorf("%w: %s", ErrNoSuchNode, node)
		}
		nkv := nodeKVs[0]
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			var s Subnet
			if err := json.Unmarshal(kvs[0].Value, &s); err != nil {
				return Subnet{}, fmt.Errorf("subnet of %s: %w", node, err)
			}
			return s, nil
		}
		var n Node
		if err := json.Unmarshal(nkv.Value, &n); err != nil {
			return Subnet{}, fmt.Errorf("node %s: %w", node, err)
		}
		sa, err := master.NewSubnetAllocator(nets)
		if err != nil {
			return Subnet{}, err
		}
		for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
			if p, err := ParseClaimKey(string(kv.Key)); err == nil {
				_, _ = sa.MarkUsed(p) // claims outside today's networks are ignored
			}
		}
		if kvs := resp.Responses[3].GetResponseRange().Kvs; len(kvs) > 0 {
			var cur []uint32
			if json.Unmarshal(kvs[0].Value, &cur) == nil {
				sa.SetCursors(cur)
			}
		}
		p, err := sa.Allocate()
		if err != nil {
			return Subnet{}, fmt.Errorf("node %s: %w", node, err)
		}
		s := Subnet{Node: node, IP: n.IP, Subnet: p}
		lease := clientv3.LeaseID(nkv.Lease)
		tr, err := r.c.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(NodeKey(node)), "=", nkv.ModRevision),
			clientv3.Compare(clientv3.ModRevision(SubnetKey(node)), "=", 0),
			clientv3.Compare(clientv3.ModRevision(ClaimKey(p)), "=", 0),
		).Then(
			clientv3.OpPut(SubnetKey(node), jsonOf(s), clientv3.WithLease(lease)),
			clientv3.OpPut(ClaimKey(p), node, clientv3.WithLease(lease)),
			clientv3.OpPut(SubnetCursor, jsonOf(sa.Cursors())),
		).Commit()
		if err != nil {
			return Subnet{}, fmt.Errorf("allocate subnet for %s: %w", node, err)
		}
		if tr.Succeeded {
			return s, nil
		}
	}
	return Subnet{}, fmt.Errorf("allocate subnet for %s: %w", node, ErrContention)
}

// ReleaseSubnet deletes a node's subnet record and its claim (used when a
// node record is deleted without its lease expiring).
func (r *Registry) ReleaseSubnet(ctx context.Context, node string) error {
	resp, err := r.c.Get(ctx, SubnetKey(node))
	if err != nil {
		return fmt.Errorf("release subnet of %s: %w", node, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	var s Subnet
	if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
		return fmt.Errorf("subnet of %s: %w", node, err)
	}
	_, err = r.c.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(SubnetKey(node)), "=", resp.Kvs[0].ModRevision),
	).Then(
		clientv3.OpDelete(SubnetKey(node)),
		clientv3.OpDelete(ClaimKey(s.Subnet)),
	).Commit()
	if err != nil {
		return fmt.Errorf("release subnet of %s: %w", node, err)
	}
	return nil
}

// Register publishes a node record on lease and moves any subnet the node
// already holds onto that lease. If the node holds none but want is a
// subnet nobody has claimed, it takes want back (a node whose lease expired
// while it kept running); otherwise gvs-master allocates one and WaitSubnet
// sees it. It returns the node's subnet when already known.
func (r *Registry) Register(ctx context.Context, n Node, lease clientv3.LeaseID, want netip.Prefix) (Subnet, bool, error) {
	for range maxAttempts {
		ops := []clientv3.Op{clientv3.OpGet(SubnetKey(n.Name))}
		if want.IsValid() {
			ops = append(ops, clientv3.OpGet(ClaimKey(want)))
		}
		resp, err := r.c.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return Subnet{}, false, fmt.Errorf("register %s: %w", n.Name, err)
		}
		put := clientv3.OpPut(NodeKey(n.Name), jsonOf(n), clientv3.WithLease(lease))
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			var s Subnet
			if err := json.Unmarshal(kvs[0].Value, &s); err != nil {
				return Subnet{}, false, fmt.Errorf("subnet of %s: %w", n.Name, err)
			}
			s.IP = n.IP
			// The claim must still be this node's: a subnet record and its
			// claim are written and deleted together, so anything else is
			// a damaged registry, and the node must not overwrite another
			// node's claim.
			tr, err := r.c.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(SubnetKey(n.Name)), "=", kvs[0].ModRevision),
				clientv3.Compare(clientv3.Value(ClaimKey(s.Subnet)), "=", n.Name),
			).Then(put,
				clientv3.OpPut(SubnetKey(n.Name), jsonOf(s), clientv3.WithLease(lease)),
				clientv3.OpPut(ClaimKey(s.Subnet), n.Name, clientv3.WithLease(lease)),
			).Else(clientv3.OpGet(ClaimKey(s.Subnet))).Commit()
			if err != nil {
				return Subnet{}, false, fmt.Errorf("register %s: %w", n.Name, err)
			}
			if tr.Succeeded {
				return s, true, nil
			}
			if c := tr.Responses[0].GetResponseRange().Kvs; len(c) == 0 || string(c[0].Value) != n.Name {
				holder := "nobody"
				if len(c) > 0 {
					holder = string(c[0].Value)
				}
				return Subnet{}, false, fmt.Errorf("register %s: %w: its subnet record names %v, claimed by %s "+
					"(to repair: delete %s, e.g. etcdctl del %s, and gvs-master gives the node a subnet nobody claims)",
					n.Name, ErrClaimMismatch, s.Subnet, holder, SubnetKey(n.Name), SubnetKey(n.Name))
			}
			continue
		}
		if want.IsValid() && len(resp.Responses[1].GetResponseRange().Kvs) == 0 {
			s := Subnet{Node: n.Name, IP: n.IP, Subnet: want}
			tr, err := r.c.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(SubnetKey(n.Name)), "=", 0),
				clientv3.Compare(clientv3.ModRevision(ClaimKey(want)), "=", 0),
			).Then(put,
				clientv3.OpPut(SubnetKey(n.Name), jsonOf(s), clientv3.WithLease(lease)),
				clientv3.OpPut(ClaimKey(want), n.Name, clientv3.WithLease(lease)),
			).Commit()
			if err != nil {
				return Subnet{}, false, fmt.Errorf("register %s: %w", n.Name, err)
			}
			if tr.Succeeded {
				return s, true, nil
			}
			continue
		}
		tr, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(SubnetKey(n.Name)), "=", 0)).Then(put).Commit()
		if err != nil {
			return Subnet{}, false, fmt.Errorf("register %s: %w", n.Name, err)
		}
		if tr.Succeeded {
			return Subnet{}, false, nil
		}
	}
	return Subnet{}, false, fmt.Errorf("register %s: %w", n.Name, ErrContention)
}

// WaitSubnet blocks until the node has a subnet record and returns it.
func (r *Registry) WaitSubnet(ctx context.Context, node string) (Subnet, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := r.c.Get(ctx, SubnetKey(node))
	if err != nil {
		return Subnet{}, fmt.Errorf("wait for subnet of %s: %w", node, err)
	}
	for {
		if len(resp.Kvs) > 0 {
			var s Subnet
			if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
				return Subnet{}, fmt.Errorf("subnet of %s: %w", node, err)
			}
			return s, nil
		}
		wc := r.c.Watch(ctx, SubnetKey(node), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wc {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					var s Subnet
					if err := json.Unmarshal(ev.Kv.Value, &s); err != nil {
						return Subnet{}, fmt.Errorf("subnet of %s: %w", node, err)
					}
					return s, nil
				}
			}
			if wr.Err() != nil {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return Subnet{}, fmt.Errorf("wait for subnet of %s: %w", node, err)
		}
		if resp, err = r.c.Get(ctx, SubnetKey(node)); err != nil {
			return Subnet{}, fmt.Errorf("wait for subnet of %s: %w", node, err)
		}
	}
}
