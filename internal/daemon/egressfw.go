package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/gvswitch/gvs/internal/daemon/source"
	"github.com/gvswitch/gvs/sdn"
)

// DefaultEgressDNSInterval is how often the DNS names of egress firewalls
// are resolved again (Config.EgressDNSInterval's default).
const DefaultEgressDNSInterval = 30 * time.Second

// egressFirewalls keeps the egress firewall objects a source reports,
// resolves the DNS names they name (at once, then every interval: a name's
// addresses are followed as its records change) and hands each object,
// names replaced by their addresses, to the rule program. A name that does
// not resolve has no addresses: its rule matches nothing (as in OpenShift).
type egressFirewalls struct {
	n        *nodeState
	resolver *net.Resolver
	interval time.Duration

	// wg counts SetEgressFirewall's resolving goroutines.
	wg sync.WaitGroup

	mu      sync.Mutex
	objects map[[2]string][]source.EgressRule // namespace, name → rules
	names   map[string][]netip.Addr           // DNS name → its last addresses
}

// egressDNS is the resolver and the interval egress firewalls' DNS names
// are followed with (Config.EgressDNSServer, Config.EgressDNSInterval).
func (c *Config) egressDNS() (*net.Resolver, time.Duration, error) {
	interval := DefaultEgressDNSInterval
	if c.EgressDNSInterval != "" {
		v, err := time.ParseDuration(c.EgressDNSInterval)
		if err != nil || v < time.Second {
			return nil, 0, fmt.Errorf("egressDNSInterval %q: want a duration of 1s or more", c.EgressDNSInterval)
		}
		interval = v
	}
	r := net.DefaultResolver
	if srv := c.EgressDNSServer; srv != "" {
		ap, err := netip.ParseAddrPort(srv)
		if err != nil {
			return nil, 0, fmt.Errorf("egressDNSServer %q: want IP:port: %w", srv, err)
		}
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, network, ap.String())
		}}
	}
	return r, interval, nil
}

func newEgressFirewalls(n *nodeState) (*egressFirewalls, error) {
	r, interval, err := n.cfg.egressDNS()
	if err != nil {
		return nil, err
	}
	return &egressFirewalls{n: n, resolver: r, interval: interval,
		objects: map[[2]string][]source.EgressRule{}, names: map[string][]netip.Addr{}}, nil
}

// SetEgressFirewall installs or replaces an egress firewall
// (source.EgressFirewallSink). It does not wait for DNS: while a name the
// object uses has not been resolved yet, the object's project gets a
// deny-all in its place (a Deny rule on a name not yet resolved must not
// let traffic through), and a goroutine resolves the names and installs the
// object's rules. The source's callback is not held up by a slow DNS
// server.
func (n *nodeState) SetEgressFirewall(namespace, name string, rules []source.EgressRule) error {
	e := n.egress
	e.mu.Lock()
	e.objects[[2]string{namespace, name}] = slices.Clone(rules)
	var unknown []string
	for _, r := range rules {
		if _, ok := e.names[r.DNSName]; r.DNSName != "" && !ok && !slices.Contains(unknown, r.DNSName) {
			unknown = append(unknown, r.DNSName)
		}
	}
	e.mu.Unlock()
	err := e.install(namespace, name)
	if len(unknown) > 0 {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for _, n := range unknown {
				e.resolve(context.Background(), n)
			}
			if err := e.install(namespace, name); err != nil {
				e.n.log.Error("egress firewall", "namespace", namespace, "name", name, "err", err)
			}
		}()
	}
	return err
}

// DeleteEgressFirewall removes an egress firewall.
func (n *nodeState) DeleteEgressFirewall(namespace, name string) error {
	e := n.egress
	e.mu.Lock()
	delete(e.objects, [2]string{namespace, name})
	e.mu.Unlock()
	return n.prog.DeleteEgressFirewall(namespace, name)
}

// resolve looks name up and records its IPv4 addresses; it reports
// whether they changed.
func (e *egressFirewalls) resolve(ctx context.Context, name string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := e.resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		e.n.log.Warn("egress firewall: DNS name does not resolve; its rule matches nothing", "name", name, "err", err)
		addrs = nil
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	e.mu.Lock()
	defer e.mu.Unlock()
	old, known := e.names[name]
	e.names[name] = addrs
	return !known || !slices.Equal(old, addrs)
}

// denyAll stands in for an object whose DNS names are not resolved yet.
var denyAll = []sdn.EgressRule{{To: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}}

// install hands one object, names resolved, to the rule program; while one
// of its names has not been resolved yet, a deny-all.
func (e *egressFirewalls) install(namespace, name string) error {
	e.mu.Lock()
	rules, ok := e.objects[[2]string{namespace, name}]
	var out []sdn.EgressRule
	for _, r := range rules {
		er := sdn.EgressRule{Allow: r.Allow}
		if r.DNSName != "" {
			addrs, known := e.names[r.DNSName]
			if !known {
				out = slices.Clone(denyAll)
				break
			}
			for _, a := range addrs {
				er.To = append(er.To, netip.PrefixFrom(a, 32))
			}
		} else {
			er.To = []netip.Prefix{r.CIDR}
		}
		out = append(out, er)
	}
	e.mu.Unlock()
	if !ok {
		return nil
	}
	return e.n.prog.SetEgressFirewall(namespace, name, out)
}

// follow resolves every name again each interval and reinstalls the
// objects whose names' addresses changed, until ctx ends.
func (e *egressFirewalls) follow(ctx context.Context) {
	t := time.NewTicker(e.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		names := make([]string, 0, len(e.names))
		for n := range e.names {
			names = append(names, n)
		}
		e.mu.Unlock()
		var changed []string
		for _, n := range names {
			if e.resolve(ctx, n) {
				changed = append(changed, n)
			}
		}
		if len(changed) == 0 {
			continue
		}
		e.mu.Lock()
		var keys [][2]string
		for k, rules := range e.objects {
			if slices.ContainsFunc(rules, func(r source.EgressRule) bool { return slices.Contains(changed, r.DNSName) }) {
				keys = append(keys, k)
			}
		}
		e.mu.Unlock()
		for _, k := range keys {
			if err := e.install(k[0], k[1]); err != nil {
				e.n.log.Error("egress firewall", "namespace", k[0], "name", k[1], "err", err)
			} else {
				e.n.log.Info("egress firewall: DNS names moved, rules updated", "namespace", k[0], "name", k[1], "names", changed)
			}
		}
	}
}
