package registry

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gvswitch/gvs/sdn/master"
	"github.com/gvswitch/gvs/sdn/pki"
)

// Least privilege inside etcd (docs/security.md). etcd, run with client
// certificate authentication, takes a client certificate's common name as
// the user; each user's roles say which keys it may read and write:
//
//	user             roles                      may
//	root, gvs-master root                       everything (users, roles, every key)
//	admin            gvs-admin                  read and write /gvs/
//	node:NAME        gvs-node, node:NAME        read /gvs/; write its node record,
//	                                            its project requests and its
//	                                            pods' addresses only
//
// A node therefore cannot change a subnet (its own or another's), a claim,
// a project, a VNID or the configuration: gvs-master writes those, on the
// node's behalf where the node needs something (its subnet; a new project's
// VNID).
const (
	// RoleRoot is etcd's built-in superuser role.
	RoleRoot = "root"
	// RoleAdmin may read and write everything under Prefix.
	RoleAdmin = "gvs-admin"
	// RoleNode may read everything under Prefix.
	RoleNode = "gvs-node"
	rootUser = "root"
)

const (
	permRead      = clientv3.PermissionType(clientv3.PermRead)
	permReadWrite = clientv3.PermissionType(clientv3.PermReadWrite)
)

// ErrPermission is what etcd's refusal of an operation wraps into:
// errors.Is(err, ErrPermission) tells a refusal from an outage.
var ErrPermission = rpctypes.ErrPermissionDenied

// IsRefused reports whether err is etcd refusing the caller: permission
// denied, or an unknown or unauthenticated user.
func IsRefused(err error) bool {
	for _, e := range []error{rpctypes.ErrPermissionDenied, rpctypes.ErrUserNotFound, rpctypes.ErrAuthFailed,
		rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision, rpctypes.ErrUserEmpty} {
		if errors.Is(err, e) || rpctypes.ErrorDesc(err) == rpctypes.ErrorDesc(e) {
			return true
		}
	}
	return false
}

// ignoreExists drops the "already exists" answers that make the auth setup
// idempotent.
func ignoreExists(err error) error {
	switch {
	case err == nil, errors.Is(err, rpctypes.ErrUserAlreadyExist), errors.Is(err, rpctypes.ErrRoleAlreadyExist),
		errors.Is(err, rpctypes.ErrGRPCUserAlreadyExist), errors.Is(err, rpctypes.ErrGRPCRoleAlreadyExist):
		return nil
	}
	return err
}

// user creates a user without a password (certificate authentication only)
// holding roles.
func (r *Registry) user(ctx context.Context, name string, roles ...string) error {
	if err := ignoreExists(func() error {
		_, err := r.c.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true})
		return err
	}()); err != nil {
		return fmt.Errorf("etcd user %s: %w", name, err)
	}
	for _, role := range roles {
		if _, err := r.c.UserGrantRole(ctx, name, role); err != nil {
			return fmt.Errorf("etcd user %s: role %s: %w", name, role, err)
		}
	}
	return nil
}

// grant is one permission of a role: a key, or a prefix.
type grant struct {
	key    string
	prefix bool
	perm   clientv3.PermissionType
}

func (r *Registry) role(ctx context.Context, name string, grants ...grant) error {
	if _, err := r.c.RoleAdd(ctx, name); ignoreExists(err) != nil {
		return fmt.Errorf("etcd role %s: %w", name, err)
	}
	for _, g := range grants {
		end := ""
		if g.prefix {
			end = clientv3.GetPrefixRangeEnd(g.key)
		}
		if _, err := r.c.RoleGrantPermission(ctx, name, g.key, end, g.perm); err != nil {
			return fmt.Errorf("etcd role %s: grant %s: %w", name, g.key, err)
		}
	}
	return nil
}

// SetupAuth creates gvs's users and roles and turns etcd's authentication
// on. It is idempotent: gvs-master calls it at every start, as a user with
// the root role once authentication is on (its certificate's gvs-master),
// or as anyone before. AuthorizeNode then adds each node.
func (r *Registry) SetupAuth(ctx context.Context) error {
	steps := []func() error{
		func() error { return r.role(ctx, RoleRoot) },
		func() error { return r.user(ctx, rootUser, RoleRoot) },
		func() error { return r.user(ctx, pki.MasterUser, RoleRoot) },
		func() error { return r.role(ctx, RoleNode, grant{key: Prefix, prefix: true, perm: permRead}) },
		func() error {
			return r.role(ctx, RoleAdmin, grant{key: Prefix, prefix: true, perm: permReadWrite})
		},
		func() error { return r.user(ctx, pki.AdminUser, RoleAdmin) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("auth setup: %w", err)
		}
	}
	if err := r.upgradeNodeRoles(ctx); err != nil {
		return fmt.Errorf("auth setup: %w", err)
	}
	// Enabling an enabled authentication is a no-op (etcd 3.4, Debian's,
	// has no AuthStatus to ask first).
	if _, err := r.c.AuthEnable(ctx); err != nil {
		return fmt.Errorf("auth setup: enable: %w", err)
	}
	return nil
}

// nodeGrants are what node name may write: its node record, its project
// requests and its pods' address records.
func nodeGrants(name string) []grant {
	return []grant{
		{key: NodeKey(name), perm: permReadWrite},
		{key: RequestsPrefix + name + "/", prefix: true, perm: permReadWrite},
		{key: PodsPrefix + name + "/", prefix: true, perm: permReadWrite},
	}
}

// upgradeNodeRoles gives every existing node role what nodeGrants grants
// now: a registry set up by an older gvs-master lacks newer grants (the
// pods' address records). Granting a permission a role has is a no-op.
func (r *Registry) upgradeNodeRoles(ctx context.Context) error {
	resp, err := r.c.RoleList(ctx)
	if err != nil {
		return fmt.Errorf("list roles: %w", err)
	}
	for _, role := range resp.Roles {
		name, ok := pki.NodeOf(role)
		if !ok || !master.ValidNodeName(name) {
			continue
		}
		if err := r.role(ctx, role, nodeGrants(name)...); err != nil {
			return err
		}
	}
	return nil
}

// AuthorizeNode creates node name's etcd user (pki.NodeUser(name), matching
// the common name of the certificate gvs-master issues it) with read access
// to the registry and write access to its own node record, project
// requests and pod address records only. It is idempotent (and so gives an
// upgraded cluster's existing nodes what a newer version grants).
func (r *Registry) AuthorizeNode(ctx context.Context, name string) error {
	if !master.ValidNodeName(name) {
		return fmt.Errorf("%w: %q", master.ErrInvalidNodeName, name)
	}
	u := pki.NodeUser(name)
	if err := r.role(ctx, u, nodeGrants(name)...); err != nil {
		return err
	}
	return r.user(ctx, u, RoleNode, u)
}

// RevokeNode deletes node name's etcd user and role, so that its
// certificate no longer opens the registry, and then ends the leases its
// node record and pod address records are kept on, so that they go at once
// (and the node's subnet with its record, as at a lease's expiry): a
// connection the node opened before keeps its session, and some etcd
// versions (3.4) let it renew a lease without checking its permissions
// again. A missing user is not an error. Watches the node opened before
// are not ended: etcd checks permissions when a watch starts, so they
// deliver until the node's connection drops (docs/security.md).
func (r *Registry) RevokeNode(ctx context.Context, name string) error {
	u := pki.NodeUser(name)
	if _, err := r.c.UserDelete(ctx, u); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("revoke %s: %w", u, err)
	}
	if _, err := r.c.RoleDelete(ctx, u); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("revoke %s: %w", u, err)
	}
	leases := map[clientv3.LeaseID]bool{}
	for _, q := range []struct {
		key  string
		opts []clientv3.OpOption
	}{
		{NodeKey(name), nil},
		{PodsPrefix + name + "/", []clientv3.OpOption{clientv3.WithPrefix()}},
	} {
		// Not WithKeysOnly: etcd 3.5+ then leaves out the lease too.
		resp, err := r.c.Get(ctx, q.key, q.opts...)
		if err != nil {
			return fmt.Errorf("revoke %s: its records: %w", u, err)
		}
		for _, kv := range resp.Kvs {
			if kv.Lease != 0 {
				leases[clientv3.LeaseID(kv.Lease)] = true
			}
		}
	}
	for id := range leases {
		if _, err := r.c.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("revoke %s: its lease %x: %w", u, int64(id), err)
		}
	}
	return nil
}

// AuthorizeAdmin creates an administrator user (the common name of an
// administrator's certificate) with the gvs-admin role.
func (r *Registry) AuthorizeAdmin(ctx context.Context, name string) error {
	if name == "" || name == rootUser {
		return fmt.Errorf("admin user %q: invalid name", name)
	}
	if _, ok := pki.NodeOf(name); ok {
		return fmt.Errorf("admin user %q: node identities cannot be administrators", name)
	}
	return r.user(ctx, name, RoleAdmin)
}
