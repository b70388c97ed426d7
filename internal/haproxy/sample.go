package haproxy

import (
	"context"
	"fmt"
	"strings"
)

// SampleMap names the map of access-log sample rates by backend (one
// request in N is logged) that `access_log.sample: auto` sets at runtime.
// HAProxy 2.6 cannot change a log line's "sample 1:N" at runtime, and
// `set var` is experimental there, but a map's entries can be set over the
// runtime API. /dev/null makes it a map loaded empty, from a file that exists
// wherever the config is checked; every reload empties it again, so the
// caller sets the rates again periodically. A backend without an entry logs
// every request.
const SampleMap = "/dev/null"

// sampleVar holds a request's sample rate between the two rules.
const sampleVar = "txn.shoal_sample"

// sampleLines make a backend log one request in the map's rate for it.
var sampleLines = []string{
	fmt.Sprintf("http-request set-var(%s) be_name,map_str_int(%s,1)", sampleVar, SampleMap),
	fmt.Sprintf("http-request set-log-level silent if { rand(1000000),mod(%s) gt 0 }", sampleVar),
}

// SetSampleRate makes backend log one request in n (n >= 1).
func (c *Client) SetSampleRate(ctx context.Context, backend string, n int) error {
	if n < 1 || !isName(backend) {
		return fmt.Errorf("sample rate %d for backend %q: must be >= 1 for a valid backend name", n, backend)
	}
	set := fmt.Sprintf("set map %s %s %d", SampleMap, backend, n)
	out, err := c.Exec(ctx, set)
	if err != nil {
		return err
	}
	switch got := strings.TrimSpace(out); {
	case got == "":
		return nil
	case !strings.Contains(got, "not found"):
		return &APIError{Command: set, Message: got}
	}
	return c.expect(ctx, fmt.Sprintf("add map %s %s %d", SampleMap, backend, n), "")
}
