package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// timerRange is how messages name HAProxy's timer range.
var timerRange = fmt.Sprintf("1ms to %dms (%s, HAProxy's timer range)", int64(hapword.MaxTimer/time.Millisecond), hapword.MaxTimer)

func (d *decoder) timeouts(n *yaml.Node, path string) Timeouts {
	f := section[Timeouts](d, n, path)
	def := DefaultTimeouts
	return Timeouts{
		Connect:       d.timer(f, "connect", def.Connect),
		Client:        d.timer(f, "client", def.Client),
		Server:        d.timer(f, "server", def.Server),
		HTTPRequest:   d.timer(f, "http_request", def.HTTPRequest),
		HTTPKeepAlive: d.timer(f, "http_keep_alive", def.HTTPKeepAlive),
		Queue:         d.timer(f, "queue", def.Queue),
	}
}

// timer decodes a duration that HAProxy holds in a millisecond timer.
func (d *decoder) timer(f *fields, key string, def time.Duration) time.Duration {
	v, n := f.duration(key, def)
	if n != nil && (v < time.Millisecond || v > hapword.MaxTimer) {
		d.errorf(n, f.field(key), "must be from %s, got %s", timerRange, v)
		return def
	}
	return v
}

// Bounds of access_log values.
const (
	maxAccessLogSample = 1_000_000
	minAccessLogSize   = 4 << 10
	maxAccessLogSize   = 1 << 40
	maxAccessLogFiles  = 100
)

func (d *decoder) accessLog(n *yaml.Node) AccessLog {
	f := section[AccessLog](d, n, "access_log")
	a := defaultAccessLog
	// Writing either key decides; the default follows what reads the log.
	if f.get("sample") != nil || f.get("enabled") != nil {
		a.WhenNeeded = false
	}
	// "auto" adapts the rate; a number fixes it.
	if sn := f.get("sample"); sn == nil || sn.Kind != yaml.ScalarNode || sn.Value != "auto" {
		if v, sn := f.integer("sample", 0); sn != nil {
			a.Adaptive = false
			if v < 0 || v > maxAccessLogSample {
				d.errorf(sn, f.field("sample"), "must be auto, or from 0 (off) to %d (log one request in N), got %d", maxAccessLogSample, v)
			} else {
				a.Sample = v
			}
		}
	}
	if on, _ := f.boolean("enabled", a.Enabled); !on {
		a.Sample, a.Adaptive = 0, false
	}
	a.Enabled = a.Sample > 0
	if sn := f.get("max_size"); sn != nil {
		if v, ok := byteSize(sn); !ok {
			d.errorf(sn, f.field("max_size"), `must be a size such as "10MiB", "512KiB" or a number of bytes, got %s`, describe(sn))
		} else if v < minAccessLogSize || v > maxAccessLogSize {
			d.errorf(sn, f.field("max_size"), "must be from 4KiB to 1TiB, got %d bytes", v)
		} else {
			a.MaxSize = v
		}
	}
	if v, fn := f.integer("max_files", a.MaxFiles); fn != nil {
		if v < 1 || v > maxAccessLogFiles {
			d.errorf(fn, f.field("max_files"), "must be from 1 to %d (access.log and its rotated copies), got %d", maxAccessLogFiles, v)
		} else {
			a.MaxFiles = v
		}
	}
	return a
}

// LogsRequests is whether HAProxy sends shoal its access log: when the file
// turns it on, or by default while something reads the latencies it gives
// (LatencyReaders). The reader is up whenever the log is enabled, so that a
// reload adding a latency policy turns logging on in HAProxy alone.
func (c *Config) LogsRequests() bool {
	a := c.AccessLog
	return a.Sample > 0 && (!a.WhenNeeded || len(c.LatencyReaders()) > 0)
}

// LatencyReaders names what reads the access log's latencies, each as
// "groups[N].…" as the file spells it (a policy with the metric it reads).
func (c *Config) LatencyReaders() []string {
	var out []string
	for _, r := range c.latencyReaders() {
		if r.metric != "" {
			out = append(out, fmt.Sprintf("%s (%s)", r.field, r.metric))
		} else {
			out = append(out, r.field)
		}
	}
	return out
}

// latencyReader is a feature that reads the access log's latencies: where
// the file sets it, the policy metric (or formula) it reads, if any, and
// whose latency that is.
type latencyReader struct{ field, metric, of string }

// latencyReaders are the features that read the access log's latencies: a
// policy metric or formula over latency_ms.*, a canary's or blue/green's
// max_p99, outliers.latency.
func (c *Config) latencyReaders() []latencyReader {
	var names []string
	for _, s := range c.Metrics.Sources {
		names = append(names, s.Name)
	}
	var out []latencyReader
	for i, g := range c.Groups {
		at := fmt.Sprintf("groups[%d]", i)
		if a := g.Autoscale; a != nil {
			for _, m := range a.MetricsRead() {
				if readsLatency(m, names) {
					out = append(out, latencyReader{at + ".autoscale", m, "the group's latency"})
				}
			}
		}
		if cn := g.Deploy.Canary; cn != nil && cn.Analysis != nil && cn.Analysis.MaxP99 != nil {
			out = append(out, latencyReader{at + ".deploy.canary.analysis.max_p99", "", "each version's latency"})
		}
		if b := g.Deploy.BlueGreen; b != nil && b.Analysis != nil && b.Analysis.MaxP99 != nil {
			out = append(out, latencyReader{at + ".deploy.blue_green.analysis.max_p99", "", "each version's latency"})
		}
		if o := g.Outliers; o != nil && o.Latency != nil {
			out = append(out, latencyReader{at + ".outliers.latency", "", "each instance's latency"})
		}
	}
	return out
}

// checkLatencyReaders refuses what reads latency when the file turns the
// access log off: it would never see a latency.
func (d *decoder) checkLatencyReaders(cfg *Config) {
	if cfg.AccessLog.Enabled {
		return
	}
	for _, r := range cfg.latencyReaders() {
		of := r.of
		if r.metric != "" {
			of += " (" + r.metric + ")"
		}
		d.errorAt(r.field, "needs the access log (access_log.enabled), whose sampled requests give %s", of)
	}
}

// readsLatency is whether metric m, a name or a formula, reads latency_ms.*.
func readsLatency(m string, sources []string) bool {
	if !IsFormula(m) {
		return strings.HasPrefix(m, "latency_ms.")
	}
	f, err := CompileFormula(m, sources)
	if err != nil {
		return false // the decoder has reported it
	}
	return slices.ContainsFunc(f.Inputs, func(in string) bool { return strings.HasPrefix(in, "latency_ms.") })
}

// byteSize accepts a number of bytes or a number with a KiB, MiB or GiB suffix.
func byteSize(n *yaml.Node) (int64, bool) {
	if n.Kind != yaml.ScalarNode {
		return 0, false
	}
	s, unit := strings.TrimSpace(n.Value), int64(1)
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, unit = strings.TrimSpace(num), u.size
			break
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/unit {
		return 0, false
	}
	return v * unit, true
}
