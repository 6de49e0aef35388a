// Package dashboard is agq's web dashboard, served on the HTTP side port:
// queues, jobs, failed jobs, workers and schedules, read through the same
// store functions the RESP commands use and changed through the same
// operations (commands.Server's). Pages are rendered on the server with
// html/template; a small script refreshes their live parts by polling
// while a page is open and visible, so nothing runs when nobody looks.
package dashboard

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/auth"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Config configures the dashboard.
type Config struct {
	// Prefix is the path the dashboard is served under, with a leading and
	// a trailing slash ("/" or "/agq/").
	Prefix string
	// NodeID names this node on the overview; IsLeader says whether it
	// runs the leader's services.
	NodeID   string
	IsLeader func() bool
	// SessionTTL is how long a sign-in lasts (default 12 h).
	SessionTTL time.Duration
	Logger     zerolog.Logger
	// Explain words a refused action as the RESP command's error reply
	// words it; false for an error that is not a refusal.
	Explain func(error) (string, bool)
}

// Dashboard serves the pages.
type Dashboard struct {
	cfg      Config
	prefix   string
	eng      api.Engine
	keys     auth.Keys
	signer   signer
	keyCheck *keyCheck
	pages    map[string]*template.Template
	mux      *http.ServeMux
	views    views
	log      zerolog.Logger
}

// New builds the dashboard. The signing secret is read from the database
// (created there by the first node), so every node honours every session.
// Every change it makes goes through the engine's operations, with the
// rules and events of the RESP commands.
func New(ctx context.Context, cfg Config, st api.Engine, keys auth.Keys) (*Dashboard, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "/"
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("dashboard prefix %q must begin and end with /", cfg.Prefix)
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.Explain == nil {
		cfg.Explain = func(error) (string, bool) { return "", false }
	}
	if cfg.IsLeader == nil {
		cfg.IsLeader = func() bool { return false }
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	secret, err := st.DashboardSecret(ctx, fresh)
	if err != nil {
		return nil, fmt.Errorf("reading the dashboard's signing secret: %w", err)
	}
	d := &Dashboard{
		cfg:      cfg,
		prefix:   cfg.Prefix,
		eng:      st,
		keys:     keys,
		signer:   signer{secret: secret},
		keyCheck: &keyCheck{keys: keys, seen: map[string]time.Time{}},
		log:      cfg.Logger,
		views:    views{byName: map[string]*view{}},
	}
	if d.pages, err = parsePages(d.funcs()); err != nil {
		return nil, err
	}
	d.routes()
	return d, nil
}

func (d *Dashboard) routes() {
	p := d.prefix
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	m.Handle("GET "+p+"static/", http.StripPrefix(p+"static/", cacheFor(time.Hour, http.FileServerFS(static))))
	// Pages name their icon; a browser that asks the usual path anyway
	// gets it there too rather than a 404 in the log.
	m.Handle("GET "+p+"favicon.ico", cacheFor(time.Hour, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, static, "favicon.svg")
	})))
	m.HandleFunc("GET "+p+"login", d.loginPage)
	m.HandleFunc("POST "+p+"login", d.login)
	m.HandleFunc("POST "+p+"logout", d.withSession(true, d.logout))
	m.HandleFunc("GET "+p+"{$}", d.withSession(false, d.overviewPage))
	m.HandleFunc("GET "+p+"queue", d.withSession(false, d.queuePage))
	m.HandleFunc("GET "+p+"job", d.withSession(false, d.jobPage))
	m.HandleFunc("GET "+p+"failed", d.withSession(false, d.failedPage))
	m.HandleFunc("GET "+p+"workers", d.withSession(false, d.workersPage))
	m.HandleFunc("GET "+p+"schedules", d.withSession(false, d.schedulesPage))
	m.HandleFunc("GET "+p+"search", d.withSession(false, d.search))
	m.HandleFunc("POST "+p+"action/{name}", d.withSession(true, d.action))
	m.HandleFunc("GET "+p+"namespace", d.withSession(false, d.pickNamespace))
	d.mux = m
}

// ServeHTTP serves every dashboard path with headers that keep the pages
// from being framed, sniffed or sent elsewhere, and scripts and styles to
// the dashboard's own files.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

func cacheFor(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("private, max-age=%d", int(d.Seconds())))
		h.ServeHTTP(w, r)
	})
}

// withSession refuses requests without a valid session: pages send the
// browser to sign in, live refreshes get 401. Actions (post) also need
// the session's CSRF token and a role that may act.
func (d *Dashboard) withSession(post bool, h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, err := d.sessionOf(r)
		if err != nil {
			if !errors.Is(err, errNoSession) && !errors.Is(err, errBadSession) {
				d.log.Warn().Err(err).Msg("dashboard: checking a session failed")
				http.Error(w, "database unavailable, retry later", http.StatusServiceUnavailable)
				return
			}
			if errors.Is(err, errBadSession) {
				d.setCookie(w, r, "", -1)
			}
			if post || r.Header.Get("X-AGQ-Live") != "" {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, d.prefix+"login", http.StatusSeeOther)
			return
		}
		if post {
			token := r.PostFormValue("csrf")
			if token == "" {
				token = r.Header.Get("X-CSRF-Token")
			}
			if !d.signer.csrfValid(sess, token) {
				http.Error(w, "missing or wrong CSRF token: reload the page and try again", http.StatusForbidden)
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		if err := d.enter(r, &sess); err != nil {
			d.fail(w, "namespace", err)
			return
		}
		h(w, r, sess)
	}
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, err := d.sessionOf(r); err == nil {
		http.Redirect(w, r, d.prefix, http.StatusSeeOther)
		return
	}
	d.render(w, r, http.StatusOK, "login", nil, pageData{Title: "Sign in"})
}

// login takes an admin or viewer key from the form body (never the URL),
// and answers a signed session cookie. The key itself is not kept.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimSpace(r.PostFormValue("key"))
	p, err := d.keys.Authenticate(r.Context(), "", key)
	status, msg := http.StatusOK, ""
	switch {
	case errors.Is(err, auth.ErrBadCredentials):
		// Slows down guessing from one browser; keys are 256 random bits.
		time.Sleep(500 * time.Millisecond)
		status, msg = http.StatusUnauthorized, "That key is not valid."
	case err != nil:
		d.log.Warn().Err(err).Msg("dashboard: checking a key failed")
		status, msg = http.StatusServiceUnavailable, "The database is unavailable; try again."
	case p.Role != auth.RoleAdmin && p.Role != auth.RoleViewer:
		status, msg = http.StatusForbidden, "Only admin and viewer keys may use the dashboard."
	}
	if msg != "" {
		d.render(w, r, status, "login", nil, pageData{Title: "Sign in", Error: msg})
		return
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	sess := session{Principal: p.Name, Role: p.Role, Digest: fmt.Sprintf("%x", p.Digest),
		Expires: time.Now().Add(d.cfg.SessionTTL).Unix(), Nonce: fmt.Sprintf("%x", nonce), Namespace: p.Namespace}
	d.setCookie(w, r, d.signer.encode(sess), int(d.cfg.SessionTTL.Seconds()))
	d.log.Info().Str("principal", p.Name).Str("role", p.Role).Msg("dashboard: signed in")
	http.Redirect(w, r, d.prefix, http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request, _ session) {
	d.setCookie(w, r, "", -1)
	http.Redirect(w, r, d.prefix+"login", http.StatusSeeOther)
}
