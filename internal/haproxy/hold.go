package haproxy

import (
	"fmt"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// holdLua is the action that holds a request while its backend has no
// usable server, for groups that scale to zero. HAProxy 2.6 answers 503 at
// once when a backend has no usable server (none, or all in maintenance or
// draining) and queues only behind servers that are full, and a placeholder
// server (maxconn 1, minconn 0) took the request and failed to connect; so the
// request waits here instead, polling nbsrv, and goes on to the normal server
// choice once an instance is UP, or after the limit (then the 503 is
// HAProxy's own). A held request counts in the backend's scur, which is how
// shoal sees it. tune.lua.session-timeout counts Lua's run time, not sleeps.
const holdLua = `-- written by shoal: holds requests while a group that scales to zero has no instance
core.register_action("shoal_hold", {"http-req"}, function(txn, backend, limit)
  local left = tonumber(limit)
  while left > 0 and txn.f:nbsrv(backend) == 0 do
    core.msleep(50)
    left = left - 50
  end
end, 2)
`

// holdLines are the backend lines of a group that scales to zero: beyond
// max_queue held requests, a new one gets 503 at once; the rest wait for an
// instance at most the queue timeout. The held requests are counted in the
// backend's own table (one entry, tracked only by a request that arrives
// with no usable server), not by be_conn, which also counts the requests a
// draining or DOWN instance is still answering.
func holdLines(g config.Group, queue time.Duration) []string {
	n := g.Name
	limit := strconv.FormatInt(int64((queue+time.Millisecond-1)/time.Millisecond), 10) // ms, as a Lua number
	return []string{
		"stick-table type integer size 1 store conn_cur",
		fmt.Sprintf("http-request track-sc0 int(0) if { nbsrv(%s) eq 0 }", n),
		fmt.Sprintf("http-request deny deny_status 503 if { nbsrv(%s) eq 0 } { sc0_conn_cur gt %s }", n, strconv.Itoa(g.ScaleToZero.MaxQueue)),
		fmt.Sprintf("http-request lua.shoal_hold %s %s if { nbsrv(%s) eq 0 }", n, limit, n),
	}
}

// needsHold reports whether any group scales to zero (and so the Lua action
// is loaded).
func needsHold(cfg *config.Config) bool {
	for _, g := range cfg.Groups {
		if g.ScaleToZero != nil {
			return true
		}
	}
	return false
}

// HoldScript is the Lua file a configuration with a group that scales to
// zero loads (Paths.Lua); `shoal validate` writes it beside the file it checks.
func HoldScript() []byte { return []byte(holdLua) }
