package core

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/notify"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestCertExpiringRecordedOnce: the store reports an expiring certificate
// at each hourly check; the event (and its notifications) is recorded once
// per certificate, and again for a new serial. The event is queued for the
// targets that select it, also one that selects only a group's events (a
// certificate belongs to no group), and not for one that selects other types.
func TestCertExpiringRecordedOnce(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n, err := notify.New(config.Notify{TTL: time.Hour, RetryMin: time.Second, RetryMax: time.Minute, Targets: []config.NotifyTarget{
		{Name: "certs", Type: config.NotifyCommand, Events: []string{"certificate.*"}, Groups: []string{"web"}, Timeout: time.Second},
		{Name: "scaling", Type: config.NotifyCommand, Events: []string{"scale.*"}, Timeout: time.Second},
	}}, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	st.SetRouter(n.Route)
	f := certExpiring(st, slog.New(slog.DiscardHandler))
	c := certstore.Cert{Frontend: "edge", Site: "a.test", Names: []string{"a.test"}, Serial: "0a", NotAfter: time.Now().Add(72 * time.Hour)}
	f(c)
	f(c)
	c.Serial = "0b"
	f(c)
	recs, err := st.Decisions(context.Background(), store.DecisionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		if r.Rule == "certificate" {
			got = append(got, r.Reason)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], "serial 0a") || !strings.Contains(got[1], "serial 0b") {
		t.Fatalf("recorded %q, want one event per serial", got)
	}
	queued, err := st.DueNotifications(context.Background(), "", time.Now(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(queued) != 2 {
		t.Fatalf("queued %+v, want the two events for target certs", queued)
	}
	for i, q := range queued {
		ev := q.Event
		if q.Target != "certs" || ev.Type != event.CertificateExpiring || ev.Group != "" || ev.Decision == nil || ev.Decision.Reason != got[i] {
			t.Errorf("queued %s for %s: %+v, want certificate.expiring of no group for certs, reason %q", ev.Type, q.Target, ev, got[i])
		}
	}
}
