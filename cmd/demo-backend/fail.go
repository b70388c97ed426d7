package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// failures answers a share of requests 500, or every request late, for
// outlier tests: POST /fail?share=0.5 sets the share (0 to 1) at run time
// (--fail-share at start), POST /slow?ms=N the delay. /healthz is never
// failed or delayed: an outlier is alive and passes its checks, it answers
// its requests badly. The share is kept exactly, not drawn at random: with
// 0.5 every second request fails.
type failures struct {
	mu    sync.Mutex
	share float64
	acc   float64
	delay time.Duration
}

func (f *failures) set(share float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.share, f.acc = share, 0
}

// next reports whether this request fails.
func (f *failures) next() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acc += f.share
	if f.acc >= 1 {
		f.acc--
		return true
	}
	return false
}

func validShare(s float64) bool { return s >= 0 && s <= 1 }

func withFailures(f *failures, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/fail" && r.Method == http.MethodPost:
			share, err := strconv.ParseFloat(r.URL.Query().Get("share"), 64)
			if err != nil || !validShare(share) {
				http.Error(w, "share: want a number from 0 to 1", http.StatusBadRequest)
				return
			}
			f.set(share)
			fmt.Fprintf(w, "failing %g of requests\n", share)
			return
		case r.URL.Path == "/slow" && r.Method == http.MethodPost:
			ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
			if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > maxWork {
				http.Error(w, fmt.Sprintf("ms: want milliseconds from 0 to %d", maxWork.Milliseconds()), http.StatusBadRequest)
				return
			}
			f.mu.Lock()
			f.delay = time.Duration(ms) * time.Millisecond
			f.mu.Unlock()
			fmt.Fprintf(w, "answering %dms late\n", ms)
			return
		case r.URL.Path == "/healthz":
		case f.next():
			http.Error(w, "failing on purpose (--fail-share, /fail)", http.StatusInternalServerError)
			return
		}
		f.mu.Lock()
		delay := f.delay
		f.mu.Unlock()
		if delay > 0 && r.URL.Path != "/healthz" {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
