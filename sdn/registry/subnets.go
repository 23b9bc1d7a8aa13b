package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
)

// ErrBadNodeRecord: a node record gvs-master will not act on (an address
// that is not a unicast IPv4 address, or one another node has).
var ErrBadNodeRecord = errors.New("node record refused")

// AssignSubnet is gvs-master's answer to a node record (Register): it gives
// the node a subnet of the cluster networks, or keeps the one it has,
// answering the node's current registration (Subnet.Lease) and address. A node without a subnet gets the one it asks for
// (Node.Want) when that is a host subnet of the cluster networks nobody
// claims, else a fresh one. Every write is one transaction that succeeds
// only if the node record is unchanged, the node's subnet record is as read
// and the claim is as read; on conflict it re-reads and retries. A subnet
// record whose claim names another node (a damaged registry) is deleted
// and the node gets another subnet: the claim is what makes a subnet one
// node's.
func (r *Registry) AssignSubnet(ctx context.Context, nets []master.ClusterNetwork, node string) (Subnet, error) {
	for range maxAttempts {
		resp, err := r.c.Txn(ctx).Then(
			clientv3.OpGet(NodeKey(node)),
			clientv3.OpGet(SubnetKey(node)),
			clientv3.OpGet(ClaimsPrefix, clientv3.WithPrefix()),
			clientv3.OpGet(SubnetCursor),
			clientv3.OpGet(NodesPrefix, clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return Subnet{}, fmt.Errorf("assign subnet to %s: %w", node, err)
		}
		nodeKVs := resp.Responses[0].GetResponseRange().Kvs
		if len(nodeKVs) == 0 {
			return Subnet{}, fmt.Errorf("%w: %s", ErrNoSuchNode, node)
		}
		nkv := nodeKVs[0]
		var n Node
		if err := json.Unmarshal(nkv.Value, &n); err != nil {
			return Subnet{}, fmt.Errorf("%w: %s: %w", ErrBadNodeRecord, node, err)
		}
		if err := checkNodeIP(node, n.IP, resp.Responses[4].GetResponseRange().Kvs); err != nil {
			return Subnet{}, err
		}
		claims := map[netip.Prefix]string{}
		for _, kv := range resp.Responses[2].GetResponseRange().Kvs {
			if p, err := ParseClaimKey(string(kv.Key)); err == nil {
				claims[p] = string(kv.Value)
			}
		}
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			skv := kvs[0]
			var s Subnet
			if err := json.Unmarshal(skv.Value, &s); err != nil || claims[s.Subnet] != node {
				// Damaged: drop the record; the next round allocates.
				if _, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(SubnetKey(node)), "=", skv.ModRevision)).
					Then(clientv3.OpDelete(SubnetKey(node))).Commit(); err != nil {
					return Subnet{}, fmt.Errorf("assign subnet to %s: %w", node, err)
				}
				continue
			}
			if s.IP == n.IP && s.Node == node && s.Lease == nkv.Lease && sameVNID(s.FixedVNID, n.FixedVNID) {
				return s, nil
			}
			s.Node, s.IP, s.Lease, s.FixedVNID = node, n.IP, nkv.Lease, n.FixedVNID
			tr, err := r.c.Txn(ctx).If(
				clientv3.Compare(clientv3.ModRevision(NodeKey(node)), "=", nkv.ModRevision),
				clientv3.Compare(clientv3.ModRevision(SubnetKey(node)), "=", skv.ModRevision),
				clientv3.Compare(clientv3.Value(ClaimKey(s.Subnet)), "=", node),
			).Then(
				clientv3.OpPut(SubnetKey(node), jsonOf(s)),
				clientv3.OpPut(ClaimKey(s.Subnet), node),
			).Commit()
			if err != nil {
				return Subnet{}, fmt.Errorf("assign subnet to %s: %w", node, err)
			}
			if tr.Succeeded {
				return s, nil
			}
			continue
		}
		sa, err := master.NewSubnetAllocator(nets)
		if err != nil {
			return Subnet{}, err
		}
		for p := range claims {
			_, _ = sa.MarkUsed(p) // claims outside today's networks are ignored
		}
		if kvs := resp.Responses[3].GetResponseRange().Kvs; len(kvs) > 0 {
			var cur []uint32
			if json.Unmarshal(kvs[0].Value, &cur) == nil {
				sa.SetCursors(cur)
			}
		}
		p := n.Want
		if free, err := sa.MarkUsed(p); !p.IsValid() || err != nil || !free {
			if p, err = sa.Allocate(); err != nil {
				return Subnet{}, fmt.Errorf("node %s: %w", node, err)
			}
		}
		s := Subnet{Node: node, IP: n.IP, Subnet: p, Lease: nkv.Lease, FixedVNID: n.FixedVNID}
		tr, err := r.c.Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(NodeKey(node)), "=", nkv.ModRevision),
			clientv3.Compare(clientv3.ModRevision(SubnetKey(node)), "=", 0),
			clientv3.Compare(clientv3.ModRevision(ClaimKey(p)), "=", 0),
		).Then(
			clientv3.OpPut(SubnetKey(node), jsonOf(s)),
			clientv3.OpPut(ClaimKey(p), node),
			clientv3.OpPut(SubnetCursor, jsonOf(sa.Cursors())),
		).Commit()
		if err != nil {
			return Subnet{}, fmt.Errorf("assign subnet to %s: %w", node, err)
		}
		if tr.Succeeded {
			return s, nil
		}
	}
	return Subnet{}, fmt.Errorf("assign subnet to %s: %w", node, ErrContention)
}

// checkNodeIP refuses a node address that is not a unicast IPv4 address or
// that another node record has: two nodes on one address would make the
// other nodes tunnel one node's subnet to the other.
func checkNodeIP(node string, ip netip.Addr, nodes []*mvccpb.KeyValue) error {
	if !ip.Is4() || !ip.IsGlobalUnicast() {
		return fmt.Errorf("%w: %s: address %v is not a unicast IPv4 address", ErrBadNodeRecord, node, ip)
	}
	for _, kv := range nodes {
		other := strings.TrimPrefix(string(kv.Key), NodesPrefix)
		var o Node
		if other == node || json.Unmarshal(kv.Value, &o) != nil {
			continue
		}
		if o.IP == ip {
			return fmt.Errorf("%w: %s: address %v is node %s's", ErrBadNodeRecord, node, ip, other)
		}
	}
	return nil
}

// ReleaseSubnet deletes a node's subnet record and its claim: gvs-master
// does it when the node record goes (its lease expired, or it was deleted)
// and, at start, for records whose node is gone.
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

// Register publishes node n's record on lease, asking for subnet n.Want
// (none: any). It is the one write a node makes for itself; gvs-master
// answers with the node's subnet record on the same lease (AssignSubnet),
// which WaitSubnet waits for.
func (r *Registry) Register(ctx context.Context, n Node, lease clientv3.LeaseID) error {
	if _, err := r.c.Put(ctx, NodeKey(n.Name), jsonOf(n), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("register %s: %w", n.Name, err)
	}
	return nil
}

// ClaimHolder returns the node that claims subnet p ("" if nobody does).
func (r *Registry) ClaimHolder(ctx context.Context, p netip.Prefix) (string, error) {
	resp, err := r.c.Get(ctx, ClaimKey(p))
	if err != nil {
		return "", fmt.Errorf("claim of %v: %w", p, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// WaitSubnet blocks until the node has a subnet record answering its
// registration on lease (any when lease is 0) and returns it.
func (r *Registry) WaitSubnet(ctx context.Context, node string, lease clientv3.LeaseID) (Subnet, error) {
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
			if lease == 0 || s.Lease == int64(lease) {
				return s, nil
			}
		}
		wc := r.c.Watch(ctx, SubnetKey(node), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wc {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					var s Subnet
					if err := json.Unmarshal(ev.Kv.Value, &s); err != nil {
						return Subnet{}, fmt.Errorf("subnet of %s: %w", node, err)
					}
					if lease == 0 || s.Lease == int64(lease) {
						return s, nil
					}
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
