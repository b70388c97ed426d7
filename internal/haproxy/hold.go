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
//
// The wait also ends when the worker is stopping (a reload replaced it): the
// instance will only ever be added to the new worker, so the request is
// handed to it (see holdLines) with the time it has left, which it carries in
// txn.shoal_left (the handoff frontend sets it from the request). The limit
// is counted on the clock: a 50 ms sleep takes longer on a busy machine.
const holdLua = `-- written by shoal: holds requests while a group that scales to zero has no instance
local function now_ms()
  local t = core.now()
  return t.sec * 1000 + t.usec // 1000
end
core.register_action("shoal_hold", {"http-req"}, function(txn, backend, limit)
  local deadline = now_ms() + (tonumber(txn:get_var("txn.shoal_left")) or tonumber(limit))
  while now_ms() < deadline and txn.f:nbsrv(backend) == 0 and txn.f:stopping() == 0 do
    core.msleep(50)
  end
  txn:set_var("txn.shoal_left", math.max(deadline - now_ms(), 0))
end, 2)
`

// Names of the hand-off from an old worker to the current one: the static
// server every held backend has (weight 0, so it is never balanced to and
// nbsrv does not count it; no instance name, group-NNN, can be it), the
// frontend that takes it in the new worker, and the headers that carry the
// backend and the hold's time left between the two.
const (
	handoffServer        = "shoal_handoff"
	handoffFrontend      = config.HandoffFrontend
	handoffBackendHeader = "X-Shoal-Handoff"
	handoffLeftHeader    = "X-Shoal-Hold-Left"
	holdLeftVar          = "txn.shoal_left"
	handoffVar           = "txn.shoal_handoff"
)

// holdLines are the backend lines of the group that scales to zero at
// position i of the configuration's groups: beyond max_queue held requests, a
// new one gets 503 at once; the rest wait for an instance at most the queue
// timeout. The held requests are counted in the hand-off frontend's table,
// in the group's entry (key i, tracked only by a request that arrives with
// no usable server), not by be_conn, which also counts the requests a
// draining or DOWN instance is still answering. A table of the backend's own
// would be named after the group, and HAProxy refuses it beside the rate
// limit's table of a frontend of the same name. The hold tracks sticky
// counter 1: a frontend's rate limit has taken 0 (see holdCounter).
//
// An old worker (one a reload replaced) never gets the instance a wake
// starts: the Runtime API refuses to enable a server there ("Proxy is
// disabled.") and it runs no checks. So its held requests go to the current
// worker through the hand-off socket once it is stopping (use-server on the
// weight-0 server), where they are held again, counted in that worker's scur
// (a reason to wake) and served by its instance; a second reload hands them
// on again. There they count towards max_queue, but are not refused for it:
// they were let in once. The old worker waits for the answer up to the queue
// and server timeouts, and lives that long (see hardStopAfter).
func holdLines(g config.Group, i int, t config.Timeouts, p Paths) []string {
	n := g.Name
	limit := strconv.FormatInt(int64((t.Queue+time.Millisecond-1)/time.Millisecond), 10) // ms, as a Lua number
	handoff := fmt.Sprintf("if { nbsrv(%s) eq 0 } { stopping }", n)
	return []string{
		fmt.Sprintf("http-request track-sc%d int(%d) table %s if { nbsrv(%s) eq 0 }", holdCounter, i, handoffFrontend, n),
		fmt.Sprintf("http-request deny deny_status 503 if { nbsrv(%s) eq 0 } { sc%d_conn_cur gt %s } !{ var(%s) -m found }", n, holdCounter, strconv.Itoa(g.ScaleToZero.MaxQueue), holdLeftVar),
		fmt.Sprintf("http-request lua.shoal_hold %s %s if { nbsrv(%s) eq 0 }", n, limit, n),
		fmt.Sprintf("http-request set-header %s %s %s", handoffBackendHeader, n, handoff),
		fmt.Sprintf("http-request set-header %s %%[var(%s)] %s", handoffLeftHeader, holdLeftVar, handoff),
		fmt.Sprintf("http-request set-timeout server %s %s", ms(min(t.Queue+t.Server, maxTimer)), handoff),
		// The current worker did its own retries.
		"http-request disable-l7-retry " + handoff,
		fmt.Sprintf("use-server %s %s", handoffServer, handoff),
		fmt.Sprintf("server %s unix@%s send-proxy-v2 weight 0", handoffServer, p.Handoff),
	}
}

// handoffLines are the frontend that takes held requests from old workers:
// only HAProxy itself connects to its socket (mode 600), with the client's
// address in a PROXY header. The request was logged, limited and routed by
// the old worker's frontend: here it only goes to its backend. Its table
// counts each group's held requests (see holdLines); groups is how many the
// configuration has.
func handoffLines(p Paths, groups int) []string {
	return []string{
		fmt.Sprintf("bind unix@%s mode 600 accept-proxy", p.Handoff),
		fmt.Sprintf("stick-table type integer size %d store conn_cur", max(groups, 1)),
		fmt.Sprintf("http-request set-var(%s) req.hdr(%s)", handoffVar, handoffBackendHeader),
		fmt.Sprintf("http-request set-var(%s) req.hdr(%s)", holdLeftVar, handoffLeftHeader),
		"http-request del-header " + handoffBackendHeader,
		"http-request del-header " + handoffLeftHeader,
		fmt.Sprintf("use_backend %%[var(%s)]", handoffVar),
	}
}

// Sticky counters: a request tracks at most one key per counter, the first
// rule to track it wins, and a later track-sc of the same number is ignored
// (its sc fetches then read the first table). So every user has its own:
// the frontend's rate limit 0, the backend's hold 1, a route's access
// control 2 (see accessRules). HAProxy 2.6 has three, fixed at build time
// (tune.stick-counters came with 2.8).
const (
	rateCounter   = 0
	holdCounter   = 1
	accessCounter = 2
)

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
