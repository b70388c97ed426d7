// Package dashboard is shoal's live web dashboard: a login form, an
// overview of the groups and the ssh providers' hosts (cordon and drain
// buttons) and a live view of each group (charts, decisions, instances
// with their marks and day-two buttons, scale and deploy buttons), served
// by the core on the admin TCP listener beside the API (api.WithUI).
//
// It computes nothing itself: the page calls the API with its session
// cookie (scale, deploy, the instances' acts, the hosts' acts, the metrics
// series), each act after a confirmation in the page, and the server-sent
// events stream (GET /ui/stream, one message a second) bundles what the
// API answers to status, metrics, events, jobs and host drains. The assets are embedded; the
// page loads nothing from elsewhere.
//
// A session starts at the login form and ends at logout or after
// SessionTTL:
//
//	GET /ui/ ──no session──► login page (401) ──POST /ui/login, right token──► cookie set ──► GET /ui/ (dashboard)
//	                                         └──wrong token──► login page (401), counted by the API
package dashboard

import (
	"bytes"
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// SessionTTL is how long a login lasts.
const SessionTTL = 12 * time.Hour

// cookieName is the session cookie.
const cookieName = "shoal_session"

// Bounds of the stream.
const (
	// tickEvery is how often the stream sends.
	tickEvery = time.Second
	// streamFor bounds one stream; the browser's EventSource reconnects.
	streamFor = time.Hour
	// liveWindow is the metrics window of the stream's live figures.
	liveWindow = "15s"
	// maxEvents bounds the decisions one message carries.
	maxEvents = 200
	// maxJobs is how many of a group's newest jobs the stream lists.
	maxJobs = 20
)

//go:embed assets
var assets embed.FS

var (
	pages    = template.Must(template.ParseFS(assets, "assets/*.html"))
	assetsFS = must(fs.Sub(assets, "assets"))
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err) // the embedded assets are part of the build
	}
	return v
}

// Handler serves the dashboard. It implements api.UI.
type Handler struct {
	ctx      context.Context
	api      http.Handler
	token    []byte
	log      *slog.Logger
	sessions *sessions
	mux      *http.ServeMux
}

// New returns the dashboard over api (the API's handler without its token
// check) for token. Its streams end when ctx does.
func New(ctx context.Context, api http.Handler, token string, log *slog.Logger) *Handler {
	d := &Handler{ctx: ctx, api: api, token: []byte(token), log: log, sessions: newSessions(SessionTTL, time.Now), mux: http.NewServeMux()}
	d.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	})
	d.mux.HandleFunc("GET /ui/{$}", d.index)
	// Browsers ask for it unbidden; answered here, it is no failed login.
	d.mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	d.mux.Handle("GET /ui/assets/", http.StripPrefix("/ui/assets/", http.FileServerFS(assetsFS)))
	d.mux.HandleFunc("GET /ui/stream", d.stream)
	d.mux.HandleFunc("POST /ui/logout", d.logout)
	d.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not found", http.StatusNotFound)
	})
	return d
}

func (d *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// Not no-referrer: with it a form POST carries "Origin: null", which
	// the login's Origin check refuses.
	h.Set("Referrer-Policy", "same-origin")
	// Nothing is inline in the pages; the chart is SVG drawn with
	// attributes and the stylesheet's classes.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	d.mux.ServeHTTP(w, r)
}

// loginPage is the login template's data.
type loginPage struct{ Error string }

func (d *Handler) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if !d.session(r) {
		d.loginPage(w, http.StatusUnauthorized, "")
		return
	}
	d.render(w, http.StatusOK, "index.html", nil)
}

func (d *Handler) loginPage(w http.ResponseWriter, code int, msg string) {
	d.render(w, code, "login.html", loginPage{Error: msg})
}

func (d *Handler) render(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		d.log.Error("dashboard: render page", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// maxLoginBody bounds the login form.
const maxLoginBody = 4 << 10

// Login answers POST /ui/login: with the right token it sets the session
// cookie and sends the browser to the dashboard; otherwise it shows the
// login page again. It reports whether the token was right.
func (d *Handler) Login(w http.ResponseWriter, r *http.Request) bool {
	w.Header().Set("Cache-Control", "no-store")
	if !sameOrigin(r, true) {
		// Login CSRF: another site must not log a browser in.
		d.log.Warn("dashboard login refused: cross-origin", "remote", r.RemoteAddr, "origin", truncate(r.Header.Get("Origin")))
		d.loginPage(w, http.StatusForbidden, "cross-origin login refused")
		return true // not a wrong token
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		d.loginPage(w, http.StatusBadRequest, "unreadable form")
		return true
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), d.token) != 1 {
		d.loginPage(w, http.StatusUnauthorized, "wrong token")
		return false
	}
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: d.sessions.create(), Path: "/",
		MaxAge: int(SessionTTL / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil,
	})
	d.log.Info("dashboard login", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	return true
}

// Authorized reports whether r carries a live session and, unless it only
// reads, comes from the dashboard's own origin: SameSite=Strict keeps the
// cookie off other sites' requests, the Origin check covers browsers that
// do not honour it.
func (d *Handler) Authorized(r *http.Request) bool {
	return d.session(r) && sameOrigin(r, r.Method != http.MethodGet && r.Method != http.MethodHead)
}

func (d *Handler) session(r *http.Request) bool {
	c, err := r.Cookie(cookieName)
	return err == nil && d.sessions.valid(c.Value)
}

// sameOrigin reports whether r's Origin header names the host it was sent
// to. When strict, a missing Origin fails too (browsers send it on every
// POST).
func sameOrigin(r *http.Request, strict bool) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return !strict
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host && (u.Scheme == "https") == (r.TLS != nil)
}

func (d *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !d.Authorized(r) {
		http.Error(w, "not logged in", http.StatusUnauthorized)
		return
	}
	c, _ := r.Cookie(cookieName)
	d.sessions.end(c.Value)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// call serves GET path from the API into v.
func (d *Handler) call(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	if err != nil {
		return fmt.Errorf("dashboard: GET %s: %w", path, err)
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	d.api.ServeHTTP(rec, req)
	if rec.code != http.StatusOK {
		return fmt.Errorf("dashboard: GET %s: %d %s", path, rec.code, bytes.TrimSpace(rec.body.Bytes()))
	}
	if err := json.Unmarshal(rec.body.Bytes(), v); err != nil {
		return fmt.Errorf("dashboard: GET %s: %w", path, err)
	}
	return nil
}

// recorder holds an in-process API answer.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// truncate keeps echoed input short in the log.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
