package notify

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/job"
	"github.com/shoal-lb/shoal/internal/store"
)

const groups = "groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}, {name: api, path_prefixes: [/api], min_size: 1, max_size: 2, template: {command: [app]}}]\n"

// parse loads a config whose notify section is notify.
func parse(t *testing.T, notify string) config.Notify {
	t.Helper()
	cfg, err := config.Parse(filepath.Join(t.TempDir(), "shoal.yaml"), []byte("listen: 127.0.0.1:8080\n"+groups+notify))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Notify
}

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// start runs a notifier of cfg over st, routing st's events to it, until
// the test ends.
func start(t *testing.T, cfg config.Notify, st *store.Store) *Notifier {
	t.Helper()
	n, err := New(cfg, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	st.SetRouter(n.Route)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return n
}

// recordLaunch records an instance.launched event of group as a group does.
func recordLaunch(t *testing.T, st *store.Store, group, name string) {
	t.Helper()
	d := event.Record(group, event.InstanceLaunched, time.Now(), name, name+" launched at 127.0.0.1:9001")
	if err := st.InsertDecision(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 10 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// receiver is a webhook receiver that fails its first failures requests.
type receiver struct {
	failures int
	secret   []byte

	mu       sync.Mutex
	attempts int
	got      []event.Event
	badSigs  int
	at       []time.Time
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	r.at = append(r.at, time.Now())
	if !hmac.Equal([]byte(req.Header.Get(SignatureHeader)), []byte(Sign(r.secret, body))) {
		r.badSigs++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if r.attempts <= r.failures {
		http.Error(w, "not now", http.StatusServiceUnavailable)
		return
	}
	var ev event.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.got = append(r.got, ev)
}

func (r *receiver) delivered() []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event.Event(nil), r.got...)
}

func secretFile(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWebhookRetriesThenDelivers: a receiver on 127.0.0.1 that refuses the
// first two posts gets the event on the third, signed with the secret,
// after back-offs of retry_min and twice that; both failures are counted.
func TestWebhookRetriesThenDelivers(t *testing.T) {
	rcv := &receiver{failures: 2, secret: []byte("hook-secret")}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cfg := parse(t, `notify:
  retry_min: 100ms
  retry_max: 1s
  targets:
    - {name: ops, type: webhook, url: "`+srv.URL+`/hook", secret_file: `+secretFile(t, "hook-secret")+`}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	n := start(t, cfg, st)

	recordLaunch(t, st, "web", "web-001")
	eventually(t, "the third attempt", func() bool { return len(rcv.delivered()) == 1 })
	ev := rcv.delivered()[0]
	if ev.Type != event.InstanceLaunched || ev.Group != "web" || ev.Subject != "web-001" || ev.Decision == nil || ev.Message != "web-001 launched at 127.0.0.1:9001" {
		t.Errorf("delivered %+v", ev)
	}
	rcv.mu.Lock()
	attempts, bad, at := rcv.attempts, rcv.badSigs, rcv.at
	rcv.mu.Unlock()
	if attempts != 3 || bad != 0 {
		t.Errorf("attempts %d, bad signatures %d; want 3, 0", attempts, bad)
	}
	if d1, d2 := at[1].Sub(at[0]), at[2].Sub(at[1]); d1 < 100*time.Millisecond || d2 < 200*time.Millisecond || d2 > 2*time.Second {
		t.Errorf("back-offs %s, %s; want ≥100ms, ≥200ms", d1, d2)
	}
	eventually(t, "the delivery counted", func() bool { return count(t, n.delivered, "target", "ops") == 1 })
	if f := count(t, n.failed, "target", "ops"); f != 2 {
		t.Errorf("failures counted %v; want 2", f)
	}
	if next, err := st.NextNotifications(context.Background()); err != nil || len(next) > 0 {
		t.Errorf("queue not empty after delivery: %v %v", next, err)
	}
}

// TestSlackFiltersAndJobs: a slack target filtered to scale events of
// group api gets {"text": ...} for api's job starting and finishing, and
// nothing for web's, nor for an instance event.
func TestSlackFiltersAndJobs(t *testing.T) {
	var (
		mu    sync.Mutex
		texts []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil || len(m) != 1 || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "not slack's format", http.StatusBadRequest)
			return
		}
		mu.Lock()
		texts = append(texts, m["text"])
		mu.Unlock()
	}))
	defer srv.Close()
	cfg := parse(t, `notify:
  targets:
    - {name: chat, type: slack, url: "`+srv.URL+`", events: ["scale.*"], groups: [api]}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	start(t, cfg, st)

	ctx := context.Background()
	recordLaunch(t, st, "api", "api-001") // not a scale event
	for _, g := range []string{"web", "api"} {
		j := job.Job{Group: g, Kind: job.Up, Source: "cli", From: 1, Target: 2, State: job.Accepted, CreatedAt: time.Now()}
		if err := st.InsertJob(ctx, &j); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		j.State, j.StartedAt = job.Running, &now
		for range 2 { // an update that changes nothing tells nothing
			if err := st.UpdateJob(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		j.State, j.FinishedAt = job.Done, &now
		if err := st.UpdateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "two messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(texts) >= 2
	})
	time.Sleep(200 * time.Millisecond) // a third would have come by now
	mu.Lock()
	defer mu.Unlock()
	want := []string{"[shoal] scale.started api: api: scale up 1 → 2 (job 2, running)", "[shoal] scale.finished api: api: scale up 1 → 2 (job 2, done)"}
	if strings.Join(texts, "\n") != strings.Join(want, "\n") {
		t.Errorf("texts:\n%s\nwant:\n%s", strings.Join(texts, "\n"), strings.Join(want, "\n"))
	}
}

// TestRestartDeliversQueued: what was queued while the receiver was down
// and shoal then stopped (the store closed without a delivery) is delivered
// by the next run's notifier from the same database.
func TestRestartDeliversQueued(t *testing.T) {
	rcv := &receiver{secret: []byte("k")}
	srv := httptest.NewUnstartedServer(rcv)
	cfg := parse(t, `notify:
  targets:
    - {name: ops, type: webhook, url: "http://`+srv.Listener.Addr().String()+`/", secret_file: `+secretFile(t, "k")+`}
`)
	db := filepath.Join(t.TempDir(), "shoal.db")
	st := openStore(t, db)
	n, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st.SetRouter(n.Route) // routed and queued, but no delivery runs
	recordLaunch(t, st, "web", "web-001")
	recordLaunch(t, st, "web", "web-002")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	srv.Start()
	defer srv.Close()
	st = openStore(t, db)
	defer st.Close()
	start(t, cfg, st)
	eventually(t, "both queued events", func() bool { return len(rcv.delivered()) == 2 })
	if got := rcv.delivered(); got[0].Subject != "web-001" || got[1].Subject != "web-002" {
		t.Errorf("delivered %+v; want web-001 then web-002", got)
	}
}

// refusedLaunch runs a notifier (with the notify settings given) whose
// one target, ops, refuses every post, and records a launch for it.
func refusedLaunch(t *testing.T, settings string) (*Notifier, *store.Store) {
	t.Helper()
	srv := httptest.NewServer(&receiver{failures: 1 << 30, secret: []byte("k")})
	t.Cleanup(srv.Close)
	cfg := parse(t, `notify:
  `+settings+`
  targets:
    - {name: ops, type: webhook, url: "`+srv.URL+`", secret_file: `+secretFile(t, "k")+`}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	t.Cleanup(func() { st.Close() })
	n := start(t, cfg, st)
	recordLaunch(t, st, "web", "web-001")
	return n, st
}

// TestTTLDropsAndCounts: an event a receiver never accepts is retried
// until it is older than the ttl, then dropped and counted.
func TestTTLDropsAndCounts(t *testing.T) {
	n, st := refusedLaunch(t, "ttl: 500ms\n  retry_min: 50ms\n  retry_max: 100ms")
	eventually(t, "the drop", func() bool { return count(t, n.dropped, "target", "ops", "reason", "expired") == 1 })
	if f := count(t, n.failed, "target", "ops"); f < 3 {
		t.Errorf("failures counted %v; want several retries before the drop", f)
	}
	if next, err := st.NextNotifications(context.Background()); err != nil || len(next) > 0 {
		t.Errorf("queue not empty after the drop: %v %v", next, err)
	}
	if d := count(t, n.delivered, "target", "ops"); d != 0 {
		t.Errorf("delivered %v", d)
	}
}

// TestCommand: a command target runs its argv (templates filled from the
// event, no shell) with the event's JSON on stdin; one that outlives its
// timeout is killed and retried.
func TestCommand(t *testing.T) {
	dir := t.TempDir()
	cfg := parse(t, `notify:
  retry_min: 100ms
  targets:
    - {name: run, type: command, command: [tee, "`+dir+`/{{.Type}}-{{.Subject}}.json"]}
    - {name: slow, type: command, command: [sleep, "5"], timeout: 200ms}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	n := start(t, cfg, st)
	recordLaunch(t, st, "web", "web-001")
	out := filepath.Join(dir, "instance.launched-web-001.json")
	eventually(t, "the command's output", func() bool { _, err := os.Stat(out); return err == nil })
	eventually(t, "the delivery counted", func() bool { return count(t, n.delivered, "target", "run") == 1 })
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var ev event.Event
	if err := json.Unmarshal(b, &ev); err != nil || ev.Type != event.InstanceLaunched || ev.Subject != "web-001" {
		t.Errorf("stdin was %s (%v)", b, err)
	}
	began := time.Now()
	eventually(t, "the slow command's timeouts", func() bool { return count(t, n.failed, "target", "slow") >= 2 })
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("two attempts took %s; the timeout is 200ms", d)
	}
}

func TestSelects(t *testing.T) {
	web := event.Event{Type: event.InstanceLaunched, Group: "web"}
	none := event.Event{Type: event.HAProxyRestarted}
	tests := []struct {
		events, groups []string
		ev             event.Event
		want           bool
	}{
		{nil, nil, web, true},
		{[]string{"instance.launched"}, nil, web, true},
		{[]string{"instance.terminated"}, nil, web, false},
		{[]string{"instance.*"}, nil, web, true},
		{[]string{"instance.*"}, nil, event.Event{Type: event.ScaleStarted}, false},
		{nil, []string{"web"}, web, true},
		{nil, []string{"api"}, web, false},
		{nil, []string{"api"}, none, true}, // no group: every group's
		{[]string{"instance.*"}, []string{"api"}, none, false},
	}
	for _, tt := range tests {
		if got := Selects(config.NotifyTarget{Events: tt.events, Groups: tt.groups}, tt.ev); got != tt.want {
			t.Errorf("events %v groups %v, %s of %q: %v, want %v", tt.events, tt.groups, tt.ev.Type, tt.ev.Group, got, tt.want)
		}
	}
}

// count reads the value of cv's series with the given label pairs, as
// /metrics would show it.
func count(t *testing.T, cv *prometheus.CounterVec, pairs ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(cv)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(pairs); i += 2 {
				if labels[pairs[i]] != pairs[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestUseReloadedTargets: after a reload replaces target ops by run, what
// was queued for ops is dropped and counted, and new events go to run.
func TestUseReloadedTargets(t *testing.T) {
	n, st := refusedLaunch(t, "retry_min: 1h\n  retry_max: 1h")
	eventually(t, "the first failure", func() bool { return count(t, n.failed, "target", "ops") == 1 })

	dir := t.TempDir()
	ts, err := NewTargets(parse(t, `notify:
  targets:
    - {name: run, type: command, command: [tee, "`+dir+`/{{.Subject}}"]}
`))
	if err != nil {
		t.Fatal(err)
	}
	n.Use(ts)
	recordLaunch(t, st, "web", "web-002")
	eventually(t, "the new target's delivery", func() bool { return count(t, n.delivered, "target", "run") == 1 })
	if _, err := os.Stat(filepath.Join(dir, "web-002")); err != nil {
		t.Error(err)
	}
	// The old target's notification waits out its back-off (1h) before
	// it is looked at again; the drop happens on that pass.
	if err := st.RetryNotification(context.Background(), 1, time.Now(), "test: due now"); err != nil {
		t.Fatal(err)
	}
	st.Poke()
	eventually(t, "the old target's notification dropped", func() bool { return count(t, n.dropped, "target", "ops", "reason", "no_target") == 1 })
	if next, err := st.NextNotifications(context.Background()); err != nil || len(next) > 0 {
		t.Errorf("queue not empty: %v %v", next, err)
	}
}

// TestCommandFails: a failing command's error carries the start of its
// output, bounded however much it prints.
func TestCommandFails(t *testing.T) {
	cfg := parse(t, `notify:
  targets:
    - {name: run, type: command, command: [sh, -c, "yes error | head -c 1000000; exit 3"]}
`)
	c := &command{argv: cfg.Targets[0].Argv}
	err := c.send(context.Background(), event.Event{Type: event.HostUp})
	if err == nil || !strings.HasPrefix(err.Error(), "command sh: exit status 3: error\nerror\n") || len(err.Error()) > 600 {
		t.Errorf("send = %.200q…; want the exit status and at most 512 bytes of output", err)
	}
}

// TestDeadTargetDelaysNoOther: a receiver that accepts connections and never
// answers costs its target a timeout per notification, but another target
// gets every event at once, in order.
func TestDeadTargetDelaysNoOther(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	defer func() {
		ln.Close()
		held.Wait()
	}()
	held.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // the test ends: it closes ln
			}
			conns = append(conns, c) // read nothing, answer nothing
		}
	})
	rcv := &receiver{secret: []byte("hook-secret")}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	secret := secretFile(t, "hook-secret")
	cfg := parse(t, `notify:
  targets:
    - {name: dead, type: webhook, timeout: 5s, url: "http://`+ln.Addr().String()+`/hook", secret_file: `+secret+`}
    - {name: ops, type: webhook, timeout: 5s, url: "`+srv.URL+`/hook", secret_file: `+secret+`}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	start(t, cfg, st)

	began := time.Now()
	const events = 5
	for i := range events {
		recordLaunch(t, st, "web", fmt.Sprintf("web-%03d", i+1))
	}
	eventually(t, "ops's deliveries", func() bool { return len(rcv.delivered()) == events })
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("ops got its %d events after %s; a dead target (5 s timeout) held it up", events, took)
	}
	for i, ev := range rcv.delivered() {
		if want := fmt.Sprintf("web-%03d", i+1); ev.Subject != want {
			t.Errorf("delivery %d is %s, want %s: out of order", i, ev.Subject, want)
		}
	}
}

// TestFailedHeadHoldsItsTarget: Slack refuses the first post with 500; the
// events recorded while it waits for its retry reach Slack after it, in the
// order they happened, while another target gets all of them at once.
func TestFailedHeadHoldsItsTarget(t *testing.T) {
	var (
		mu    sync.Mutex
		posts int
		texts []string
	)
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
			http.Error(w, "not slack's format", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		posts++
		if posts == 1 {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		texts = append(texts, m["text"])
	}))
	defer slack.Close()
	rcv := &receiver{secret: []byte("k")}
	hook := httptest.NewServer(rcv)
	defer hook.Close()
	cfg := parse(t, `notify:
  retry_min: 500ms
  retry_max: 1s
  targets:
    - {name: chat, type: slack, url: "`+slack.URL+`"}
    - {name: ops, type: webhook, url: "`+hook.URL+`", secret_file: `+secretFile(t, "k")+`}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	n := start(t, cfg, st)

	recordLaunch(t, st, "web", "web-001")
	eventually(t, "the refused post", func() bool { return count(t, n.failed, "target", "chat") == 1 })
	began := time.Now()
	recordLaunch(t, st, "web", "web-002")
	recordLaunch(t, st, "web", "web-003")
	eventually(t, "ops's deliveries", func() bool { return len(rcv.delivered()) == 3 })
	if took := time.Since(began); took > 400*time.Millisecond {
		t.Errorf("ops got its events %s after they were recorded: chat's retry held it up", took)
	}
	eventually(t, "chat's deliveries", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(texts) == 3
	})
	mu.Lock()
	got := slices.Clone(texts)
	mu.Unlock()
	for i, text := range got {
		if want := fmt.Sprintf("web-%03d launched", i+1); !strings.Contains(text, want) {
			t.Errorf("chat's post %d is %q, want %s: out of order\nall: %q", i+1, text, want, got)
		}
	}
	for i, ev := range rcv.delivered() {
		if want := fmt.Sprintf("web-%03d", i+1); ev.Subject != want {
			t.Errorf("ops's delivery %d is %s, want %s", i+1, ev.Subject, want)
		}
	}
}

// TestFullQueueDropsOldest: a queue over its bound loses its oldest
// notifications, counted by target; another target's queue is untouched.
func TestFullQueueDropsOldest(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	st.SetRouter(func(event.Event) []string { return []string{"a", "b"} })
	for i := range 5 {
		recordLaunch(t, st, "web", fmt.Sprintf("web-%03d", i+1))
	}
	ctx := context.Background()
	// b's queue: its two oldest delivered already.
	due, err := st.DueNotifications(ctx, "b", time.Now(), 2)
	if err != nil || len(due) != 2 {
		t.Fatalf("b's due: %v %v", due, err)
	}
	for _, q := range due {
		if err := st.DeleteNotification(ctx, q.ID); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := st.TrimNotifications(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if gone["a"] != 2 || gone["b"] != 0 {
		t.Errorf("trimmed %v, want a:2 and nothing of b", gone)
	}
	left, err := st.DueNotifications(ctx, "a", time.Now(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, q := range left {
		subjects = append(subjects, q.Event.Subject)
	}
	if got := strings.Join(subjects, " "); got != "web-003 web-004 web-005" {
		t.Errorf("a's queue after the trim: %s, want the 3 newest", got)
	}
}

// TestFullQueueCounted: the notifier trims a queue over its bound and
// counts what it dropped in shoal_notifications_dropped_total{reason="overflow"}.
func TestFullQueueCounted(t *testing.T) {
	srv := httptest.NewServer(&receiver{failures: 1 << 30, secret: []byte("k")})
	defer srv.Close()
	cfg := parse(t, `notify:
  retry_min: 1m
  targets:
    - {name: ops, type: webhook, url: "`+srv.URL+`", secret_file: `+secretFile(t, "k")+`}
`)
	st := openStore(t, filepath.Join(t.TempDir(), "shoal.db"))
	defer st.Close()
	n, err := New(cfg, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n.maxQueued = 3
	st.SetRouter(n.Route)
	for i := range 5 {
		recordLaunch(t, st, "web", fmt.Sprintf("web-%03d", i+1))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { n.Run(ctx) })
	defer func() {
		cancel()
		wg.Wait()
	}()
	eventually(t, "the overflow counted", func() bool { return count(t, n.dropped, "target", "ops", "reason", "overflow") == 2 })
	recordLaunch(t, st, "web", "web-006")
	eventually(t, "the next overflow counted", func() bool { return count(t, n.dropped, "target", "ops", "reason", "overflow") == 3 })
}
