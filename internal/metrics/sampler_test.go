package metrics

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// remoteUsage is a provider's samples of a remote instance, set by the test.
type remoteUsage struct {
	mu sync.Mutex
	u  provider.Usage
	ok bool
}

func (r *remoteUsage) Usage() (provider.Usage, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.u, r.ok
}

func (r *remoteUsage) set(u provider.Usage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.u, r.ok = u, true
}

// TestSamplerTarget: a target with a Sampler takes its CPU and RSS from the
// provider's samples, its CPU over the time between them, and never from
// this machine's /proc, even with a PGID that names a live local process.
func TestSamplerTarget(t *testing.T) {
	s := &remoteUsage{}
	target := Target{Group: "web", Name: "web-001", Cores: 2, State: "in-service", PGID: os.Getpid(), Sampler: s}
	c := newTestCollector(t, filepath.Join(t.TempDir(), "metrics.db"), []string{"web"}, func() []Target { return []Target{target} })
	defer c.Close()
	ctx := context.Background()
	usage := func() (InstanceUsage, bool) {
		for _, u := range c.Usage() {
			if u.Instance == "web-001" {
				return u, true
			}
		}
		return InstanceUsage{}, false
	}

	// No sample in yet: nothing of the instance, although its PGID (this
	// test's own pid) is alive here.
	c.Sample(ctx, time.Now())
	if u, ok := usage(); ok {
		t.Fatalf("usage %+v before the provider had a sample; want none (no local /proc read)", u)
	}

	t0 := time.Now()
	s.set(provider.Usage{CPUSeconds: 10, RSS: 50 << 20, At: t0})
	c.Sample(ctx, t0)
	if u, ok := usage(); !ok || u.RSSBytes != 50<<20 || u.CPUSeconds != 10 {
		t.Fatalf("usage %+v, %v; want the sample's 50 MiB and 10 s", u, ok)
	}
	if v, ok := c.ring.latest(InstancePath("web", "web-001", "cpu")); ok && !math.IsNaN(v) {
		t.Fatalf("cpu %v after one sample; want none yet", v)
	}
	// One second later the instance had used 1.5 s of CPU: 75 % of its 2 cores.
	s.set(provider.Usage{CPUSeconds: 11.5, RSS: 60 << 20, At: t0.Add(time.Second)})
	c.Sample(ctx, t0.Add(time.Second))
	v, ok := c.ring.latest(InstancePath("web", "web-001", "cpu"))
	if !ok || math.Abs(v-75) > 1e-9 {
		t.Fatalf("cpu %v, %v; want 75", v, ok)
	}
	// Sampled again before the provider's next read: the same value, not
	// a gap.
	c.Sample(ctx, t0.Add(1500*time.Millisecond))
	if v, ok := c.ring.latest(InstancePath("web", "web-001", "cpu")); !ok || math.Abs(v-75) > 1e-9 {
		t.Fatalf("cpu %v, %v on a repeated sample; want 75 again", v, ok)
	}
}
