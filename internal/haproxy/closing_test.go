package haproxy

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// TestClosing: on an HA node's frontend, Closing(true) makes every answer
// close its connection and Closing(false) keeps connections alive again;
// Requests counts a request in progress, and none once it ended. Real
// HAProxy and HTTP.
func TestClosing(t *testing.T) {
	ctx := context.Background()
	m, cfg, port := startEdited(t, func(cfg *config.Config) {
		cfg.HA = &config.HA{VIP: &config.HAVIP{Address: "10.0.0.100/24", Interface: "eth0"}}
	})
	b := startBackend(t, "web-1")
	if err := m.AddServer(ctx, Server{Backend: "web", Name: "web-1", Addr: loopback(b.port), Health: cfg.Groups[0].Health}, true); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, m, map[string]string{"web-1": "UP"}, true)
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	// closes reports whether HAProxy's answer closed the connection.
	closes := func() bool {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Close
	}
	if closes() {
		t.Fatal("an answer closed its connection before Closing")
	}
	if err := m.Closing(ctx, true); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !closes() {
			t.Fatal("an answer kept its connection alive after Closing(true)")
		}
	}
	if err := m.Closing(ctx, false); err != nil {
		t.Fatal(err)
	}
	if closes() {
		t.Fatal("an answer closed its connection after Closing(false)")
	}

	done := make(chan error, 1)
	go func() {
		_, err := get(&http.Client{Timeout: 5 * time.Second}, url+"slow?d=800ms")
		done <- err
	}()
	waitFor(t, 3*time.Second, "the slow request to be counted", func() (bool, string) {
		n, err := m.Requests(ctx)
		return err == nil && n == 1, fmt.Sprint(n, err)
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, err := m.Requests(ctx); err != nil || n != 0 {
		t.Fatalf("Requests after the request ended: %d, %v; want 0", n, err)
	}
}
