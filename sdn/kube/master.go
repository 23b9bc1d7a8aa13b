package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/gvswitch/gvs/sdn/kube/networkv1"
	"github.com/gvswitch/gvs/sdn/master"
)

// Defaults of MasterConfig.
const (
	DefaultLeaseNamespace = "gvs"
	DefaultLeaseName      = "gvs-master"
	DefaultLeaseDuration  = 15 * time.Second
	DefaultRenewDeadline  = 10 * time.Second
	DefaultRetryPeriod    = 2 * time.Second
)

// MasterConfig configures a Master. The zero values of the optional fields
// are the defaults above.
type MasterConfig struct {
	// Network is published as the ClusterNetwork "default" and drives
	// allocation. Required.
	Network Network
	// REST is the API server's client configuration (RESTConfig reads one).
	// Required.
	REST *rest.Config
	// LeaseNamespace and LeaseName name the coordination.k8s.io Lease the
	// replicas elect their leader with; only the leader allocates.
	LeaseNamespace string
	LeaseName      string
	// Identity names this replica in the Lease (default: the host name and
	// a random suffix).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election as in
	// client-go's leaderelection: a crashed leader is replaced after at
	// most LeaseDuration; a leader that cannot renew within RenewDeadline
	// stops leading. A stopped replica (its Run's context cancelled)
	// releases the Lease, so another takes over within RetryPeriod.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// EgressCheckInterval is how often the leader probes the nodes that
	// may host egress IPs (HostSubnets with egressCIDRs) and moves the
	// egress IPs off one that does not answer (egressip.go). Zero is
	// master.DefaultEgressCheckInterval; negative turns the check off
	// (every such node counts as reachable).
	EgressCheckInterval time.Duration
	// Log receives the master's log (discarded when nil).
	Log *slog.Logger
}

// Master is gvs-master in Kubernetes mode: one replica of a leader-elected
// controller. While it leads, it keeps the ClusterNetwork "default" equal
// to its configuration, gives every Namespace a NetNamespace and every Node
// a HostSubnet, applies change-network annotations, places the projects'
// egress IPs on the nodes with egressCIDRs (egressip.go), and releases
// what a deleted Namespace or Node held. It keeps no state of its own: a new
// leader rebuilds the allocators from the NetNamespaces and HostSubnets.
type Master struct {
	cfg     MasterConfig
	kube    kubernetes.Interface
	net     *networkv1.Client
	log     *slog.Logger
	leading atomic.Bool
}

// NewMaster checks cfg and makes the API clients; it does not contact the
// API server.
func NewMaster(cfg MasterConfig) (*Master, error) {
	if err := cfg.Network.Validate(); err != nil {
		return nil, err
	}
	if cfg.REST == nil {
		return nil, errors.New("kube: MasterConfig.REST is required")
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = DefaultLeaseNamespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.Identity == "" {
		cfg.Identity = defaultIdentity()
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.EgressCheckInterval == 0 {
		cfg.EgressCheckInterval = master.DefaultEgressCheckInterval
	}
	kc, err := kubernetes.NewForConfig(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	nc, err := networkv1.NewForConfig(cfg.REST)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Master{cfg: cfg, kube: kc, net: nc, log: log.With("identity", cfg.Identity)}, nil
}

func defaultIdentity() string {
	h, err := os.Hostname()
	if err != nil {
		h = "gvs-master"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return h + "_" + hex.EncodeToString(b[:])
}

// Identity returns the name this replica campaigns under.
func (m *Master) Identity() string { return m.cfg.Identity }

// Leading reports whether this replica leads now.
func (m *Master) Leading() bool { return m.leading.Load() }

// Run campaigns for the Lease and, while it leads, runs the controller; on
// losing the Lease it stops the controller, waits for it to end, and
// campaigns again. It returns nil when ctx is done, after releasing the
// Lease if it held it.
func (m *Master) Run(ctx context.Context) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: m.cfg.LeaseNamespace, Name: m.cfg.LeaseName},
		Client:     m.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: m.cfg.Identity},
	}
	for ctx.Err() == nil {
		var t term
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   m.cfg.LeaseDuration,
			RenewDeadline:   m.cfg.RenewDeadline,
			RetryPeriod:     m.cfg.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            m.cfg.LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) { t.lead(lctx, m) },
				OnStoppedLeading: func() {},
				OnNewLeader: func(id string) {
					if id != m.cfg.Identity {
						m.log.Info("following the leader", "leader", id)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("kube: leader election: %w", err)
		}
		le.Run(ctx)
		t.end()
		if ctx.Err() == nil {
			m.log.Warn("lost the leadership; campaigning again")
		}
	}
	return nil
}

// term is one attempt at leading. client-go starts OnStartedLeading on a
// goroutine of its own and does not wait for it, so the controller of a
// lost term is awaited here before the next campaign: two controllers of
// one replica never run at once.
type term struct {
	mu      sync.Mutex
	over    bool
	running sync.WaitGroup
}

func (t *term) lead(ctx context.Context, m *Master) {
	t.mu.Lock()
	if t.over {
		t.mu.Unlock()
		return
	}
	t.running.Add(1)
	t.mu.Unlock()
	defer t.running.Done()
	m.leading.Store(true)
	defer m.leading.Store(false)
	m.log.Info("leading; starting the controller")
	newController(m).run(ctx)
	m.log.Info("controller stopped")
}

// end marks the term over and waits for its controller (whose context the
// elector has cancelled) to return.
func (t *term) end() {
	t.mu.Lock()
	t.over = true
	t.mu.Unlock()
	t.running.Wait()
}
