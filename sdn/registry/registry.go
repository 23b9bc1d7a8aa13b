// Package registry is gvs's control-plane store on the etcd v3 API: the key
// layout, typed records, and allocation of node subnets and project VNIDs
// by compare-and-swap transactions, so that any number of masters, nodes and
// gvsctl invocations racing each other give each subnet and VNID exactly
// once. The same layout is used with gvs-master's embedded etcd and with an
// external etcd cluster; docs/control-plane.md describes it.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
)

// Key layout. Every key lives under Prefix.
const (
	Prefix         = "/gvs/"
	ConfigKey      = Prefix + "config"         // Config (JSON), written by gvs-master
	NodesPrefix    = Prefix + "nodes/"         // NodesPrefix+name → Node, on the node's lease
	SubnetsPrefix  = Prefix + "subnets/"       // SubnetsPrefix+name → Subnet (deleted by gvs-master with the node record)
	ClaimsPrefix   = Prefix + "subnet-claims/" // ClaimsPrefix+a.b.c.d_len → node name (likewise)
	SubnetCursor   = Prefix + "subnet-cursor"  // JSON []uint32: scan cursor per cluster network
	ProjectsPrefix = Prefix + "projects/"      // ProjectsPrefix+name → Project
	VNIDsPrefix    = Prefix + "vnids/"         // VNIDsPrefix+decimal → VNIDUse (VNIDs other than 0)
	VNIDCursor     = Prefix + "vnid-cursor"    // decimal: next VNID scan start
	// RequestsPrefix+node+"/"+project → "", on the node's lease: node asks
	// gvs-master to create a project it has a pod for (RequestProject).
	RequestsPrefix = Prefix + "project-requests/"
)

// Sentinel errors.
var (
	ErrNoSuchNode = errors.New("node is not registered")
	ErrNoConfig   = errors.New("no cluster configuration in the registry (is gvs-master running?)")
	ErrContention = errors.New("too many concurrent updates; giving up")
	ErrNoProject  = errors.New("no such project")
)

// maxAttempts bounds compare-and-swap retries.
const maxAttempts = 1000

// Config is the cluster-wide network configuration gvs-master publishes.
type Config struct {
	ClusterNetworks []master.ClusterNetwork `json:"clusterNetworks"`
	ServiceNetwork  string                  `json:"serviceNetwork"`
	Mode            string                  `json:"mode"`
	VXLANPort       uint16                  `json:"vxlanPort,omitempty"`
	GlobalProjects  []string                `json:"globalProjects,omitempty"`
	// NodeLeaseTTL is the node lease in seconds.
	NodeLeaseTTL int64 `json:"nodeLeaseTTL,omitempty"`
}

// Node is a registered node: the one record a node writes itself.
type Node struct {
	Name string     `json:"name"`
	IP   netip.Addr `json:"ip"`
	// Want is the subnet the node asks for: the one it forwards with
	// (after its lease expired) or had before a restart. gvs-master gives
	// it only if nobody else claims it.
	Want netip.Prefix `json:"want,omitzero"`
	// FixedVNID is set on the record of a host that is not a node
	// (RegisterHost): the one VNID its traffic carries (hosts.go).
	FixedVNID *uint32 `json:"fixedVNID,omitempty"`
}

// Subnet is a node's allocated subnet.
type Subnet struct {
	Node   string       `json:"node"`
	IP     netip.Addr   `json:"ip"`
	Subnet netip.Prefix `json:"subnet"`
	// Lease is the lease of the node registration the record answers
	// (the node waits for an answer to its own). The record is not on
	// that lease: etcd renews a lease only for a user who may write every
	// key attached to it, and only gvs-master writes subnets; gvs-master
	// deletes the record and its claim when the node record expires.
	Lease int64 `json:"lease,omitempty"`
	// FixedVNID is the node record's FixedVNID, copied by gvs-master: the
	// nodes follow subnet records only (hosts.go).
	FixedVNID *uint32 `json:"fixedVNID,omitempty"`
}

// Project is a project's record: its VNID and whether it opted in to
// multicast (SetProjectMulticast; OpenShift's NetNamespace annotation
// netnamespace.network.openshift.io/multicast-enabled).
type Project struct {
	VNID      uint32 `json:"vnid"`
	Multicast bool   `json:"multicast,omitempty"`
}

// VNIDUse lists the projects using a VNID.
type VNIDUse struct {
	Projects []string `json:"projects"`
}

// Registry wraps an etcd v3 client with gvs's key layout.
type Registry struct {
	c *clientv3.Client
}

// New wraps a client.
func New(c *clientv3.Client) *Registry { return &Registry{c: c} }

// Client returns the underlying etcd client.
func (r *Registry) Client() *clientv3.Client { return r.c }

// NodeKey, SubnetKey, ClaimKey, ProjectKey and VNIDKey build keys.
func NodeKey(name string) string { return NodesPrefix + name }

// SubnetKey is the key of a node's subnet record.
func SubnetKey(name string) string { return SubnetsPrefix + name }

// ClaimKey is the key that makes a subnet owned by one node only.
func ClaimKey(p netip.Prefix) string {
	return ClaimsPrefix + p.Addr().String() + "_" + strconv.Itoa(p.Bits())
}

// ProjectKey is the key of a project's VNID record.
func ProjectKey(name string) string { return ProjectsPrefix + name }

// VNIDKey is the key listing the projects of a VNID.
func VNIDKey(v uint32) string { return VNIDsPrefix + strconv.FormatUint(uint64(v), 10) }

// ParseClaimKey returns the subnet a claim key names.
func ParseClaimKey(k string) (netip.Prefix, error) {
	s := strings.TrimPrefix(k, ClaimsPrefix)
	return netip.ParsePrefix(strings.Replace(s, "_", "/", 1))
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded
	}
	return string(b)
}

// PutConfig publishes the cluster configuration.
func (r *Registry) PutConfig(ctx context.Context, c Config) error {
	if _, err := r.c.Put(ctx, ConfigKey, jsonOf(c)); err != nil {
		return fmt.Errorf("put config: %w", err)
	}
	return nil
}

// GetConfig reads the cluster configuration; ErrNoConfig when absent.
func (r *Registry) GetConfig(ctx context.Context) (Config, error) {
	var c Config
	resp, err := r.c.Get(ctx, ConfigKey)
	if err != nil {
		return c, fmt.Errorf("get config: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return c, ErrNoConfig
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// Nodes lists the registered nodes.
func (r *Registry) Nodes(ctx context.Context) ([]Node, error) {
	resp, err := r.c.Get(ctx, NodesPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]Node, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var n Node
		if err := json.Unmarshal(kv.Value, &n); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// Subnets lists the allocated subnets and the revision they were read at.
func (r *Registry) Subnets(ctx context.Context) ([]Subnet, int64, error) {
	resp, err := r.c.Get(ctx, SubnetsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list subnets: %w", err)
	}
	out := make([]Subnet, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var s Subnet
		if err := json.Unmarshal(kv.Value, &s); err == nil {
			out = append(out, s)
		}
	}
	return out, resp.Header.Revision, nil
}

// Projects lists the projects and their VNIDs.
func (r *Registry) Projects(ctx context.Context) (map[string]uint32, error) {
	resp, err := r.c.Get(ctx, ProjectsPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list projects: %w", err)
	}
	out := make(map[string]uint32, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var p Project
		if err := json.Unmarshal(kv.Value, &p); err == nil {
			out[strings.TrimPrefix(string(kv.Key), ProjectsPrefix)] = p.VNID
		}
	}
	return out, nil
}
