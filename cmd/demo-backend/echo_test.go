package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestEcho(t *testing.T) {
	var seen strings.Builder
	srv := httptest.NewServer(withEcho(http.NotFoundHandler(), "web-7", &seen))
	defer srv.Close()
	post := func(id string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/echo", strings.NewReader("body"))
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get("X-Instance"); got != "web-7" {
			t.Errorf("POST /echo %q: X-Instance %q, want web-7", id, got)
		}
		return resp.StatusCode, string(body)
	}
	if c, body := post("r1-7"); c != 200 || body != "web-7 r1-7\n" {
		t.Errorf("POST /echo r1-7: %d %q, want 200 \"web-7 r1-7\\n\"", c, body)
	}
	if c, _ := post("r1-8"); c != 200 {
		t.Errorf("POST /echo r1-8: %d, want 200", c)
	}
	for _, bad := range []string{"", "a b", strings.Repeat("x", 129)} {
		if c, _ := post(bad); c != 400 {
			t.Errorf("POST /echo %q: %d, want 400", bad, c)
		}
	}
	if got, want := seen.String(), "seen r1-7\nseen r1-8\n"; got != want {
		t.Errorf("seen log %q, want %q", got, want)
	}
	// Everything else goes to the wrapped handler.
	resp, err := http.Get(srv.URL + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("GET /echo: %d, want the wrapped handler's 404", resp.StatusCode)
	}
}
