package config

import (
	"fmt"
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
	// "auto" is the default written out; a number fixes the rate.
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
