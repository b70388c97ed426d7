package metrics

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"
)

// CPUUsage is sacloud-cpu-usage's JSON, field for field, so that scripts
// written for it (the seed's autoscale.sh: `--query '.avg|round'`) read
// shoal's numbers unchanged. Fields are in the order its map-based output
// prints them (sorted by key).
type CPUUsage struct {
	P75     float64          `json:"75pt"`
	P90     float64          `json:"90pt"`
	P95     float64          `json:"95pt"`
	P99     float64          `json:"99pt"`
	Avg     float64          `json:"avg"`
	Max     float64          `json:"max"`
	Min     float64          `json:"min"`
	Servers []CPUUsageServer `json:"servers"`
}

// CPUUsageServer is one server (instance): Avg is its mean CPU in percent of
// its cores, Monitors its samples.
type CPUUsageServer struct {
	Avg      float64           `json:"avg"`
	Cores    float64           `json:"cores"`
	Monitors []CPUUsageMonitor `json:"monitors"`
	Name     string            `json:"name"`
}

// CPUUsageMonitor is one sample: CPUTime is the cores' worth of CPU used
// (0.5 is half a core), Time as Go's time.Time.String prints it, which is
// what the tool printed ("2021-09-24 17:00:00 +0900 JST").
type CPUUsageMonitor struct {
	CPUTime float64 `json:"cpu_time"`
	Time    string  `json:"time"`
}

// ServerCPU is one instance's CPU samples: the input for one server of a
// CPUUsage, and what GET /v1/cpu-usage lists for it.
type ServerCPU struct {
	Name    string      `json:"name"`
	Cores   float64     `json:"cores"`
	Samples []CPUSample `json:"samples"`
}

// CPUSample is one period's CPU, in cores' worth.
type CPUSample struct {
	Time    time.Time
	CPUTime float64
}

// NewCPUUsage computes the tool's figures from servers the way it did: a
// server's avg is the mean of cpu_time/cores in percent; the top level is
// across servers' avgs, percentiles by nearest rank. Servers without samples
// are left out. logf, if not nil, gets the tool's per-sample and per-server
// log lines (without its timestamp prefix).
func NewCPUUsage(servers []ServerCPU, logf func(format string, args ...any)) CPUUsage {
	u := CPUUsage{Servers: []CPUUsageServer{}}
	var avgs []float64
	total := 0.0
	for _, s := range servers {
		if len(s.Samples) == 0 {
			continue
		}
		srv := CPUUsageServer{Name: s.Name, Cores: s.Cores, Monitors: []CPUUsageMonitor{}}
		sum := 0.0
		for _, p := range s.Samples {
			ts := p.Time.String()
			srv.Monitors = append(srv.Monitors, CPUUsageMonitor{CPUTime: p.CPUTime, Time: ts})
			if logf != nil {
				logf("%s cores:%v cpu:%f time:%s", s.Name, s.Cores, p.CPUTime, ts)
			}
			sum += p.CPUTime / s.Cores
		}
		// The same operations in the same order as the tool, so that the
		// last digits agree too.
		srv.Avg = sum * 100 / float64(len(s.Samples))
		if logf != nil {
			logf("%s avg:%f", s.Name, srv.Avg)
		}
		avgs = append(avgs, srv.Avg)
		total += srv.Avg
		u.Servers = append(u.Servers, srv)
	}
	if len(avgs) == 0 {
		return u
	}
	slices.Sort(avgs)
	u.Avg = total / float64(len(avgs))
	u.Min, u.Max = avgs[0], avgs[len(avgs)-1]
	u.P75, u.P90 = percentile(avgs, 0.75), percentile(avgs, 0.90)
	u.P95, u.P99 = percentile(avgs, 0.95), percentile(avgs, 0.99)
	return u
}

// ServersCPU returns the ready instances of every group whose names start
// with prefix, each with its CPU over the window ending now averaged into
// step-long periods (like the cloud's 5-minute activity graph), stamped with
// the period's start in loc. Instances starting, draining or warming up are
// left out, as from every aggregate.
func (c *Collector) ServersCPU(prefix string, window, step time.Duration, loc *time.Location) []ServerCPU {
	c.mu.RLock()
	var ready []instanceView
	var at time.Time
	for _, gv := range c.views {
		for _, iv := range gv.instances {
			if iv.ready && strings.HasPrefix(iv.Name, prefix) {
				ready = append(ready, iv)
			}
		}
		if gv.at.After(at) {
			at = gv.at
		}
	}
	c.mu.RUnlock()
	slices.SortFunc(ready, func(a, b instanceView) int { return strings.Compare(a.Name, b.Name) })
	step = max(step, c.opts.Interval)
	var out []ServerCPU
	for _, iv := range ready {
		cores := iv.Cores
		s := ServerCPU{Name: iv.Name, Cores: cores}
		path := InstancePath(iv.Group, iv.Name, "cpu")
		pts, err := c.points(context.Background(), path, at.Add(-window), at)
		if err != nil {
			c.log.Warn("metrics: read history", "path", path, "err", err)
		}
		var cur time.Time
		var period []point
		emit := func() {
			// A period may hold a roll-up beside the ring's samples: each
			// weighs the seconds it stands for.
			if m, _, ok := meanMax(period); ok {
				s.Samples = append(s.Samples, CPUSample{Time: cur.In(loc), CPUTime: m / 100 * cores})
			}
		}
		for _, p := range pts {
			b := p.T.Truncate(step)
			if !b.Equal(cur) {
				emit()
				cur, period = b, period[:0]
			}
			if !math.IsNaN(p.Avg) {
				period = append(period, p)
			}
		}
		emit()
		out = append(out, s)
	}
	return out
}
