package source

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/metrics"
)

// Instance is one of shoal's instances, as a per-instance reading is
// matched to it.
type Instance struct {
	Group, Name string
	// Addr is its host:port; InService whether it takes requests.
	Addr      string
	InService bool
}

// Set reads every source of a config, each once per its interval however
// many policies read it, and keeps what they gave for Ring.
type Set struct {
	sources   []config.Source
	ring      time.Duration
	instances func() []Instance
	log       *slog.Logger

	mu     sync.RWMutex
	series map[string][]metrics.Point // by key (see seriesKey)
	status map[string]*Status
}

// Status is a source's state, for /metrics and the API.
type Status struct {
	Name, Kind string
	Errors     uint64
	// LastError is the latest read's error, "" after a good read.
	LastError string
	// Last is when it last gave a value, and Value what (a per-instance
	// source has none of its own).
	Last  time.Time
	Value float64
	// PerInstance is whether that reading gave one value per instance.
	PerInstance bool
}

// NewSet returns a Set of m's sources; instances (nil: none) lists shoal's
// instances for per-instance readings.
func NewSet(m config.Metrics, instances func() []Instance, log *slog.Logger) *Set {
	if instances == nil {
		instances = func() []Instance { return nil }
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Set{sources: m.Sources, ring: max(m.Ring, time.Hour), instances: instances, log: log,
		series: map[string][]metrics.Point{}, status: map[string]*Status{}}
	for _, src := range m.Sources {
		s.status[src.Name] = &Status{Name: src.Name, Kind: src.Kind()}
	}
	return s
}

// KeepAtLeast makes the Set keep each source's values for at least d (a
// predictive floor forecasting a source reads its lookback); called before
// Run.
func (s *Set) KeepAtLeast(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ring = max(s.ring, d)
}

// Sources are the Set's sources.
func (s *Set) Sources() []config.Source { return s.sources }

// Run reads every source until ctx ends: one goroutine per source, which
// it owns, each reading at most once at a time.
func (s *Set) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, src := range s.sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.loop(ctx, src)
		}()
	}
	wg.Wait()
}

func (s *Set) loop(ctx context.Context, src config.Source) {
	tick := time.NewTicker(src.Interval)
	defer tick.Stop()
	for {
		s.readOnce(ctx, src, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readOnce reads src now and records what it gave, or its error.
func (s *Set) readOnce(ctx context.Context, src config.Source, now time.Time) {
	r, err := Read(ctx, src)
	if ctx.Err() != nil {
		return
	}
	var vals map[string]float64
	perInstance := false
	if err == nil {
		vals, perInstance, err = s.split(src.Name, r)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status[src.Name]
	if err != nil {
		if st.LastError == "" {
			s.log.Warn("metrics source failed", "source", src.Name, "err", err)
		}
		st.Errors++
		st.LastError = err.Error()
		return
	}
	if st.LastError != "" {
		s.log.Info("metrics source answers again", "source", src.Name)
	}
	st.LastError, st.Last, st.Value, st.PerInstance = "", now, r.Value, perInstance
	for key, v := range vals {
		s.add(key, metrics.Point{T: now, V: v}, now)
	}
}

// split is the series r adds to: when its instances match shoal's, each
// group's average over its matched in-service instances (perInstance);
// otherwise its one value, for all groups.
func (s *Set) split(name string, r Reading) (vals map[string]float64, perInstance bool, err error) {
	if r.Instances != nil {
		sums, counts := map[string]float64{}, map[string]int{}
		matched := false
		for _, in := range s.instances() {
			v, ok := match(r.Instances, in)
			matched = matched || ok
			if ok && in.InService {
				sums[in.Group] += v
				counts[in.Group]++
			}
		}
		if matched {
			out := map[string]float64{}
			for g, n := range counts {
				out[seriesKey(name, g)] = sums[g] / float64(n)
			}
			return out, true, nil
		}
	}
	if !r.Single {
		keys := slices.Sorted(maps.Keys(r.Instances))
		return nil, false, fmt.Errorf("source %s: %d values by instance (%s), none of them an instance of shoal (matched by name, host:port or host); aggregate them to one",
			name, len(keys), clip(strings.Join(keys, ", ")))
	}
	return map[string]float64{seriesKey(name, ""): r.Value}, false, nil
}

// match finds in's value among a reading's instances: by its name, its
// address, or a key that is its address's host alone (a value per host).
func match(vals map[string]float64, in Instance) (float64, bool) {
	for _, k := range []string{in.Name, in.Addr} {
		if v, ok := vals[k]; ok && k != "" {
			return v, true
		}
	}
	if host, _, err := net.SplitHostPort(in.Addr); err == nil {
		if v, ok := vals[host]; ok {
			return v, true
		}
	}
	return 0, false
}

// seriesKey is where a source's values for group are kept; "" for a source
// with one value for all.
func seriesKey(name, group string) string { return name + "\x00" + group }

func (s *Set) add(key string, p metrics.Point, now time.Time) {
	pts := append(s.series[key], p)
	cut := 0
	for cut < len(pts) && pts[cut].T.Before(now.Add(-s.ring)) {
		cut++
	}
	s.series[key] = slices.Clip(pts[cut:])
}

// points returns name's values for group in [from, to].
func (s *Set) points(name, group string, from, to time.Time) []metrics.Point {
	s.mu.RLock()
	defer s.mu.RUnlock()
	pts := s.series[seriesKey(name, "")]
	if pts == nil {
		pts = s.series[seriesKey(name, group)]
	}
	// In time order: a predictive floor's source keeps days of them.
	lo := sort.Search(len(pts), func(i int) bool { return !pts[i].T.Before(from) })
	hi := sort.Search(len(pts), func(i int) bool { return pts[i].T.After(to) })
	if lo >= hi {
		return nil
	}
	return slices.Clone(pts[lo:hi])
}

// Statuses are the sources' states, in config order.
func (s *Set) Statuses() []Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Status, 0, len(s.sources))
	for _, src := range s.sources {
		out = append(out, *s.status[src.Name])
	}
	return out
}
