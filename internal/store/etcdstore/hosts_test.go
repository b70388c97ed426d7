package etcdstore

import (
	"errors"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// TestCordonedHosts: the pair's cordons, written under the leader's fence
// and read by any node (the next leader after a failover).
func TestCordonedHosts(t *testing.T) {
	etcd := testetcd.Start(t)
	n, fence := leader(t, etcd.Endpoint)
	s := New(n.Client(), n.Prefix())
	ctx := t.Context()
	since := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)

	if _, err := s.CordonHost(ctx, store.CordonedHost{Provider: "ssh", Host: "h1", Since: since}); !errors.Is(err, ErrFenced) {
		t.Fatalf("a cordon without the fence: %v, want ErrFenced", err)
	}
	s.SetFence(fence)
	for _, h := range []string{"h2", "h1"} {
		if added, err := s.CordonHost(ctx, store.CordonedHost{Provider: "ssh", Host: h, Since: since}); err != nil || !added {
			t.Fatalf("cordon %s: %v %v", h, added, err)
		}
	}
	if added, err := s.CordonHost(ctx, store.CordonedHost{Provider: "ssh", Host: "h2", Since: since.Add(time.Hour)}); err != nil || added {
		t.Errorf("cordoning a cordoned host: added %v, %v", added, err)
	}
	if removed, err := s.UncordonHost(ctx, "ssh", "h1"); err != nil || !removed {
		t.Errorf("uncordon h1: %v %v", removed, err)
	}
	if removed, err := s.UncordonHost(ctx, "ssh", "h1"); err != nil || removed {
		t.Errorf("uncordon h1 twice: %v %v", removed, err)
	}

	// A drain in progress is marked on the cordon, under the fence.
	if found, err := s.SetHostDraining(ctx, "ssh", "h2", true); err != nil || !found {
		t.Errorf("mark h2 draining: %v %v", found, err)
	}
	if found, err := s.SetHostDraining(ctx, "ssh", "h1", true); err != nil || found {
		t.Errorf("mark h1 (uncordoned) draining: %v %v", found, err)
	}
	standby := New(n.Client(), n.Prefix())
	if _, err := standby.SetHostDraining(ctx, "ssh", "h2", false); !errors.Is(err, ErrFenced) {
		t.Errorf("a standby's mark: %v, want ErrFenced", err)
	}

	// Another node's store (no fence: a standby) reads the same.
	got, err := standby.CordonedHosts(ctx)
	if err != nil || len(got) != 1 || got[0].Host != "h2" || !got[0].Since.Equal(since) || !got[0].Draining {
		t.Errorf("cordoned = %+v, %v; want h2 since %s, draining", got, err, since)
	}
}
