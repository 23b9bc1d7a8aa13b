package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gvswitch/gvs/sdn/why"
)

// Viewer is an authenticated user of the console and what it may see.
type Viewer struct {
	// Name is the identity: a certificate's common name, or the user a
	// token belongs to.
	Name  string
	Scope Scope
}

// Authenticator decides who sent a request and what they may see. It
// returns ErrUnauthenticated when the request carries no credentials and
// another error when it carries ones that are refused.
type Authenticator interface {
	Authenticate(r *http.Request) (Viewer, error)
}

// Errors of authentication.
var (
	// ErrUnauthenticated: the request has no credentials.
	ErrUnauthenticated = errors.New("console: no credentials")
	// ErrForbidden: the credentials are valid but not admitted.
	ErrForbidden = errors.New("console: credentials not admitted")
)

// CertAuth admits the client certificates the TLS handshake verified
// against the cluster CA (the server's tls.Config has it as ClientCAs) that
// why.Allowed admits: gvs-master's and the administrators'. They see the
// whole cluster. A node's certificate is refused.
type CertAuth struct{}

// Authenticate implements Authenticator.
func (CertAuth) Authenticate(r *http.Request) (Viewer, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return Viewer{}, ErrUnauthenticated
	}
	c := r.TLS.PeerCertificates[0]
	if !why.Allowed(c) {
		return Viewer{}, fmt.Errorf("%w: certificate %q is not an administrator's", ErrForbidden, c.Subject.CommonName)
	}
	return Viewer{Name: c.Subject.CommonName, Scope: Scope{All: true}}, nil
}

// TokenCookie is the cookie the login form sets with the token.
const TokenCookie = "gvs-console-token"

// bearer returns the request's bearer token (Authorization header, else
// the login cookie).
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	if c, err := r.Cookie(TokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// TokenAuth admits Kubernetes bearer tokens: the API server says whose a
// token is (TokenReview) and what that user may see
// (SubjectAccessReview): a user who may list pods in every namespace sees
// the whole cluster; another sees the projects whose pods it may list
// (among those Projects returns), and nothing else. Decisions are cached
// for TTL per token (by its SHA-256). Methods are safe for concurrent use.
type TokenAuth struct {
	// Client is gvs-master's client of the API server; it needs create on
	// tokenreviews and subjectaccessreviews.
	Client kubernetes.Interface
	// Projects lists the namespaces to check a tenant's access to.
	Projects func(ctx context.Context) ([]string, error)
	// TTL is how long a decision is kept (0: 10 seconds).
	TTL time.Duration

	mu    sync.Mutex
	cache map[[32]byte]cachedViewer
}

type cachedViewer struct {
	v     Viewer
	err   error
	until time.Time
}

// Authenticate implements Authenticator.
func (a *TokenAuth) Authenticate(r *http.Request) (Viewer, error) {
	tok := bearer(r)
	if tok == "" {
		return Viewer{}, ErrUnauthenticated
	}
	key := sha256.Sum256([]byte(tok))
	now := time.Now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Before(c.until) {
		a.mu.Unlock()
		return c.v, c.err
	}
	a.mu.Unlock()
	v, err := a.review(r.Context(), tok)
	if err != nil && !errors.Is(err, ErrForbidden) {
		return v, err // the API server did not answer: not cached
	}
	ttl := a.TTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	a.mu.Lock()
	if a.cache == nil || len(a.cache) > 10000 {
		a.cache = map[[32]byte]cachedViewer{}
	}
	a.cache[key] = cachedViewer{v: v, err: err, until: now.Add(ttl)}
	a.mu.Unlock()
	return v, err
}

func (a *TokenAuth) review(ctx context.Context, tok string) (Viewer, error) {
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok}}, metav1.CreateOptions{})
	if err != nil {
		return Viewer{}, fmt.Errorf("console: token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return Viewer{}, fmt.Errorf("%w: the API server does not know the token", ErrForbidden)
	}
	u := tr.Status.User
	v := Viewer{Name: u.Username, Scope: Scope{Namespaces: map[string]bool{}}}
	all, err := a.may(ctx, u, "")
	if err != nil {
		return Viewer{}, err
	}
	if all {
		v.Scope.All = true
		return v, nil
	}
	names, err := a.Projects(ctx)
	if err != nil {
		return Viewer{}, err
	}
	for _, ns := range names {
		ok, err := a.may(ctx, u, ns)
		if err != nil {
			return Viewer{}, err
		}
		if ok {
			v.Scope.Namespaces[ns] = true
		}
	}
	return v, nil
}

// may asks the API server whether user u may list pods in namespace ns
// ("" for every namespace).
func (a *TokenAuth) may(ctx context.Context, u authnv1.UserInfo, ns string) (bool, error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{
		Spec: authzv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: "list", Resource: "pods"}},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("console: subject access review: %w", err)
	}
	return sar.Status.Allowed, nil
}
