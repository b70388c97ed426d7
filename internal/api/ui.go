package api

import (
	"net/http"
	"strings"
)

// UI is a browser front end served on the token-guarded TCP listener beside
// the API (internal/dashboard). Its pages are open to anyone (they ask for a
// login); a request carrying a session it issued is served as if it carried
// the token.
type UI interface {
	// ServeHTTP serves "/", /favicon.ico and the paths under /ui/ but
	// the login.
	http.Handler
	// Login answers POST /ui/login and reports whether the token given was
	// right: the API counts wrong ones against the address, as it counts
	// wrong bearer tokens.
	Login(w http.ResponseWriter, r *http.Request) bool
	// Authorized reports whether r carries a live session and, for a
	// method that changes something, comes from the UI's own origin.
	Authorized(r *http.Request) bool
}

// NewUI builds the UI from the API it calls: the handler without the token
// check, which the UI has done.
type NewUI func(api http.Handler) UI

// WithUI serves the UI that newUI builds on a listener with a token.
func WithUI(newUI NewUI) Option {
	return func(h *Handler) { h.newUI = newUI }
}

// uiLogin is the path of the UI's login form.
const uiLogin = "/ui/login"

// isUIPath reports whether path is the UI's rather than the API's.
func isUIPath(path string) bool {
	return path == "/" || path == "/favicon.ico" || strings.HasPrefix(path, "/ui/")
}
