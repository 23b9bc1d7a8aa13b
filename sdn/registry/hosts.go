package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Hosts that are not nodes (OpenShift's F5 BIG-IP "ramp"), etcd mode.
//
// An administrator registers such a host with RegisterHost (gvsctl hosts
// add): a node record on no lease, so it stays until UnregisterHost
// deletes it. gvs-master answers it as it answers a node (AssignSubnet):
// a subnet of the cluster networks, the one asked for if it is free, and
// a subnet record carrying the host's fixed VNID, which every node follows
// (sdn.RampRules: VNI FixedVNID both ways instead of the source VNID).
// Without a fixed VNID the host is treated as a node. Deleting the record
// releases the subnet, as a node's expiry does. The Kubernetes mode's
// equivalent is a HostSubnet with the pod.network.openshift.io/
// assign-subnet and fixed-vnid-host annotations.

// MaxVNID is the largest VNID a host may be given (24 bits).
const MaxVNID = 1<<24 - 1

// ErrNodeExists: RegisterHost or UnregisterHost met the record of a node
// registered on a lease (a running node), which they leave alone.
var ErrNodeExists = errors.New("a node of that name is registered")

// Host is a host that is not a node, as RegisterHost takes it: Node's
// fields (Want is the subnet it asks for, none: any) with FixedVNID set
// when the host has one.
type Host = Node

// RegisterHost publishes the record of host h on no lease, replacing an
// earlier one of the same host. It refuses a name a node registered on a
// lease has (ErrNodeExists) and a fixed VNID past MaxVNID; gvs-master
// refuses (logs) an address another node has or that is not unicast IPv4.
// Use WaitSubnet (lease 0) to wait for the subnet.
func (r *Registry) RegisterHost(ctx context.Context, h Host) error {
	if h.FixedVNID != nil && *h.FixedVNID > MaxVNID {
		return fmt.Errorf("register host %s: fixed VNID %d exceeds %d", h.Name, *h.FixedVNID, MaxVNID)
	}
	if !h.IP.Is4() {
		return fmt.Errorf("register host %s: address %v is not IPv4", h.Name, h.IP)
	}
	key := NodeKey(h.Name)
	for range maxAttempts {
		resp, err := r.c.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("register host %s: %w", h.Name, err)
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			if kv.Lease != 0 {
				return fmt.Errorf("register host %s: %w", h.Name, ErrNodeExists)
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
		}
		tr, err := r.c.Txn(ctx).If(cmp).Then(clientv3.OpPut(key, jsonOf(h))).Commit()
		if err != nil {
			return fmt.Errorf("register host %s: %w", h.Name, err)
		}
		if tr.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("register host %s: %w", h.Name, ErrContention)
}

// UnregisterHost deletes a host's record; gvs-master then releases its
// subnet and every node removes its rules. The record of a node registered
// on a lease is left alone (ErrNodeExists); an unknown name is no error.
func (r *Registry) UnregisterHost(ctx context.Context, name string) error {
	key := NodeKey(name)
	resp, err := r.c.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("unregister host %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	if kv.Lease != 0 {
		return fmt.Errorf("unregister host %s: %w", name, ErrNodeExists)
	}
	tr, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("unregister host %s: %w", name, err)
	}
	if !tr.Succeeded {
		return fmt.Errorf("unregister host %s: the record changed meanwhile: %w", name, ErrContention)
	}
	return nil
}

// RegisteredHost is a host that is not a node, as Hosts lists it: its
// record and the subnet gvs-master gave it (invalid: none yet).
type RegisteredHost struct {
	Host
	Subnet netip.Prefix `json:"subnet,omitzero"`
}

// Hosts lists the hosts that are not nodes (the node records on no lease,
// RegisterHost's), by name, with their subnets.
func (r *Registry) Hosts(ctx context.Context) ([]RegisteredHost, error) {
	resp, err := r.c.Get(ctx, NodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	subs, _, err := r.Subnets(ctx)
	if err != nil {
		return nil, err
	}
	var out []RegisteredHost
	for _, kv := range resp.Kvs {
		var h RegisteredHost
		if kv.Lease != 0 || json.Unmarshal(kv.Value, &h.Host) != nil {
			continue // a node's, or not a record
		}
		for _, s := range subs {
			if s.Node == h.Name {
				h.Subnet = s.Subnet
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// sameVNID reports whether two optional VNIDs are equal.
func sameVNID(a, b *uint32) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
