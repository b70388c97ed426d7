package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestHandler(t *testing.T) {
	srv := httptest.NewServer(newHandler("web-7", http.StatusOK))
	defer srv.Close()

	tests := []struct {
		path        string
		status      int
		contentType string
		body        string // substring
	}{
		{"/", 200, "text/html; charset=utf-8", "Served by web-7"},
		{"/healthz", 200, "text/plain; charset=utf-8", "ok\n"},
		{"/work?ms=20", 200, "text/plain; charset=utf-8", "web-7 worked"},
		{"/work?ms=0", 200, "text/plain; charset=utf-8", "web-7 worked 0ms"},
		{"/work?ms=abc", 400, "", "ms:"},
		{"/work?ms=-1", 400, "", "ms:"},
		{"/work", 400, "", "ms:"},
		{"/work?ms=0&wait=x", 400, "", "wait:"},
		{"/work?ms=0&wait=5", 200, "text/plain; charset=utf-8", "web-7 worked 0ms"},
		{"/missing", 404, "", ""},
	}
	for _, tt := range tests {
		resp, body := get(t, srv.URL+tt.path)
		if resp.StatusCode != tt.status {
			t.Errorf("GET %s: status %d, want %d", tt.path, resp.StatusCode, tt.status)
		}
		if got := resp.Header.Get("X-Instance"); got != "web-7" {
			t.Errorf("GET %s: X-Instance %q, want web-7", tt.path, got)
		}
		if tt.contentType != "" && resp.Header.Get("Content-Type") != tt.contentType {
			t.Errorf("GET %s: Content-Type %q, want %q", tt.path, resp.Header.Get("Content-Type"), tt.contentType)
		}
		if !strings.Contains(body, tt.body) {
			t.Errorf("GET %s: body %.80q does not contain %q", tt.path, body, tt.body)
		}
	}
}

func TestPage(t *testing.T) {
	a, b := renderPage("web-1"), renderPage("web-1")
	if string(a) != string(b) {
		t.Error("page is not deterministic")
	}
	if n := len(a); n < 8<<10 || n > 10<<10 {
		t.Errorf("page is %d bytes, want about 9 KB", n)
	}
	if p := string(renderPage(`<b>&`)); !strings.Contains(p, "&lt;b&gt;&amp;") {
		t.Error("instance name is not HTML-escaped")
	}
}

func TestWorkBurnsCPU(t *testing.T) {
	r := httptest.NewRequest("GET", "/work?ms=30", nil)
	used, err := burnCPU(r, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if used < 30*time.Millisecond || used > time.Second {
		t.Errorf("burnCPU used %v of CPU, want about 30ms", used)
	}
}

func TestRunShutsDown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--name", "x"}, io.Discard) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRequiresListen(t *testing.T) {
	if err := run(context.Background(), nil, io.Discard); err == nil || !strings.Contains(err.Error(), "--listen") {
		t.Errorf("run without --listen: %v, want an error naming --listen", err)
	}
}

// TestWorkers: with one worker, /work requests are served one at a time, so
// two concurrent requests that each wait 200 ms take 400 ms together.
func TestWorkers(t *testing.T) {
	srv := httptest.NewServer(withWorkers(1, newHandler("web-1", http.StatusOK)))
	defer srv.Close()
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/work?ms=0&wait=200")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("two requests on one worker took %v, want >= 400ms: they ran at once", took)
	}
}
