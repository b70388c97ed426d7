package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFailures: POST /fail sets the share of 500s exactly, /healthz never
// fails, and a bad share is refused.
func TestFailures(t *testing.T) {
	h := withFailures(&failures{}, newHandler("a", http.StatusOK))
	do := func(method, path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code
	}
	if c := do("GET", "/"); c != 200 {
		t.Fatalf("before /fail: %d", c)
	}
	for _, bad := range []string{"/fail?share=2", "/fail?share=x", "/fail"} {
		if c := do("POST", bad); c != 400 {
			t.Fatalf("POST %s: %d, want 400", bad, c)
		}
	}
	if c := do("POST", "/fail?share=0.5"); c != 200 {
		t.Fatalf("POST /fail: %d", c)
	}
	failed := 0
	for range 100 {
		if do("GET", "/") == 500 {
			failed++
		}
		if c := do("GET", "/healthz"); c != 200 {
			t.Fatalf("/healthz: %d", c)
		}
	}
	if failed != 50 {
		t.Fatalf("%d of 100 failed, want 50", failed)
	}
	do("POST", "/fail?share=0")
	if c := do("GET", "/"); c != 200 {
		t.Fatalf("after share 0: %d", c)
	}
	if c := do("POST", "/slow?ms=-1"); c != 400 {
		t.Fatalf("POST /slow?ms=-1: %d, want 400", c)
	}
	do("POST", "/slow?ms=100")
	start := time.Now()
	if c := do("GET", "/"); c != 200 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("slow: %d after %s", c, time.Since(start))
	}
	start = time.Now()
	if do("GET", "/healthz"); time.Since(start) >= 100*time.Millisecond {
		t.Fatal("/healthz delayed")
	}
}
