// Package console is gvs-master's web console: a read-only view of the
// cluster for an operator (docs/console.md).
//
//  1. Every request is authenticated first (Authenticator): a client
//     certificate of the cluster CA (CertAuth, the etcd-registry mode) or a
//     Kubernetes bearer token the API server vouches for (TokenAuth). A
//     request without credentials gets 401 and nothing else.
//  2. A Source reads the cluster (the registry or the API server, and the
//     nodes' port counters); the server keeps the last read for a moment
//     and cuts it down to what the viewer may see (View.For).
//  3. Pages are html/template files embedded in the binary (templates/),
//     with one small script (static/console.js) that keeps the page's
//     <main> current from a server-sent event stream (/events): nothing
//     is fetched from anywhere else.
//  4. The reachability matrix and the "why" page are sdn/why's Matrix and
//     Ask over a Tracer (the nodes' trace endpoints): the nodes' real
//     compiled tables, never a model of the rules kept here.
package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gvswitch/gvs/sdn/why"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Server. Source and Auth are required.
type Config struct {
	Source Source
	Auth   Authenticator
	// Tracer and Pods answer the matrix and the "why" page; nil leaves
	// those pages out (they say why).
	Tracer why.Tracer
	Pods   why.PodLister
	// TracerMissing says why there is no Tracer, on those pages.
	TracerMissing string
	// Login offers the token login form (Kubernetes mode).
	Login bool
	// Refresh is how often live pages are brought up to date (0: 2s).
	Refresh time.Duration
	// Log receives refusals and errors (nil: discarded).
	Log *slog.Logger
}

// Validate reports a Config that cannot serve.
func (c Config) Validate() error {
	if c.Source == nil || c.Auth == nil {
		return errors.New("console: Config needs a Source and an Authenticator")
	}
	return nil
}

// Server serves the console. Its methods are safe for concurrent use.
type Server struct {
	cfg   Config
	pages map[string]*template.Template
	mux   *http.ServeMux

	mu      sync.Mutex
	view    View
	viewErr error
	viewAt  time.Time
	matrix  map[string]cachedMatrix
}

type cachedMatrix struct {
	m  why.Reachability
	at time.Time
}

// pageNames are the pages, each templates/NAME.html defining "main".
var pageNames = []string{"map", "pods", "policies", "matrix", "why", "login"}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, pages: map[string]*template.Template{}, mux: http.NewServeMux(), matrix: map[string]cachedMatrix{}}
	for _, p := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	static, _ := fs.Sub(staticFS, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /login", s.loginForm)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	s.mux.Handle("GET /events", s.authed(s.events))
	s.mux.Handle("GET /{$}", s.authed(s.page("map")))
	for _, p := range []string{"pods", "policies", "matrix", "why"} {
		s.mux.Handle("GET /"+p, s.authed(s.page(p)))
	}
	return s, nil
}

// ServeHTTP implements http.Handler, with headers that keep the pages from
// being framed, sniffed or cached, and that allow no script but its own.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Strict-Transport-Security", "max-age=31536000")
	s.mux.ServeHTTP(w, r)
}

// authed runs h for authenticated requests only; the others get 401 (no
// or unknown credentials) or 403, and never a byte of the cluster.
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, v Viewer)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := s.cfg.Auth.Authenticate(r)
		if err != nil {
			s.cfg.Log.Warn("console: refused", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			s.refuse(w, r, err)
			return
		}
		h(w, r, v)
	})
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusUnauthorized
	msg := "This console needs a client certificate of the cluster CA (gvs-master cert admin NAME)."
	switch {
	case errors.Is(err, ErrForbidden):
		code, msg = http.StatusForbidden, "Your credentials are not admitted to this console."
	case !errors.Is(err, ErrUnauthenticated):
		code, msg = http.StatusServiceUnavailable, "The console cannot check credentials right now."
	}
	if s.cfg.Login {
		switch code {
		case http.StatusUnauthorized:
			msg = "Log in with a Kubernetes bearer token."
		case http.StatusForbidden:
			msg = "The API server does not admit this token."
		}
		if code == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="gvs-console"`)
		}
		w.WriteHeader(code)
		s.render(w, "login", nil, map[string]any{"Message": msg})
		return
	}
	http.Error(w, msg, code)
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Login {
		http.NotFound(w, r)
		return
	}
	s.render(w, "login", nil, map[string]any{"Message": "Log in with a Kubernetes bearer token."})
}

// login checks the posted token with the Authenticator before it sets the
// cookie, so that a refused token is told at once.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.cfg.Login {
		http.NotFound(w, r)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	probe := r.Clone(r.Context())
	probe.Header = http.Header{"Authorization": {"Bearer " + tok}}
	if _, err := s.cfg.Auth.Authenticate(probe); tok == "" || err != nil {
		if err == nil {
			err = ErrUnauthenticated
		}
		s.refuse(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: tok, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: true,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// load returns the Source's view, read at most once per Refresh/2 for
// every viewer together.
func (s *Server) load(ctx context.Context) (View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.viewAt.IsZero() && time.Since(s.viewAt) < s.cfg.Refresh/2 {
		return s.view, s.viewErr
	}
	v, err := s.cfg.Source.Load(ctx)
	if err == nil && s.viewErr == nil {
		v.rates(s.view)
	}
	s.view, s.viewErr = v, err
	s.viewAt = time.Now()
	return s.view, s.viewErr
}

// page serves page name: the whole document.
func (s *Server) page(name string) func(http.ResponseWriter, *http.Request, Viewer) {
	return func(w http.ResponseWriter, r *http.Request, v Viewer) {
		data, err := s.data(r.Context(), name, r, v)
		if err != nil {
			s.cfg.Log.Warn("console: page", "page", name, "err", err)
			http.Error(w, "cannot read the cluster: "+err.Error(), http.StatusBadGateway)
			return
		}
		s.render(w, name, &v, data)
	}
}

func (s *Server) render(w http.ResponseWriter, name string, v *Viewer, data any) {
	var b bytes.Buffer
	err := s.pages[name].ExecuteTemplate(&b, "layout.html", map[string]any{"Page": name, "Viewer": v, "D": data, "Login": s.cfg.Login})
	if err != nil {
		s.cfg.Log.Error("console: render", "page", name, "err", err)
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// fragment renders only page name's <main> content.
func (s *Server) fragment(ctx context.Context, name string, r *http.Request, v Viewer) ([]byte, error) {
	data, err := s.data(ctx, name, r, v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = s.pages[name].ExecuteTemplate(&b, "main", map[string]any{"Page": name, "Viewer": &v, "D": data})
	return b.Bytes(), err
}

// events streams page's <main> to the browser whenever it changes
// (server-sent events, event "main"); static/console.js swaps it in. The
// viewer is checked again on every refresh, so a token that loses its
// access stops the stream.
func (s *Server) events(w http.ResponseWriter, r *http.Request, _ Viewer) {
	name := r.URL.Query().Get("page")
	if _, ok := s.pages[name]; !ok || name == "login" {
		http.Error(w, "unknown page", http.StatusBadRequest)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 3000\n\n")
	fl.Flush()
	every := s.cfg.Refresh
	if name == "matrix" || name == "why" {
		every = 5 * every
	}
	t := time.NewTicker(every)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		// What the viewer may see is decided again (a token's access may
		// have changed; TokenAuth caches a decision for its TTL only).
		v, err := s.cfg.Auth.Authenticate(r)
		if err != nil {
			fmt.Fprint(w, "event: denied\ndata: credentials no longer admitted\n\n")
			fl.Flush()
			return
		}
		b, err := s.fragment(r.Context(), name, r, v)
		if err != nil {
			s.cfg.Log.Warn("console: events", "page", name, "err", err)
			continue
		}
		if bytes.Equal(b, last) {
			continue
		}
		last = b
		fmt.Fprint(w, "event: main\n")
		for _, line := range bytes.Split(b, []byte("\n")) {
			fmt.Fprintf(w, "data: %s\n", line)
		}
		fmt.Fprint(w, "\n")
		fl.Flush()
	}
}
