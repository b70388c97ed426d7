package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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

func TestRunOpenLoop(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()

	// Three trace minutes compressed 60× into three seconds at scale 0.5:
	// 600/min → 5 req/s, 1200/min → 10, 0 → 0.
	tracePath := filepath.Join(dir, "trace.csv")
	os.WriteFile(tracePath, []byte("timestamp_utc,requests\n1998-06-30T08:00:00Z,600\n1998-06-30T08:01:00Z,1200\n1998-06-30T08:02:00Z,0\n"), 0o600)
	csvPath := filepath.Join(dir, "timeline.csv")
	var out strings.Builder
	err := run(context.Background(), []string{"--url", srv.URL, "--trace", tracePath, "--from", "1998-06-30T08:00",
		"--to", "1998-06-30T08:03", "--speedup", "60", "--scale", "0.5", "--timeline-csv", csvPath, "--json"}, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var res openJSON
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if res.Scheduled != 15 || res.Completed != 15 || len(res.Timeline) != 3 || res.Timeline[1].ScheduledRate != 10 {
		t.Errorf("result %+v, want 5+10+0 requests over 3 seconds", res)
	}
	data, err := os.ReadFile(csvPath)
	if err != nil || !strings.HasPrefix(string(data), "second,scheduled_rate,") || strings.Count(string(data), "\n") != 4 {
		t.Errorf("timeline CSV %q, %v", data, err)
	}

	out.Reset()
	if err := run(context.Background(), []string{"-url", srv.URL, "-rate", "50", "-duration", "200ms"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "10 scheduled") {
		t.Errorf("summary:\n%s\nwant 10 scheduled", out.String())
	}

	for _, args := range [][]string{
		{"-rate", "10", "-steps", "10:1s"},
		{"-rate", "10", "-c", "4"},
		{"-rate", "0"},
		{"-steps", "10:1s", "-d", "5s"},
		{"-trace", tracePath, "-from", "1998-06-30T08:00"},
		{"-trace", tracePath, "-from", "1998-06-30T08:00", "-to", "1998-06-30T09:00"},
		{"-speedup", "60"},
		{"-timeline-csv", csvPath},
	} {
		err := run(context.Background(), append([]string{"-url", srv.URL}, args...), io.Discard, io.Discard)
		if err == nil || errors.Is(err, errFailures) {
			t.Errorf("run %q: %v, want a usage error", args, err)
		}
	}
}
