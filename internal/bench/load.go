package bench

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
)

// Sample is one closed-loop measurement round.
type Sample struct {
	RPS    float64 `json:"rps"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
	Errors int64   `json:"errors"`
}

// Tool measures a URL's closed-loop throughput for a while.
type Tool struct {
	Name string // "wrk" or "loadgen"
	Desc string // for the report, with the settings
	Note string // why this tool and not the one asked for, if so
	run  func(ctx context.Context, url string, d time.Duration) (Sample, error)
}

// NewTool returns wrk with conns connections on one thread if want is "wrk"
// and it is installed (as in the original bench/run.sh: it is lighter than
// any Go client, so the generator takes less of the 2 cores from what it
// measures), else shoal's own loadgen in this process.
func NewTool(want string, conns int, round time.Duration) (Tool, error) {
	switch want {
	case "wrk":
		if path, err := exec.LookPath("wrk"); err == nil {
			version := "unknown version"
			// wrk -v prints "wrk 4.1.0 [epoll] Copyright ..." and exits 1.
			out, _ := exec.Command(path, "-v").CombinedOutput()
			if f := strings.Fields(string(out)); len(f) >= 2 {
				version = f[0] + " " + f[1]
			}
			return Tool{
				Name: "wrk",
				Desc: fmt.Sprintf("wrk -t1 -c%d -d%v --latency (%s)", conns, round, version),
				run: func(ctx context.Context, url string, d time.Duration) (Sample, error) {
					return RunWrk(ctx, path, url, conns, d)
				},
			}, nil
		}
		fallthrough
	case "loadgen":
		var note string
		if want == "wrk" {
			note = "wrk is not installed (scripts/install-deps.sh wrk installs it); used loadgen"
		}
		return Tool{
			Name: "loadgen",
			Desc: fmt.Sprintf("loadgen (in process) -c %d -d %v", conns, round),
			Note: note,
			run: func(ctx context.Context, url string, d time.Duration) (Sample, error) {
				res, err := loadgen.Run(ctx, loadgen.Options{URL: url, Concurrency: conns, Duration: d, Timeout: 10 * time.Second})
				if err != nil {
					return Sample{}, err
				}
				return Sample{RPS: res.RPS, P50ms: Msf(res.P50), P99ms: Msf(res.P99), Errors: res.Failures}, nil
			},
		}, nil
	}
	return Tool{}, BadUsage("-tool %q: want wrk or loadgen", want)
}

// Measure runs one round.
func (t Tool) Measure(ctx context.Context, url string, d time.Duration) (Sample, error) {
	return t.run(ctx, url, d)
}

// RunWrk runs wrk on url; extra are more of its flags (-H "Connection:
// close": a new connection per request).
func RunWrk(ctx context.Context, path, url string, conns int, d time.Duration, extra ...string) (Sample, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	args := append([]string{"-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s", "--latency"}, extra...)
	cmd := exec.CommandContext(ctx, path, append(args, url)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Sample{}, fmt.Errorf("wrk: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return parseWrk(string(out))
}

// parseWrk reads wrk's report: Requests/sec, the 50% and 99% latency lines,
// and the error counts.
func parseWrk(out string) (Sample, error) {
	s := Sample{RPS: math.NaN(), P50ms: math.NaN(), P99ms: math.NaN()}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			s.RPS, _ = strconv.ParseFloat(f[1], 64)
		case len(f) == 2 && f[0] == "50%":
			s.P50ms = wrkMs(f[1])
		case len(f) == 2 && f[0] == "99%":
			s.P99ms = wrkMs(f[1])
		case strings.HasPrefix(sc.Text(), "  Non-2xx or 3xx responses:") && len(f) > 0:
			n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			s.Errors += n
		case len(f) > 2 && f[0] == "Socket" && f[1] == "errors:":
			for _, v := range f[2:] {
				if n, err := strconv.ParseInt(strings.TrimSuffix(v, ","), 10, 64); err == nil {
					s.Errors += n
				}
			}
		}
	}
	if math.IsNaN(s.RPS) {
		return s, fmt.Errorf("wrk: no Requests/sec in its output: %q", out)
	}
	return s, nil
}

// wrkMs converts wrk's "789.00us", "8.25ms", "1.02s" or "1.5m" to milliseconds.
func wrkMs(v string) float64 {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}} {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			if f, err := strconv.ParseFloat(n, 64); err == nil {
				return f * u.ms
			}
			return math.NaN()
		}
	}
	return math.NaN()
}

// openLoad is open-loop load (loadgen.RunOpen) running in the background
// while a benchmark watches shoal.
type openLoad struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    loadgen.OpenResult
	err    error
}

// StartOpenLoad starts o's schedule; it runs until the schedule ends, Stop,
// or ctx is done.
func StartOpenLoad(ctx context.Context, o loadgen.OpenOptions) *openLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &openLoad{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.res, l.err = loadgen.RunOpen(ctx, o)
	}()
	return l
}

// Done is closed when the load has ended.
func (l *openLoad) Done() <-chan struct{} { return l.done }

// Wait waits until the load has ended and returns its result.
func (l *openLoad) Wait() (loadgen.OpenResult, error) {
	<-l.done
	l.cancel()
	return l.res, l.err
}

// Stop ends the load now and returns its result.
func (l *openLoad) Stop() (loadgen.OpenResult, error) {
	l.cancel()
	return l.Wait()
}
