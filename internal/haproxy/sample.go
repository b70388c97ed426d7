package haproxy

import "fmt"

// Logging bounds for `access_log.sample: auto`: every request is logged
// below minLogged requests a second, and about minLogged a second above that
// up to minLogged*maxSample requests a second (1,000 lines in the 10 s
// behind each latency percentile). Logging every request costs HAProxy about
// 23 % of its throughput, one in ten about 4 %; and each line costs shoal
// about 50 µs of CPU, mostly waking the reader (perf, 800 lines/s under a
// 19,000 requests/s TLS load: 4.6 % of a core, which the 1-in-25 bound this
// once had spent on a 2-core machine HAProxy shares).
const (
	minLogged = 100
	maxSample = 1000
)

// sampleVar holds the rate a request is logged at: one request in N. The
// access log's Format writes it into each line, so every line carries its
// own weight.
const sampleVar = "txn.shoal_sample"

// sampleLines make a backend choose its sample rate from its own request
// rate over the last second (be_sess_rate counts each HTTP request), inside
// HAProxy: the rate follows a burst within a second, with nothing for shoal
// to set and nothing a reload can lose. N is be_sess_rate / minLogged, at
// most maxSample; below minLogged requests a second N is 0, and mod(0) is 0:
// every request is logged.
var sampleLines = []string{
	fmt.Sprintf("http-request set-var(%s) int(%d) if { be_sess_rate ge %d }", sampleVar, maxSample, minLogged*maxSample),
	fmt.Sprintf("http-request set-var(%s) be_sess_rate,div(%d) if { be_sess_rate lt %d }", sampleVar, minLogged, minLogged*maxSample),
	fmt.Sprintf("http-request set-log-level silent if { rand(1000000),mod(%s) gt 0 }", sampleVar),
}
