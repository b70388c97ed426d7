package core

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/certstore"
	"github.com/shoal-lb/shoal/internal/store"
)

// TestCertExpiringRecordedOnce: the store reports an expiring certificate
// at each hourly check; the event (and its notifications) is recorded once
// per certificate, and again for a new serial.
func TestCertExpiringRecordedOnce(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
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
}
