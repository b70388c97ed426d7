package ha

import (
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/store"
	"github.com/shoal-lb/shoal/internal/store/etcdstore"
	"github.com/shoal-lb/shoal/internal/testetcd"
)

// TestNodeEvents: a standby's own event (its HAProxy restarted) is in etcd,
// named by node, where the leader lists it; with etcd away, recording one
// fails within nodeEventTimeout and still keeps the local copy, which
// queues its notification.
func TestNodeEvents(t *testing.T) {
	etcd := testetcd.Start(t)
	a, _ := haTestNode(t, etcd.Endpoint, "a", 200)
	awaitLeader(t, a)
	b, _ := haTestNode(t, etcd.Endpoint, "b", 100)
	sqlite, err := store.Open(filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlite.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	events := NodeEvents{s: &Store{Store: sqlite, shared: etcdstore.New(b.Client(), b.Prefix()), log: log}, node: "b"}
	ctx := t.Context()

	d := event.Record("", event.HAProxyRestarted, time.Now(), "haproxy", "exited (signal: killed)")
	if err := events.InsertDecision(ctx, &d); err != nil {
		t.Fatalf("the standby's event: %v", err)
	}
	got, err := etcdstore.New(a.Client(), a.Prefix()).Decisions(ctx, store.DecisionQuery{})
	if err != nil || len(got) != 1 || got[0].Reason != "node b: exited (signal: killed)" || got[0].Rule != "haproxy" {
		t.Fatalf("the leader lists %+v, %v; want b's haproxy.restarted, named", got, err)
	}

	// etcd away: the same store over a client of an address nothing
	// serves.
	away, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { away.Close() })
	events.s.shared = etcdstore.New(away, b.Prefix())
	start := time.Now()
	d = event.Record("", event.HAProxyRestarted, time.Now(), "haproxy", "exited again")
	err = events.InsertDecision(ctx, &d)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "record in etcd") || took > nodeEventTimeout+time.Second {
		t.Fatalf("with etcd away: %v after %v; want an etcd error within %v", err, took, nodeEventTimeout)
	}
	local, err := sqlite.Decisions(ctx, store.DecisionQuery{})
	if err != nil || len(local) != 2 || local[1].Reason != "node b: exited again" {
		t.Fatalf("the local copies: %+v, %v; want both", local, err)
	}
}
