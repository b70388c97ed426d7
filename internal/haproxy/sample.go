package haproxy

import "fmt"

// minLogged bounds `access_log.sample: auto`: every request is logged below
// minLogged requests a second, and about minLogged a second above that
// (1,000 lines in the 10 s behind each latency percentile), whatever the
// rate. Logging every request costs HAProxy about 23 % of its throughput,
// one in ten about 4 %; and each line costs shoal about 50 µs of CPU, mostly
// waking the reader (perf, 800 lines/s under a 19,000 requests/s TLS load:
// 4.6 % of a core, which the 1-in-25 floor this once had spent on a 2-core
// machine HAProxy shares).
const minLogged = 100

// sampleVar holds the rate a request is logged at: one request in N. The
// access log's Format writes it into each line, so every line carries its
// own weight.
const sampleVar = "txn.shoal_sample"

// sampleLines make a backend choose its sample rate from its own request
// rate over the last second (be_sess_rate counts each HTTP request), inside
// HAProxy: the rate follows a burst within a second, with nothing for shoal
// to set and nothing a reload can lose. N is be_sess_rate / minLogged; below
// minLogged requests a second N is 0, and mod(0) is 0: every request is
// logged.
var sampleLines = []string{
	fmt.Sprintf("http-request set-var(%s) be_sess_rate,div(%d)", sampleVar, minLogged),
	fmt.Sprintf("http-request set-log-level silent if { rand(1000000),mod(%s) gt 0 }", sampleVar),
}
