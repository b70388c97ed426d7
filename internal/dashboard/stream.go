package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/jobrun"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// Message is one message of the stream: what the API answers, bundled.
type Message struct {
	Time   time.Time          `json:"time"`
	Status api.StatusResponse `json:"status"`
	// Live are each group's metrics over the last 15 s, by name.
	Live map[string]*metrics.Document `json:"live"`
	// Last is each group's newest decision, by name.
	Last map[string]api.Event `json:"last"`
	// Jobs are the newest jobs of the stream's group (?group=), Events its
	// decisions and the events of no group since the previous message (the
	// newest 200 in the first).
	Jobs   []jobrun.Job `json:"jobs,omitempty"`
	Events []api.Event  `json:"events,omitempty"`
	// Drains are the host drains of this run of shoal, newest first, when
	// a provider places instances on hosts (status.hosts).
	Drains []api.HostDrain `json:"drains,omitempty"`
	// Deploy is the stream's group's deploy: a running canary's step,
	// weights and figures (GET /v1/groups/{group}/deploy).
	Deploy *api.DeployStatus `json:"deploy,omitempty"`
	// Sources are metrics.sources' states (GET /v1/sources): never their
	// credentials.
	Sources []api.SourceStatus `json:"sources,omitempty"`
	// Errors are the API calls that failed.
	Errors []string `json:"errors,omitempty"`
}

// stream is GET /ui/stream?group=G: a Message a second as server-sent
// events, until the client goes, the core stops, an hour has passed or the
// session ends (logout, expiry): it is checked before each message.
func (d *Handler) stream(w http.ResponseWriter, r *http.Request) {
	if !d.Authorized(r) {
		http.Error(w, "not logged in", http.StatusUnauthorized)
		return
	}
	group := r.URL.Query().Get("group")
	ctx, cancel := context.WithTimeout(r.Context(), streamFor)
	defer cancel()
	stop := context.AfterFunc(d.ctx, cancel)
	defer stop()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	var after int64 = -1 // no decisions read yet
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	for {
		m := d.message(ctx, group, &after)
		b, err := json.Marshal(m)
		if err != nil {
			d.log.Error("dashboard: encode message", "err", err)
			return
		}
		// The admin listener's write timeout is for requests; a stream
		// renews its own.
		_ = rc.SetWriteDeadline(time.Now().Add(10 * tickEvery))
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.session(r) {
			return
		}
	}
}

// message gathers one Message; after is the newest decision of group sent
// so far (-1 before the first).
func (d *Handler) message(ctx context.Context, group string, after *int64) Message {
	m := Message{Time: time.Now(), Live: map[string]*metrics.Document{}, Last: map[string]api.Event{}}
	fail := func(err error) { m.Errors = append(m.Errors, err.Error()) }
	if err := d.call(ctx, "/v1/status", &m.Status); err != nil {
		fail(err)
	}
	for _, g := range m.Status.Groups {
		q := url.Values{"window": {liveWindow}}
		var doc metrics.Document
		if err := d.call(ctx, "/v1/groups/"+url.PathEscape(g.Name)+"/metrics?"+q.Encode(), &doc); err != nil {
			fail(err)
		} else {
			m.Live[g.Name] = &doc
		}
		var ev api.EventsResponse
		if err := d.call(ctx, "/v1/events?"+url.Values{"group": {g.Name}, "limit": {"1"}}.Encode(), &ev); err != nil {
			fail(err)
		} else if len(ev.Events) > 0 {
			m.Last[g.Name] = ev.Events[0]
		}
	}
	var srcs api.SourcesResponse
	if err := d.call(ctx, "/v1/sources", &srcs); err != nil {
		fail(err)
	}
	m.Sources = srcs.Sources
	if len(m.Status.Hosts) > 0 {
		var dr api.HostDrainsResponse
		if err := d.call(ctx, "/v1/hosts/drains", &dr); err != nil {
			fail(err)
		}
		m.Drains = dr.Drains
	}
	if group == "" {
		return m
	}
	var js api.JobsResponse
	if err := d.call(ctx, "/v1/jobs?"+url.Values{"group": {group}, "limit": {fmt.Sprint(maxJobs)}}.Encode(), &js); err != nil {
		fail(err)
	}
	m.Jobs = js.Jobs
	var dep api.DeployStatus
	if err := d.call(ctx, "/v1/groups/"+url.PathEscape(group)+"/deploy", &dep); err != nil {
		fail(err)
	} else {
		m.Deploy = &dep
	}
	// A host's, HAProxy's or a certificate's events belong to no group and
	// concern each.
	q := url.Values{"group": {group}, "ungrouped": {"true"}, "limit": {fmt.Sprint(maxEvents)}}
	if *after >= 0 {
		q.Set("after", fmt.Sprint(*after))
	}
	var ev api.EventsResponse
	if err := d.call(ctx, "/v1/events?"+q.Encode(), &ev); err != nil {
		fail(err)
	}
	m.Events = ev.Events
	*after = max(*after, 0)
	for _, e := range ev.Events {
		*after = max(*after, e.ID)
	}
	return m
}
