package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRunJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Instance", r.Header.Get("X-Want"))
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()

	var out strings.Builder
	err := run(context.Background(), []string{"-url", srv.URL + "/", "-c", "2", "-n", "20", "-H", "X-Want: web-3", "-json"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var res jsonResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if res.Requests != 20 || res.Failures != 0 || res.ByInstance["web-3"] != 20 || res.RPS <= 0 {
		t.Errorf("unexpected result %+v", res)
	}

	out.Reset()
	err = run(context.Background(), []string{"-url", srv.URL + "/fail", "-n", "3"}, &out, io.Discard)
	if !errors.Is(err, errFailures) {
		t.Errorf("run with failing requests: %v, want errFailures", err)
	}
	if !strings.Contains(out.String(), "HTTP 502") {
		t.Errorf("summary lacks the failure sample:\n%s", out.String())
	}
}

func TestHeaderFlag(t *testing.T) {
	h := http.Header{}
	if err := headerFlag(h).Set("Host: example.test"); err != nil || h.Get("Host") != "example.test" {
		t.Errorf("Set: %v, header %v", err, h)
	}
	if err := headerFlag(h).Set("no colon"); err == nil {
		t.Error("Set accepted a header without a colon")
	}
}
