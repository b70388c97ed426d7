package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/source"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestSourcesHistory: GET /v1/sources/history answers a command source's
// values as read, with its staleness in GET /v1/sources, and refuses bad
// parameters with 400 or 404 and the reason.
func TestSourcesHistory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g, err := group.New(ctx, webCfg, nil, nil, st, log)
	if err != nil {
		t.Fatal(err)
	}
	src := config.Source{Name: "backlog", Command: []string{"printf", "5"}, Interval: time.Second, Timeout: 5 * time.Second, OnMissing: config.SourceHold}
	set := source.NewSet(config.Metrics{Sources: []config.Source{src}, Retention: config.Retention{Ring: time.Hour}}, nil, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		set.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	began := time.Now()
	for deadline := time.Now().Add(10 * time.Second); set.Statuses()[0].Last.IsZero(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no read of printf within 10 s")
		}
	}
	h := NewHandler(nil, groupMap{g.Name(): g}, log, "", WithAutoscaling(Autoscaling{Store: st, Sources: set}))

	q := func(group string, from, to time.Time) string {
		return "/v1/sources/history?" + url.Values{"group": {group}, "from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}.Encode()
	}
	w := httptestDo(h, http.MethodGet, q("web", began.Add(-time.Minute), time.Now().Add(time.Second)))
	var r SourcesHistoryResponse
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &r) != nil || len(r.Sources) != 1 ||
		r.Sources[0].Name != "backlog" || len(r.Sources[0].Points) == 0 || r.Sources[0].Points[0].V != 5 || r.Sources[0].PerInstance {
		t.Errorf("history: %d %s; want backlog's 5", w.Code, w.Body)
	}
	w = httptestDo(h, http.MethodGet, "/v1/sources")
	var ss SourcesResponse
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &ss) != nil || len(ss.Sources) != 1 || ss.Sources[0].Stale || ss.Sources[0].Value == nil || *ss.Sources[0].Value != 5 {
		t.Errorf("sources: %d %s; want backlog fresh at 5", w.Code, w.Body)
	}

	now := time.Now()
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{q("nope", now.Add(-time.Minute), now), http.StatusNotFound, `unknown group \"nope\"`},
		{"/v1/sources/history?group=web&from=yesterday&to=" + url.QueryEscape(now.Format(time.RFC3339)), http.StatusBadRequest, "from: want an RFC 3339 time"},
		{q("web", now, now.Add(-time.Minute)), http.StatusBadRequest, "want from before to"},
		{q("web", now.Add(-48*time.Hour), now), http.StatusBadRequest, "at most 24h0m0s apart"},
	} {
		w := httptestDo(h, http.MethodGet, tc.path)
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
			t.Errorf("GET %s: %d %s, want %d with %q", tc.path, w.Code, w.Body, tc.code, tc.want)
		}
	}
}
