package api

import (
	"net/http/pprof"
)

// WithPprof serves Go's profiles under /debug/pprof/ (`shoal serve
// --pprof`). Core adds it to the unix socket's handler only: the socket is
// 0600, so only shoal's user may profile it, and a TCP listener never
// exposes it.
func WithPprof() Option {
	return func(h *Handler) {
		h.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		h.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		h.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		h.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		h.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}
