package cniplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/utils"
	"github.com/gvswitch/gvs/internal/accept"
)

// Sentinel errors a Backend returns for conditions with their own codes.
var (
	// ErrInterfaceExists: the interface name is taken in the netns.
	ErrInterfaceExists = errors.New("interface already exists")
	// ErrNoNetns: the network namespace does not exist.
	ErrNoNetns = errors.New("network namespace not found")
	// ErrTryAgain: the node cannot attach the pod yet (its project has no
	// VNID yet, say); ADD fails with CNI code 11 and the runtime retries.
	ErrTryAgain = errors.New("try again later")
)

// Route is a route the backend installed in the pod.
type Route struct {
	Dst netip.Prefix
	Gw  netip.Addr // zero: on-link
}

// Attachment is what the backend set up for a lease.
type Attachment struct {
	MAC     string
	Prefix  netip.Prefix // the pod's address with the subnet's length
	Gateway netip.Addr
	Routes  []Route
}

// Backend does the node's work for the Server: gvs-switchd implements it
// (internal/daemon/cni.go).
type Backend interface {
	// Attach creates the pod's interface for l (TAP → l.Netns as l.IfName,
	// address, MAC, MTU, routes) and installs its rules. On error it has
	// undone its own steps.
	Attach(ctx context.Context, l Lease) (Attachment, error)
	// Detach removes the rules and the switch port of l. It succeeds when
	// they are already gone.
	Detach(ctx context.Context, l Lease) error
	// Check verifies l's interface and rules; the error names what is
	// missing.
	Check(ctx context.Context, l Lease) error
}

// Server answers gvs-cni's requests. Calls for one container are
// serialized; calls for different containers run concurrently.
type Server struct {
	ipam *IPAM
	be   Backend
	log  *slog.Logger
	// Observe, if set, is called with each request's verb and duration.
	observe func(cmd string, d time.Duration, err error)
	podBW   func(ctx context.Context, namespace, name, uid string) (*Bandwidth, error)

	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// ServerConfig configures a Server.
type ServerConfig struct {
	IPAM    *IPAM
	Backend Backend
	Logger  *slog.Logger
	// Observe, if set, is called after each request (metrics).
	Observe func(cmd string, d time.Duration, err error)
	// PodBandwidth, if set, returns the bandwidth limit the control plane
	// stores for a pod (Kubernetes: the Pod object's
	// kubernetes.io/ingress-bandwidth and egress-bandwidth annotations, as
	// OpenShift SDN reads them). ADD asks it only when the runtime passed
	// no bandwidth arguments: the runtime read the same annotations, and
	// what it passes with the ADD is what the reference plug-in obeys. nil
	// and no error: no limit; an error fails ADD (code 7 for a value that
	// is not a limit, 11 for a lookup that failed).
	PodBandwidth func(ctx context.Context, namespace, name, uid string) (*Bandwidth, error)
}

// NewServer returns a Server.
func NewServer(cfg ServerConfig) *Server {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{ipam: cfg.IPAM, be: cfg.Backend, log: log, observe: cfg.Observe, podBW: cfg.PodBandwidth, locks: map[string]*keyLock{}}
}

// IPAM returns the server's IPAM.
func (s *Server) IPAM() *IPAM { return s.ipam }

func (s *Server) lock(id string) func() {
	s.mu.Lock()
	k := s.locks[id]
	if k == nil {
		k = &keyLock{}
		s.locks[id] = k
	}
	k.refs++
	s.mu.Unlock()
	k.mu.Lock()
	return func() {
		k.mu.Unlock()
		s.mu.Lock()
		if k.refs--; k.refs == 0 {
			delete(s.locks, id)
		}
		s.mu.Unlock()
	}
}

// Listen opens the CNI socket at path (creating its directory), replacing a
// stale socket file that nothing listens on.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(dirOf(path), 0o755); err != nil {
		return nil, fmt.Errorf("cniplugin: socket dir: %w", err)
	}
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("cniplugin: %s: another daemon is listening", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("cniplugin: listen %s: %w", path, err)
	}
	return l, nil
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i > 0 {
		return p[:i]
	}
	return "/"
}

// Serve answers requests on l until ctx is done.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	err := accept.Loop(ctx, l, func(c net.Conn) { s.serveConn(ctx, c) })
	if err != nil {
		return fmt.Errorf("cniplugin: accept: %w", err)
	}
	return nil
}

func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req Request
	var resp *Response
	if err := json.NewDecoder(c).Decode(&req); err != nil {
		resp = &Response{Error: types.NewError(types.ErrDecodingFailure, "gvs-switchd could not decode the request", err.Error())}
	} else {
		resp = s.Handle(ctx, &req)
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(resp); err != nil {
		s.log.Warn("cni: writing the answer", "err", err)
	}
}

// Handle answers one request.
func (s *Server) Handle(ctx context.Context, req *Request) *Response {
	start := time.Now()
	res, err := s.handle(ctx, req)
	var te *types.Error
	if err != nil && !errors.As(err, &te) {
		te = types.NewError(types.ErrInternal, err.Error(), "")
	}
	if s.observe != nil {
		s.observe(req.Command, time.Since(start), err)
	}
	if te != nil {
		s.log.Warn("cni request failed", "cmd", req.Command, "container", req.ContainerID, "ifname", req.IfName,
			"code", te.Code, "msg", te.Msg, "details", te.Details)
		return &Response{Error: te}
	}
	s.log.Debug("cni request", "cmd", req.Command, "container", req.ContainerID, "took", time.Since(start))
	return &Response{Result: res}
}

func invalidEnv(msg string) error {
	return types.NewError(types.ErrInvalidEnvironmentVariables, msg, "")
}

func (s *Server) handle(ctx context.Context, req *Request) (json.RawMessage, error) {
	conf, err := ParseNetConf(req.Config)
	if err != nil {
		return nil, err
	}
	switch req.Command {
	case "ADD", "DEL", "CHECK":
		if terr := utils.ValidateContainerID(req.ContainerID); terr != nil {
			return nil, terr
		}
		if terr := utils.ValidateInterfaceName(req.IfName); terr != nil {
			return nil, terr
		}
		if req.Command != "DEL" && req.Netns == "" {
			return nil, invalidEnv("CNI_NETNS is required for " + req.Command)
		}
		defer s.lock(req.ContainerID)()
	}
	switch req.Command {
	case "ADD":
		return s.add(ctx, conf, req)
	case "DEL":
		return nil, s.del(ctx, req)
	case "CHECK":
		return nil, s.check(ctx, req)
	case "GC":
		return nil, s.gc(ctx, conf)
	case "STATUS":
		return nil, nil
	}
	return nil, invalidEnv(fmt.Sprintf("CNI_COMMAND %q is not one of ADD, DEL, CHECK, STATUS, GC", req.Command))
}

// ParseArgs reads CNI_ARGS ("K=V;K=V"); malformed pairs are ignored.
func ParseArgs(args string) map[string]string {
	m := map[string]string{}
	for kv := range strings.SplitSeq(args, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k != "" {
			m[k] = v
		}
	}
	return m
}

func (s *Server) add(ctx context.Context, conf *NetConf, req *Request) (json.RawMessage, error) {
	if l, ok := s.ipam.Get(req.ContainerID, req.IfName); ok {
		return nil, types.NewError(ErrCodeInterfaceExists, "interface already exists",
			fmt.Sprintf("container %s already has %s with address %s; DEL it before adding it again", req.ContainerID, req.IfName, l.IP))
	}
	bw := conf.RuntimeConfig.Bandwidth
	if err := bw.Validate(); err != nil {
		return nil, err // before anything is allocated: nothing to undo
	}
	if bw.IsZero() {
		bw = nil
	}
	args := ParseArgs(req.Args)
	project := args["K8S_POD_NAMESPACE"]
	if project == "" {
		project = "default"
	}
	if bw == nil && s.podBW != nil && args["K8S_POD_NAME"] != "" {
		var err error
		if bw, err = s.podBW(ctx, project, args["K8S_POD_NAME"], args["K8S_POD_UID"]); err != nil {
			return nil, err // before anything is allocated: nothing to undo
		}
		if bw.IsZero() {
			bw = nil
		}
	}
	l, err := s.ipam.Allocate(Lease{ContainerID: req.ContainerID, IfName: req.IfName, Netns: req.Netns,
		Project: project, PodName: args["K8S_POD_NAME"], Network: conf.Name, Bandwidth: bw})
	if err != nil {
		if errors.Is(err, ErrSubnetExhausted) {
			return nil, types.NewError(ErrCodeSubnetExhausted, "node subnet exhausted",
				err.Error()+"; delete unused pods or give the node a larger subnet")
		}
		if errors.Is(err, ErrNoSubnet) {
			return nil, types.NewError(types.ErrTryAgainLater, "the node has no subnet", err.Error())
		}
		return nil, types.NewError(types.ErrIOFailure, "cannot persist the address lease", err.Error())
	}
	start := time.Now()
	att, err := s.be.Attach(ctx, l)
	if err != nil {
		_ = s.be.Detach(ctx, l)
		if rerr := s.ipam.Release(l.ContainerID, l.IfName); rerr != nil {
			s.log.Error("cni: releasing the lease after a failed ADD", "ip", l.IP, "err", rerr)
		}
		switch {
		case errors.Is(err, ErrInterfaceExists):
			return nil, types.NewError(ErrCodeInterfaceExists, "interface already exists",
				fmt.Sprintf("%s already exists in %s: %v", req.IfName, req.Netns, err))
		case errors.Is(err, ErrNoNetns):
			return nil, invalidEnv(fmt.Sprintf("CNI_NETNS %s: %v", req.Netns, err))
		case errors.Is(err, ErrTryAgain):
			return nil, types.NewError(types.ErrTryAgainLater, "the pod cannot be attached yet", err.Error())
		}
		return nil, types.NewError(types.ErrInternal, "attaching the pod failed", err.Error())
	}
	idx := 0
	r := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: req.IfName, Mac: att.MAC, Sandbox: req.Netns}},
		IPs: []*types100.IPConfig{{Interface: &idx, Address: ipNet(att.Prefix),
			Gateway: net.IP(att.Gateway.AsSlice())}},
	}
	for _, rt := range att.Routes {
		tr := &types.Route{Dst: ipNet(rt.Dst)}
		if rt.Gw.IsValid() {
			tr.GW = net.IP(rt.Gw.AsSlice())
		} else {
			tr.Scope = intPtr(253) // RT_SCOPE_LINK
		}
		r.Routes = append(r.Routes, tr)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	s.log.Info("cni ADD", "container", req.ContainerID, "ifname", req.IfName, "ip", l.IP, "port", l.Port, "project", l.Project, "attach", time.Since(start).Round(time.Microsecond))
	return b, nil
}

func intPtr(i int) *int { return &i }

func ipNet(p netip.Prefix) net.IPNet {
	return net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (s *Server) del(ctx context.Context, req *Request) error {
	l, ok := s.ipam.Get(req.ContainerID, req.IfName)
	if !ok {
		// Never seen, already deleted, or stale (its subnet was lost).
		// A stale one's interface may still be in the pod (gvs-switchd's
		// TAPs are persistent): Detach removes it.
		if st, stale := s.ipam.Stale(req.ContainerID, req.IfName); stale {
			if err := s.be.Detach(ctx, st.Lease); err != nil {
				return types.NewError(types.ErrTryAgainLater, "removing the stale attachment's interface failed; retry DEL", err.Error())
			}
		}
		if err := s.ipam.DropStale(req.ContainerID, req.IfName); err != nil {
			return types.NewError(types.ErrIOFailure, "dropping the stale address lease failed", err.Error())
		}
		return nil
	}
	if err := s.be.Detach(ctx, l); err != nil {
		return types.NewError(types.ErrTryAgainLater, "detaching the pod failed; retry DEL", err.Error())
	}
	if err := s.ipam.Release(l.ContainerID, l.IfName); err != nil {
		return types.NewError(types.ErrIOFailure, "releasing the address lease failed", err.Error())
	}
	// The node's subnet may have changed while Detach ran (gvs-switchd's
	// ChangeSubnet waits for no CNI lock), turning the lease stale.
	if err := s.ipam.DropStale(l.ContainerID, l.IfName); err != nil {
		return types.NewError(types.ErrIOFailure, "dropping the stale address lease failed", err.Error())
	}
	s.log.Info("cni DEL", "container", req.ContainerID, "ifname", req.IfName, "ip", l.IP)
	return nil
}

func (s *Server) check(ctx context.Context, req *Request) error {
	l, ok := s.ipam.Get(req.ContainerID, req.IfName)
	if st, stale := s.ipam.Stale(req.ContainerID, req.IfName); !ok && stale {
		return types.NewError(ErrCodeCheckFailed, "stale address",
			fmt.Sprintf("%s of container %s has address %s, which this node no longer owns: %s; delete and re-create the pod",
				req.IfName, req.ContainerID, st.IP, st.Reason))
	}
	if !ok {
		return types.NewError(types.ErrUnknownContainer, "unknown container",
			fmt.Sprintf("gvs has no attachment %s of container %s", req.IfName, req.ContainerID))
	}
	if l.Netns != req.Netns {
		return types.NewError(ErrCodeCheckFailed, "check failed",
			fmt.Sprintf("the attachment was made in netns %s, not %s", l.Netns, req.Netns))
	}
	if err := s.be.Check(ctx, l); err != nil {
		return types.NewError(ErrCodeCheckFailed, "check failed", err.Error())
	}
	return nil
}

func (s *Server) gc(ctx context.Context, conf *NetConf) error {
	valid := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[AttachmentKey(a.ContainerID, a.IfName)] = true
	}
	var errs []error
	for _, st := range s.ipam.StaleLeases() {
		if !valid[st.Key()] && (st.Network == "" || st.Network == conf.Name) {
			unlock := s.lock(st.ContainerID)
			if _, cur := s.ipam.Get(st.ContainerID, st.IfName); cur {
				unlock() // re-added meanwhile: Allocate dropped the stale record
				continue
			}
			if err := s.be.Detach(ctx, st.Lease); err != nil { // its interface, if left
				errs = append(errs, err)
			} else if err := s.ipam.DropStale(st.ContainerID, st.IfName); err != nil {
				errs = append(errs, err)
			}
			unlock()
		}
	}
	for _, l := range s.ipam.Leases() {
		if valid[l.Key()] || (l.Network != "" && l.Network != conf.Name) {
			continue
		}
		unlock := s.lock(l.ContainerID)
		if cur, ok := s.ipam.Get(l.ContainerID, l.IfName); ok && cur.IP == l.IP {
			if err := s.be.Detach(ctx, l); err != nil {
				errs = append(errs, err)
			} else if err := s.ipam.Release(l.ContainerID, l.IfName); err != nil {
				errs = append(errs, err)
			} else {
				s.log.Info("cni GC removed a stale attachment", "container", l.ContainerID, "ifname", l.IfName, "ip", l.IP)
			}
		}
		unlock()
	}
	if len(errs) > 0 {
		return types.NewError(types.ErrTryAgainLater, "GC could not remove every stale attachment", errors.Join(errs...).Error())
	}
	return nil
}

// Restore re-attaches every lease whose namespace still exists, after a
// daemon start, and reports the ones it could not; their leases stay until
// DEL or GC. A Backend that is a Reattacher adopts the interface the
// previous daemon left in the pod (the pod keeps its eth0 throughout);
// where there is none (ErrNoInterface), or the Backend is no Reattacher,
// the pod is attached anew with Attach.
func (s *Server) Restore(ctx context.Context) RestoreStats {
	var st RestoreStats
	ra, _ := s.be.(Reattacher)
	for _, l := range s.ipam.Leases() {
		if _, err := os.Stat(l.Netns); err != nil {
			st.NetnsGone++
			s.log.Warn("cni: lease kept, its netns is gone; waiting for DEL or GC", "container", l.ContainerID, "ip", l.IP, "netns", l.Netns)
			continue
		}
		unlock := s.lock(l.ContainerID)
		how := "re-created its interface"
		err := ErrNoInterface
		if ra != nil {
			if err = ra.Reattach(ctx, l); err == nil {
				how = "kept its interface"
				st.Adopted++
			}
		}
		if errors.Is(err, ErrNoInterface) {
			if _, err = s.be.Attach(ctx, l); err == nil {
				st.Recreated++
			}
		}
		unlock()
		if err != nil {
			st.Failed++
			s.log.Error("cni: re-attaching a leased pod failed", "container", l.ContainerID, "ip", l.IP, "err", err)
			continue
		}
		s.log.Info("cni: re-attached leased pod", "container", l.ContainerID, "ip", l.IP, "port", l.Port, "how", how)
	}
	// A stale lease's pod (its address left the node's subnet) gets no
	// network back; its interface, which outlived the previous daemon, is
	// removed. The record stays for CHECK to explain, until DEL or GC.
	for _, sl := range s.ipam.StaleLeases() {
		if _, err := os.Stat(sl.Netns); err != nil {
			continue
		}
		unlock := s.lock(sl.ContainerID)
		if _, cur := s.ipam.Get(sl.ContainerID, sl.IfName); !cur {
			if err := s.be.Detach(ctx, sl.Lease); err != nil {
				s.log.Warn("cni: removing a stale attachment's interface", "container", sl.ContainerID, "ip", sl.IP, "err", err)
			}
		}
		unlock()
	}
	return st
}

// ErrNoInterface is returned by Reattacher.Reattach when the pod's
// namespace has no interface left by the previous daemon.
var ErrNoInterface = errors.New("the pod has no interface to adopt")

// Reattacher is a Backend that can adopt, after a daemon restart, the pod
// interface an earlier daemon created (gvs-switchd: a persistent TAP).
type Reattacher interface {
	// Reattach adopts l's interface in l.Netns, puts it back on the switch
	// on l.Port and installs l's rules. It fails with ErrNoInterface when
	// there is no interface to adopt, and has then changed nothing.
	Reattach(ctx context.Context, l Lease) error
}

// RestoreStats counts what Restore did with the leases.
type RestoreStats struct {
	Adopted   int // interface kept, re-attached
	Recreated int // interface created anew
	NetnsGone int // lease kept, namespace gone
	Failed    int // could not be re-attached
}
