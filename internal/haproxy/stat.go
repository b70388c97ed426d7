package haproxy

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Status is the status column of a "show stat" line, as HAProxy 2.6 writes
// it. A server's:
//
//	UP                  in rotation, its checks passing
//	UP 1/3              in rotation, 1 of the 3 failed checks (fall) that take it down
//	DOWN                out of rotation
//	DOWN 1/2            out of rotation, 1 of the 2 passed checks (rise) that bring it up
//	NOLB, DRAIN         up but given no new traffic (each also with n/m)
//	MAINT               in maintenance; also "MAINT (via be/s)" when it tracks one
//	no check            in rotation, never checked
//
// and "DOWN (agent)", "DRAIN (agent)" when an agent check set them.
//
// A backend's is UP or DOWN, a frontend's OPEN, STOP or FULL. Callers ask the
// methods rather than compare words, so HAProxy's vocabulary stays here.
type Status string

// word returns the status's first word and whether a count n/m follows it:
// a server part of the way from up to down or back.
func (s Status) word() (word string, counting bool) {
	w, rest, _ := strings.Cut(string(s), " ")
	n, m, ok := strings.Cut(rest, "/")
	_, errN := strconv.Atoi(n)
	_, errM := strconv.Atoi(m)
	return w, ok && errN == nil && errM == nil
}

// IsUp reports whether the server is UP, also while failing checks ("UP 1/3").
func (s Status) IsUp() bool { w, _ := s.word(); return w == "UP" }

// IsDown reports whether the server is DOWN, also while passing checks on its
// way back ("DOWN 1/2"): it takes no traffic either way.
func (s Status) IsDown() bool { w, _ := s.word(); return w == "DOWN" }

// InMaint reports whether the server is in maintenance, itself or through the
// server it tracks.
func (s Status) InMaint() bool { w, _ := s.word(); return w == "MAINT" }

// Draining reports whether the server is draining: up, given no new traffic.
func (s Status) Draining() bool { w, _ := s.word(); return w == "DRAIN" }

// CheckedUp reports whether the server's checks count it up, whatever its
// weight: UP, NOLB or DRAIN, also while failing checks. A server in
// maintenance or never checked is not.
func (s Status) CheckedUp() bool {
	w, _ := s.word()
	return w == "UP" || w == "NOLB" || w == "DRAIN"
}

// GoingDown reports whether the server is up but its latest checks failed,
// short of the fall failures that take it down ("UP 1/3").
func (s Status) GoingDown() bool {
	_, counting := s.word()
	return counting && s.CheckedUp()
}

// StatType is the type column of a "show stat" line.
type StatType int

const (
	TypeFrontend StatType = 0
	TypeBackend  StatType = 1
	TypeServer   StatType = 2
	TypeListener StatType = 3
)

// ServerStat is one line of "show stat": a server's or, as Type says, a
// backend's or frontend's own. Counters are cumulative since the worker
// started; those HAProxy leaves empty because they do not apply read as 0.
type ServerStat struct {
	Type StatType
	// Backend is the proxy (pxname) and Name the server (svname), which is
	// "BACKEND" or "FRONTEND" on a proxy's own line.
	Backend string
	Name    string
	Addr    string
	Status  Status
	// CheckStatus is the last check's result ("L7OK", "L4CON", ...) without
	// the "* " HAProxy prefixes while a check runs.
	CheckStatus string
	// CheckCode is the last check's HTTP status (0 without one) and
	// CheckDuration how long it took.
	CheckCode     int
	CheckDuration time.Duration
	// CheckDesc describes CheckStatus ("Layer7 wrong status"); CheckInfo is
	// what the check saw ("Internal Server Error", "Connection refused").
	CheckDesc string
	CheckInfo string
	// LastChange is how long ago the server last went up or down (lastchg).
	LastChange time.Duration
	// Downs counts the server's transitions from UP to DOWN (chkdown).
	Downs  int
	Weight int
	// Sessions is the current number of sessions (scur), Queue the requests
	// waiting for a server (qcur), Total the cumulated sessions (stot).
	Sessions int
	Queue    int
	Total    int64
	// Requests counts HTTP requests (req_tot), which stot overcounts by
	// every retry; in TCP mode, where HAProxy leaves req_tot empty, it is
	// stot.
	Requests int64
	// Rate is the sessions of the last second (rate).
	Rate int
	// Responses counts HTTP responses by class: Responses[2] is hrsp_2xx,
	// Responses[5] hrsp_5xx and Responses[0] hrsp_other.
	Responses [6]int64
	// ConnErrors counts requests that failed to connect with every retry
	// spent (econ); Retries the connections retried (wretr) and
	// Redispatches those sent to another server instead (wredis).
	ConnErrors   int64
	Retries      int64
	Redispatches int64
	// ServerAborts counts responses the server cut after they had begun
	// (srv_abrt): what no retry can save, such as a process killed while
	// it answered. On the backend's line it outlives deleted servers.
	ServerAborts int64
	// ResponseTime and TotalTime average the last 1024 requests' wait for
	// the response (rtime) and whole time (ttime).
	ResponseTime time.Duration
	TotalTime    time.Duration
	// Limits and the queue (see limits.go): MaxSessions is the most
	// sessions at once (smax), SessionLimit the maxconn (slim, 0: none),
	// MaxQueue the longest queue (qmax) and QueueTime the average wait in
	// it of the last 1024 requests (qtime).
	MaxSessions  int
	SessionLimit int
	MaxQueue     int
	QueueTime    time.Duration
}

// AnsweredBadly reports whether the last check reached the server and it
// answered wrongly: a refused HTTP status (L7STS), content that did not match
// (L7RSP, L6RSP) or an answer too slow (L7TOUT). A refused connection is not:
// the server may still be starting.
func (s ServerStat) AnsweredBadly() bool {
	switch s.CheckStatus {
	case "L7STS", "L7RSP", "L7TOUT", "L6RSP":
		return true
	}
	return false
}

// CheckTimedOut reports whether the last check got no connection (L4TOUT)
// or no HTTP answer (L7TOUT) in time: the server's process may be stopped
// or deadlocked.
func (s ServerStat) CheckTimedOut() bool {
	return s.CheckStatus == "L4TOUT" || s.CheckStatus == "L7TOUT"
}

// RefusedStatus returns the HTTP status the last check refused, or 0 if the
// check did not fail on its status.
func (s ServerStat) RefusedStatus() int {
	if s.CheckStatus != "L7STS" {
		return 0
	}
	return s.CheckCode
}

// Stats returns the servers of backend.
func (c *Client) Stats(ctx context.Context, backend string) ([]ServerStat, error) {
	if !hapword.Name(backend) {
		return nil, fmt.Errorf("haproxy stats: invalid backend name %q", backend)
	}
	stats, err := c.showStat(ctx, backend+" 4 -1")
	if err != nil {
		return nil, err
	}
	// The filter matches a backend by name or by numeric id.
	kept := stats[:0]
	for _, s := range stats {
		if s.Backend == backend && s.Type == TypeServer && s.Name != handoffServer {
			kept = append(kept, s)
		}
	}
	return kept, nil
}

// ServerStats returns the servers of every backend, in one answer.
func (c *Client) ServerStats(ctx context.Context) ([]ServerStat, error) {
	stats, err := c.showStat(ctx, "-1 4 -1")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(stats, func(s ServerStat) bool { return s.Type != TypeServer || s.Name == handoffServer }), nil
}

// BackendStats returns every backend's own line and its servers' lines, in
// one answer so that all are read at the same moment. The hand-off server
// of a held backend is HAProxy's, not an instance: it is left out, as Stats
// leaves it out.
func (c *Client) BackendStats(ctx context.Context) ([]ServerStat, error) {
	stats, err := c.showStat(ctx, "-1 6 -1")
	return slices.DeleteFunc(stats, func(s ServerStat) bool { return s.Type == TypeServer && s.Name == handoffServer }), err
}

// showStat runs "show stat" with filter (proxy, type mask, server id).
func (c *Client) showStat(ctx context.Context, filter string) ([]ServerStat, error) {
	cmd := "show stat " + filter
	out, err := c.Exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	stats, err := parseStats(out)
	if err != nil {
		return nil, fmt.Errorf("haproxy %q: %w", cmd, err)
	}
	return stats, nil
}

// statColumns are the columns parseStats needs; it reads others, which
// not every version writes, when they are there.
var statColumns = []string{"pxname", "svname", "scur", "qcur", "stot", "hrsp_5xx", "econ", "req_tot",
	"wretr", "wredis", "addr", "status", "check_status", "weight", "type"}

// parseStats parses "show stat" CSV by column name, since columns are added
// between HAProxy versions.
func parseStats(out string) ([]ServerStat, error) {
	body, ok := strings.CutPrefix(out, "# ")
	if !ok {
		return nil, answerError(out)
	}
	r := csv.NewReader(strings.NewReader(body))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("parse CSV header: %w", err)
	}
	col := make(map[string]int, len(header))
	for i, name := range header {
		col[name] = i
	}
	for _, name := range statColumns {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("parse CSV: no %q column", name)
		}
	}
	var stats []ServerStat
	for n := 0; ; n++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse CSV: %w", err)
		}
		l := statLine{col: col, rec: rec}
		s := ServerStat{
			Type:          StatType(l.num("type")),
			Backend:       l.str("pxname"),
			Name:          l.str("svname"),
			Addr:          l.str("addr"),
			Status:        Status(l.str("status")),
			CheckStatus:   strings.TrimPrefix(l.str("check_status"), "* "),
			CheckCode:     int(l.num("check_code")),
			CheckDuration: l.dur("check_duration", time.Millisecond),
			CheckDesc:     l.str("check_desc"),
			CheckInfo:     l.str("last_chk"),
			LastChange:    l.dur("lastchg", time.Second),
			Downs:         int(l.num("chkdown")),
			Weight:        int(l.num("weight")),
			Sessions:      int(l.num("scur")),
			Queue:         int(l.num("qcur")),
			Total:         l.num("stot"),
			Requests:      l.num("req_tot"),
			Rate:          int(l.num("rate")),
			ConnErrors:    l.num("econ"),
			Retries:       l.num("wretr"),
			Redispatches:  l.num("wredis"),
			ServerAborts:  l.num("srv_abrt"),
			ResponseTime:  l.dur("rtime", time.Millisecond),
			TotalTime:     l.dur("ttime", time.Millisecond),
			MaxSessions:   int(l.num("smax")),
			SessionLimit:  int(l.num("slim")),
			MaxQueue:      int(l.num("qmax")),
			QueueTime:     l.dur("qtime", time.Millisecond),
		}
		if l.str("req_tot") == "" {
			s.Requests = s.Total
		}
		for class, name := range responseColumns {
			s.Responses[class] = l.num(name)
		}
		if err := errors.Join(l.errs...); err != nil {
			return nil, fmt.Errorf("parse CSV line %d: %w", n+2, err)
		}
		stats = append(stats, s)
	}
	return stats, nil
}

// responseColumns are the columns of ServerStat.Responses, by class.
var responseColumns = [6]string{"hrsp_other", "hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx"}

// statLine reads one line of "show stat" by column name. HAProxy leaves
// counters that do not apply empty: they read as 0.
type statLine struct {
	col  map[string]int
	rec  []string
	errs []error
}

func (l *statLine) str(name string) string {
	if i, ok := l.col[name]; ok && i < len(l.rec) {
		return l.rec[i]
	}
	return ""
}

func (l *statLine) num(name string) int64 {
	v := l.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		// HAProxy 2.6 writes a check_duration not measured (-1) as an
		// unsigned 64-bit number: 18446744073709551615 is -1 again.
		if u, uerr := strconv.ParseUint(v, 10, 64); uerr == nil {
			n, err = int64(u), nil
		}
	}
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("column %s: %w", name, err))
	}
	return n
}

// dur reads a duration in unit; a negative one (not measured) reads as 0.
func (l *statLine) dur(name string, unit time.Duration) time.Duration {
	return time.Duration(max(l.num(name), 0)) * unit
}
