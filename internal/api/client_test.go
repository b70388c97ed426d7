package api

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/shoal-lb/shoal/internal/jobrun"
)

// TestWaitJob long-polls until the job ends; only done is success.
func TestWaitJob(t *testing.T) {
	for _, final := range []jobrun.State{jobrun.Done, jobrun.Failed, jobrun.Ignored} {
		t.Run(string(final), func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "shoal.sock")
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int32
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/jobs/7" || r.URL.Query().Get("wait") == "" {
					t.Errorf("request %s: want a long poll of /v1/jobs/7", r.URL)
				}
				st := jobrun.Running
				if calls.Add(1) == 3 {
					st = final
				}
				json.NewEncoder(w).Encode(jobrun.Job{ID: "7", State: st, Reason: "the reason"})
			})}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			j, err := NewClient(sock).WaitJob(context.Background(), "7")
			if calls.Load() != 3 || j.State != final {
				t.Errorf("after %d polls: state %s, want %s after 3", calls.Load(), j.State, final)
			}
			switch {
			case final == jobrun.Done && err != nil:
				t.Errorf("done: %v", err)
			case final != jobrun.Done && (err == nil || !strings.Contains(err.Error(), string(final)+": the reason")):
				t.Errorf("%s: error %v, want one naming the state and reason", final, err)
			}
		})
	}
}
