package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gvswitch/gvs/sdn/pki"
)

// ErrInsecure is returned when a plain-text endpoint is asked for without
// DialConfig.Insecure, or when TLS is asked for without client
// certificate files.
var ErrInsecure = errors.New("registry: plain-text etcd endpoints are refused unless configured as insecure (lab use only)")

// DialConfig says how to reach etcd. The registry is spoken to over TLS
// with a client certificate (its common name is the etcd user) unless
// Insecure is set.
type DialConfig struct {
	// Endpoints are etcd client URLs: https://HOST:PORT or
	// unixs://PATH; with Insecure, http:// and unix:// too.
	Endpoints []string
	// TLS names the CA, certificate and key files of this client.
	TLS pki.Files
	// Client, when set, is the TLS identity to use instead of loading TLS
	// (the caller keeps it to see which certificate is in use).
	Client *pki.Client
	// Insecure allows plain-text endpoints without certificates (lab use:
	// anyone who reaches the endpoint then reads and writes the network).
	Insecure bool
	// DialTimeout defaults to 5 s.
	DialTimeout time.Duration
	// Logger receives the warning about an insecure connection; nil
	// discards it.
	Logger *slog.Logger
}

// secureScheme reports whether an endpoint's scheme is TLS; ok is false for
// an unknown scheme.
func secureScheme(ep string) (secure, ok bool) {
	scheme, _, found := strings.Cut(ep, "://")
	if !found {
		return false, false
	}
	switch scheme {
	case "https", "unixs":
		return true, true
	case "http", "unix":
		return false, true
	}
	return false, false
}

// Validate reports whether the configuration is usable and safe: no
// plain-text endpoint without Insecure, and certificate files that load
// whenever an endpoint uses TLS.
func (c *DialConfig) Validate() error {
	anyTLS, err := c.checkEndpoints()
	if err != nil {
		return err
	}
	if anyTLS && c.Client == nil {
		if c.TLS.IsZero() {
			return fmt.Errorf("%w: TLS endpoints need a CA file, a client certificate and its key", ErrInsecure)
		}
		if err := c.TLS.Validate(); err != nil {
			return fmt.Errorf("registry: client certificate: %w", err)
		}
	}
	return nil
}

// CheckEndpoints is Validate without the certificate files: the endpoints
// are well formed and none is plain text unless Insecure is set.
func (c *DialConfig) CheckEndpoints() error {
	_, err := c.checkEndpoints()
	return err
}

func (c *DialConfig) checkEndpoints() (anyTLS bool, err error) {
	if len(c.Endpoints) == 0 {
		return false, errors.New("registry: no etcd endpoints")
	}
	anyPlain := false
	for _, ep := range c.Endpoints {
		secure, ok := secureScheme(ep)
		switch {
		case !ok:
			return false, fmt.Errorf("registry: endpoint %q: want https://HOST:PORT or unixs://PATH", ep)
		case !secure && !c.Insecure:
			return false, fmt.Errorf("%w: %s", ErrInsecure, ep)
		case secure:
			anyTLS = true
		default:
			anyPlain = true
		}
	}
	if anyTLS && anyPlain {
		return false, errors.New("registry: endpoints mix TLS and plain text")
	}
	return anyTLS, nil
}

// Dial connects to etcd as c says. It fails when Validate does.
func Dial(c DialConfig) (*clientv3.Client, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cfg := clientv3.Config{
		Endpoints:            c.Endpoints,
		DialTimeout:          c.DialTimeout,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		// The client's own retry chatter is not logged; callers log what
		// they act on.
		Logger: zap.NewNop(),
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if s, _ := secureScheme(c.Endpoints[0]); s {
		tc := c.Client
		if tc == nil {
			var err error
			if tc, err = c.TLS.NewClient(); err != nil {
				return nil, fmt.Errorf("registry: %w", err)
			}
		}
		cfg.TLS = tc.Config
	} else if c.Logger != nil {
		c.Logger.Warn("etcd connection is plain text and unauthenticated (insecure): anyone who reaches the endpoint can read and change the network",
			"endpoints", c.Endpoints)
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd %v: %w", c.Endpoints, err)
	}
	return cli, nil
}
