package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// maxRequestID bounds the X-Request-Id that POST /echo accepts.
const maxRequestID = 128

// withEcho serves POST /echo and passes everything else to next. /echo
// writes "seen ID" to seen, one line per request, before it answers.
func withEcho(next http.Handler, name string, seen io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/echo" || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("X-Instance", name)
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			http.Error(w, "X-Request-Id: want 1 to 128 printable ASCII characters without spaces", http.StatusBadRequest)
			return
		}
		if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20)); err != nil {
			return // the client went away before sending its body: not seen
		}
		// One write per line, before the answer: a request its client saw
		// answered is always counted, and one whose instance died after
		// this line is counted once although its client saw it fail, which
		// is how the chaos benchmark tells a replay (seen twice) from a
		// failure.
		mu.Lock()
		_, err := fmt.Fprintf(seen, "seen %s\n", id)
		mu.Unlock()
		if err != nil {
			http.Error(w, "recording the request: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "%s %s\n", name, id)
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}
