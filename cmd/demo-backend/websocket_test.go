package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/net/websocket"
)

func TestWebSocket(t *testing.T) {
	srv := httptest.NewServer(withWebSocket(http.NotFoundHandler(), "web-3"))
	defer srv.Close()
	ws, err := websocket.Dial(strings.Replace(srv.URL, "http", "ws", 1)+"/ws", "", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, msg := range []string{"one", "two"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		if got != "web-3: "+msg {
			t.Errorf("echo of %q: %q", msg, got)
		}
	}
	// Anything else goes on.
	resp, err := http.Get(srv.URL + "/other")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /other: %d", resp.StatusCode)
	}
}
