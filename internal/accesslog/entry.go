// Package accesslog receives HAProxy's per-request log on a unix datagram
// socket, appends it to a size-rotated file and hands parsed entries to
// subscribers (latency percentiles, monitoring) without ever slowing down.
package accesslog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Format is the HAProxy log-format whose lines Parse reads: accept time
// (unix seconds.milliseconds), client ip:port, backend, server, status, the
// timers %Tw %Tc %Tr %Ta (ms, -1 when the phase did not happen), response
// bytes, retries (prefixed "+" when redispatched), termination state, the
// sample rate N the request was logged at ("-" when the backend does not
// choose one: see haproxy's sampleLines), method and URI. The URI is last so
// that whatever it holds cannot shift a field.
const Format = "%Ts.%ms %ci:%cp %b %s %ST %Tw %Tc %Tr %Ta %B %rc %tsc %[var(txn.shoal_sample)] %HM %HU"

// formatFields is the number of space-separated fields of Format; the last
// one (the URI) takes the rest of the line.
const formatFields = 15

// maxLine bounds the line Parse reads; HAProxy's default is 1024 bytes.
const maxLine = 64 << 10

// Entry is one request as HAProxy logged it.
type Entry struct {
	// Time is when HAProxy accepted the connection or request.
	Time time.Time
	// Client is the client's ip:port.
	Client string
	// Backend is the group's backend, or the frontend's name ("shoal") when
	// the request never reached one; Server is "<NOSRV>" when no server was
	// chosen.
	Backend string
	Server  string
	// Method and URI are "<BADREQ>" for a request HAProxy could not read.
	Method string
	URI    string
	// Termination is HAProxy's four-character termination state, "----"
	// for a normal end; "cR--" is a client that timed out sending its request.
	Termination string
	// Status is the HTTP status sent to the client, -1 if none.
	Status int
	// Tw is the time waiting in queues, Tc to connect to the server, Tr for
	// the server's response headers, Ta for the whole request. A negative
	// value means the phase did not happen (no server, connection failed...).
	Tw, Tc, Tr, Ta time.Duration
	// Bytes is what HAProxy counted as sent to the client (%B); 0 for its own
	// error responses such as 408.
	Bytes int64
	// Retries is the number of connection retries; Redispatched is true when
	// the last one went to another server.
	Retries      int
	Redispatched bool
	// SampleRate is N when one request in N is logged: each entry stands
	// for SampleRate requests. Parse sets it from the line; 0 when the line
	// has none (the reader then sets the configured rate).
	SampleRate int
}

// ErrNotRequest is Parse's error for one of HAProxy's own messages, which
// come on the same socket: a connection that failed before its first request
// ("127.0.0.1:34236 [28/Nov/2026:10:59:40.239] edge/1: Connection closed
// during SSL handshake", a TLS client giving up) or a proxy stopping ("Proxy
// web stopped (...)").
var ErrNotRequest = errors.New("one of HAProxy's own messages, not a request")

// Parse reads one line in Format. It never panics, whatever the line holds.
func Parse(line string) (Entry, error) {
	line = strings.TrimRight(line, "\r\n\x00")
	e, err := parse(line)
	// Only a line that is not a request is looked at again: a request
	// costs nothing more.
	if err != nil && notice(line) {
		return Entry{}, fmt.Errorf("%w: %q", ErrNotRequest, truncate(line))
	}
	return e, err
}

func parse(line string) (Entry, error) {
	var e Entry
	if len(line) > maxLine {
		return e, fmt.Errorf("log line of %d bytes: longer than %d", len(line), maxLine)
	}
	f := strings.SplitN(line, " ", formatFields)
	if len(f) != formatFields {
		return e, fmt.Errorf("log line has %d fields, want %d: %q", len(f), formatFields, truncate(line))
	}
	var err error
	fail := func(name string, cause error) (Entry, error) {
		return Entry{}, fmt.Errorf("log line field %s: %w: %q", name, cause, truncate(line))
	}
	if e.Time, err = parseTime(f[0]); err != nil {
		return fail("time", err)
	}
	// %ci:%cp does not bracket IPv6 addresses: the port follows the last colon.
	e.Client = f[1]
	if i := strings.LastIndexByte(e.Client, ':'); i <= 0 || i == len(e.Client)-1 {
		return fail("client", errors.New("not ip:port"))
	}
	e.Backend, e.Server = f[2], f[3]
	if e.Backend == "" || e.Server == "" {
		return fail("backend/server", errors.New("empty"))
	}
	if e.Status, err = strconv.Atoi(f[4]); err != nil || e.Status < -1 || e.Status > 999 {
		return fail("status", errors.New("not an HTTP status"))
	}
	for i, d := range []*time.Duration{&e.Tw, &e.Tc, &e.Tr, &e.Ta} {
		if *d, err = parseTimer(f[5+i]); err != nil {
			return fail([]string{"Tw", "Tc", "Tr", "Ta"}[i], err)
		}
	}
	if e.Bytes, err = strconv.ParseInt(f[9], 10, 64); err != nil || e.Bytes < 0 {
		return fail("bytes", errors.New("not a byte count"))
	}
	rc := f[10]
	if r, ok := strings.CutPrefix(rc, "+"); ok {
		e.Redispatched, rc = true, r
	}
	if e.Retries, err = strconv.Atoi(rc); err != nil || e.Retries < 0 {
		return fail("retries", errors.New("not a count"))
	}
	e.Termination = f[11]
	if len(e.Termination) != 4 {
		return fail("termination", errors.New("not four characters"))
	}
	if f[12] != "-" {
		// HAProxy logs 0 below 100 requests/s, where every request is logged.
		if e.SampleRate, err = strconv.Atoi(f[12]); err != nil || e.SampleRate < 0 || e.SampleRate > 1<<20 {
			return fail("sample", errors.New("not a sample rate"))
		}
		e.SampleRate = max(e.SampleRate, 1)
	}
	e.Method, e.URI = f[13], f[14]
	if e.Method == "" {
		return fail("method", errors.New("empty"))
	}
	return e, nil
}

// parseTime reads "%Ts.%ms": unix seconds, a dot, three digits of milliseconds.
func parseTime(s string) (time.Time, error) {
	sec, msec, ok := strings.Cut(s, ".")
	if !ok || len(msec) != 3 {
		return time.Time{}, errors.New("not seconds.milliseconds")
	}
	secs, err1 := strconv.ParseInt(sec, 10, 64)
	ms, err2 := strconv.Atoi(msec)
	if err1 != nil || err2 != nil || secs < 0 || secs > 1<<40 || ms < 0 {
		return time.Time{}, errors.New("not seconds.milliseconds")
	}
	return time.Unix(secs, int64(ms)*int64(time.Millisecond)), nil
}

// notice reports whether line has the shape of one of HAProxy's own
// messages: "ip:port [date] frontend/bind: text" or "Proxy name ...".
func notice(line string) bool {
	if strings.HasPrefix(line, "Proxy ") {
		return true
	}
	f := strings.SplitN(line, " ", 4)
	return len(f) == 4 && strings.HasPrefix(f[1], "[") && strings.HasSuffix(f[1], "]") &&
		strings.Contains(f[2], "/") && strings.HasSuffix(f[2], ":")
}

// parseTimer reads a millisecond timer; -1 (absent) stays negative.
func parseTimer(s string) (time.Duration, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < -1 || v > 1<<31 {
		return 0, errors.New("not a millisecond timer")
	}
	return time.Duration(v) * time.Millisecond, nil
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
