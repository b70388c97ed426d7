package config

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// InstanceLogs bounds the instances' logs in STATE_DIR/logs.
type InstanceLogs struct {
	// MaxSize is the size in bytes past which NAME.log is rotated.
	MaxSize int64 `yaml:"max_size"`
	// Keep is how many rotated files (NAME.log.1 … NAME.log.Keep) are kept.
	Keep int `yaml:"keep"`
	// Retention is how long the logs of an instance that is gone are kept.
	Retention time.Duration `yaml:"retention"`
}

// DefaultInstanceLogs applies when instance_logs is left out.
var DefaultInstanceLogs = InstanceLogs{MaxSize: 10 << 20, Keep: 3, Retention: 24 * time.Hour}

const (
	minLogSize   = 4 << 10
	maxLogKeep   = 100
	maxRetention = 10 * 365 * 24 * time.Hour
)

func (d *decoder) instanceLogs(n *yaml.Node, path string) InstanceLogs {
	l := DefaultInstanceLogs
	if n == nil {
		return l
	}
	f := section[InstanceLogs](d, n, path)
	if n := f.get("max_size"); n != nil {
		v, err := parseSize(n)
		switch {
		case err != nil:
			d.errorf(n, f.field("max_size"), `must be a size such as "10MiB", "512KiB" or a number of bytes; got %s`, describe(n))
		case v < minLogSize:
			d.errorf(n, f.field("max_size"), "must be at least 4KiB, got %d bytes", v)
		default:
			l.MaxSize = v
		}
	}
	if v, n := f.integer("keep", l.Keep); n != nil {
		if v < 0 || v > maxLogKeep {
			d.errorf(n, f.field("keep"), "must be from 0 to %d, got %d", maxLogKeep, v)
		} else {
			l.Keep = v
		}
	}
	l.Retention = d.within(f, "retention", l.Retention, time.Minute, maxRetention)
	return l
}

var sizeRE = regexp.MustCompile(`^([0-9]+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?$`)

var sizeUnits = map[string]int64{"": 1, "B": 1, "KB": 1e3, "KiB": 1 << 10, "MB": 1e6, "MiB": 1 << 20, "GB": 1e9, "GiB": 1 << 30}

// parseSize reads a number of bytes with an optional unit.
func parseSize(n *yaml.Node) (int64, error) {
	if n.Kind != yaml.ScalarNode {
		return 0, strconv.ErrSyntax
	}
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(n.Value))
	if m == nil {
		return 0, strconv.ErrSyntax
	}
	v, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	unit := sizeUnits[m[2]]
	if v > math.MaxInt64/unit {
		return 0, strconv.ErrRange
	}
	return v * unit, nil
}
