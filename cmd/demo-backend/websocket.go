package main

import (
	"net/http"
	"time"

	"golang.org/x/net/websocket"
)

// Bounds of a WebSocket connection to /ws: a test's, not a chat's.
const (
	wsMaxMessage = 64 << 10
	wsLifetime   = time.Minute
)

// withWebSocket serves GET /ws, a WebSocket that answers each message with
// "NAME: message" (so a client knows which instance it reached), and passes
// everything else to next. A connection lasts at most wsLifetime.
func withWebSocket(next http.Handler, name string) http.Handler {
	ws := websocket.Server{Handler: func(c *websocket.Conn) {
		defer c.Close()
		c.MaxPayloadBytes = wsMaxMessage
		_ = c.SetDeadline(time.Now().Add(wsLifetime))
		for {
			var msg string
			if err := websocket.Message.Receive(c, &msg); err != nil {
				return // closed, too long, or past its lifetime
			}
			if err := websocket.Message.Send(c, name+": "+msg); err != nil {
				return
			}
		}
	}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Instance", name)
		ws.ServeHTTP(w, r)
	})
}
