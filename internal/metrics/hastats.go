package metrics

import "github.com/shoal-lb/shoal/internal/haproxy"

// statKey names a "show stat" line: a server's, or with server "" its
// backend's own.
type statKey struct{ backend, server string }

// keyStats indexes HAProxy's backend and server lines.
func keyStats(stats []haproxy.ServerStat) map[statKey]haproxy.ServerStat {
	res := make(map[statKey]haproxy.ServerStat, len(stats))
	for _, s := range stats {
		switch s.Type {
		case haproxy.TypeBackend:
			res[statKey{s.Backend, ""}] = s
		case haproxy.TypeServer:
			res[statKey{s.Backend, s.Name}] = s
		}
	}
	return res
}

// delta is the increase of a cumulative counter. HAProxy restarts its
// counters when its worker is replaced (and a re-added server starts at 0),
// so a decrease means everything counted now is new.
func delta(prev, cur int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
