package networkv1

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// GroupVersion returns network.openshift.io/v1.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: GroupName, Version: Version}
}

// AddToScheme registers the objects of this package (and the meta types a
// client needs with them: ListOptions, WatchEvent, Status) in s.
func AddToScheme(s *runtime.Scheme) error {
	gv := GroupVersion()
	s.AddKnownTypes(gv,
		&ClusterNetwork{}, &ClusterNetworkList{},
		&HostSubnet{}, &HostSubnetList{},
		&NetNamespace{}, &NetNamespaceList{},
		&EgressNetworkPolicy{}, &EgressNetworkPolicyList{},
	)
	metav1.AddToGroupVersion(s, gv)
	return nil
}

// Client is a typed client of network.openshift.io/v1. It is safe for
// concurrent use.
type Client struct {
	rc rest.Interface
}

// NewForConfig returns a client for the API server of cfg, which it does
// not modify. CRDs speak JSON only, so the client does.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	gv := GroupVersion()
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("network.openshift.io client: %w", err)
	}
	return &Client{rc: rc}, nil
}

// ClusterNetworks is the client of the ClusterNetwork objects.
type ClusterNetworks = Resource[ClusterNetwork, ClusterNetworkList, *ClusterNetwork, *ClusterNetworkList]

// HostSubnets is the client of the HostSubnet objects.
type HostSubnets = Resource[HostSubnet, HostSubnetList, *HostSubnet, *HostSubnetList]

// NetNamespaces is the client of the NetNamespace objects.
type NetNamespaces = Resource[NetNamespace, NetNamespaceList, *NetNamespace, *NetNamespaceList]

// EgressNetworkPolicies is the client of one namespace's (or, with
// namespace "", every namespace's) EgressNetworkPolicy objects.
type EgressNetworkPolicies = Resource[EgressNetworkPolicy, EgressNetworkPolicyList, *EgressNetworkPolicy, *EgressNetworkPolicyList]

// ClusterNetworks returns the client of the (cluster-scoped) ClusterNetworks.
func (c *Client) ClusterNetworks() ClusterNetworks {
	return ClusterNetworks{c: c.rc, resource: ResourceClusterNetworks}
}

// HostSubnets returns the client of the (cluster-scoped) HostSubnets.
func (c *Client) HostSubnets() HostSubnets {
	return HostSubnets{c: c.rc, resource: ResourceHostSubnets}
}

// NetNamespaces returns the client of the (cluster-scoped) NetNamespaces.
func (c *Client) NetNamespaces() NetNamespaces {
	return NetNamespaces{c: c.rc, resource: ResourceNetNamespaces}
}

// EgressNetworkPolicies returns the client of the EgressNetworkPolicies of
// namespace ("" for all namespaces: List, Watch and ListWatch only).
func (c *Client) EgressNetworkPolicies(namespace string) EgressNetworkPolicies {
	return EgressNetworkPolicies{c: c.rc, resource: ResourceEgressNetworkPolicies, namespace: namespace}
}

// Object is the pointer type of an object T of this package.
type Object[T any] interface {
	*T
	runtime.Object
	metav1.Object
}

// ListObject is the pointer type of a list L of this package.
type ListObject[L any] interface {
	*L
	runtime.Object
}

// Resource is the typed client of one kind: T the object, L its list, PT
// and PL their pointer types. The zero value is not usable; get one from a
// Client.
type Resource[T, L any, PT Object[T], PL ListObject[L]] struct {
	c         rest.Interface
	resource  string
	namespace string
}

func (r Resource[T, L, PT, PL]) req(verb func() *rest.Request) *rest.Request {
	return verb().NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

// Get returns the object called name.
func (r Resource[T, L, PT, PL]) Get(ctx context.Context, name string) (*T, error) {
	out := new(T)
	err := r.req(r.c.Get).Name(name).Do(ctx).Into(PT(out))
	return out, err
}

// List lists the objects.
func (r Resource[T, L, PT, PL]) List(ctx context.Context, opts metav1.ListOptions) (*L, error) {
	out := new(L)
	err := r.req(r.c.Get).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(PL(out))
	return out, err
}

// Watch watches the objects.
func (r Resource[T, L, PT, PL]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.req(r.c.Get).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// Create creates obj and returns the object the server stored.
func (r Resource[T, L, PT, PL]) Create(ctx context.Context, obj *T) (*T, error) {
	out := new(T)
	err := r.req(r.c.Post).Body(PT(obj)).Do(ctx).Into(PT(out))
	return out, err
}

// Update replaces the object (its metadata.resourceVersion guards against
// a concurrent change: the server answers 409 Conflict) and returns the
// object the server stored.
func (r Resource[T, L, PT, PL]) Update(ctx context.Context, obj *T) (*T, error) {
	out := new(T)
	err := r.req(r.c.Put).Name(PT(obj).GetName()).Body(PT(obj)).Do(ctx).Into(PT(out))
	return out, err
}

// Delete deletes the object called name.
func (r Resource[T, L, PT, PL]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.req(r.c.Delete).Name(name).Body(&opts).Do(ctx).Error()
}

// ListWatch returns the list-and-watch functions an informer needs.
func (r Resource[T, L, PT, PL]) ListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			ConsistentList(&opts)
			l, err := r.List(ctx, opts)
			return PL(l), err
		},
		WatchFuncWithContext: r.Watch,
	}
}

// ConsistentList turns an informer's first list, which asks for
// ResourceVersion "0" (whatever the API server's watch cache holds, which
// may lag behind objects just written), into a consistent one (""): what
// is in etcd now. A follower that says it has seen the first full list
// (a live upgrade waits for it before it forwards) must not have been
// given an older one. Watches (opts.Watch) and lists that name a version
// are left alone. It is an informer's list-options tweak.
func ConsistentList(opts *metav1.ListOptions) {
	if !opts.Watch && opts.ResourceVersion == "0" {
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
}

// Informer returns a new shared informer of the objects (no resync), with
// the namespace index. Start it with Run.
func (r Resource[T, L, PT, PL]) Informer() cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(r.ListWatch(), PT(new(T)), 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}
