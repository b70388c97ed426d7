package main

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
)

// failures answers a share of requests 500, for outlier tests: POST
// /fail?share=0.5 sets the share (0 to 1) at run time; --fail-share sets
// it at start. /healthz is never failed: an outlier is alive and passes
// its checks, it answers its requests badly. The share is kept exactly,
// not drawn at random: with 0.5 every second request fails.
type failures struct {
	mu    sync.Mutex
	share float64
	acc   float64
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
		case r.URL.Path != "/healthz" && f.next():
			http.Error(w, "failing on purpose (--fail-share, /fail)", http.StatusInternalServerError)
			return
		}
		next.ServeHTTP(w, r)
	})
}
