package zero

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// zero measures scale from zero (a group with min_size 0 and scale_to_zero):
// the latency of the first request that reaches a sleeping group, which
// HAProxy holds while shoal notices it and starts an instance, and whether
// any request of a burst sent while the group sleeps fails. Each of -runs
// wake-ups puts the group to sleep by hand (a job to size 0), waits two
// metrics intervals, then times one GET on a new connection until its 200.
// The baseline, measured in the same run right after each wake-up, is the
// same GET on a new connection with the instance already running. Then
// -bursts times, the group is put to sleep and -burst concurrent GETs (one
// connection each) are sent at once; every one must get a 200.
var Command = &bench.Command{
	Name:    "zero",
	Summary: "scale from zero: first-request latency from 0 instances vs one running; a burst while asleep",
	Run:     runZero,
}

// zeroRun is one wake-up.
type zeroRun struct {
	FirstRequest float64 `json:"first_request_s"` // GET to its 200, group asleep
	Awake        float64 `json:"awake_s"`         // the same GET with the instance running
	Detection    float64 `json:"detection_s"`     // GET sent to the wake decision
	JobID        string  `json:"job_id,omitempty"`
	Reason       string  `json:"reason,omitempty"` // the wake decision's
}

// zeroBurst is one burst sent while the group slept.
type zeroBurst struct {
	Requests int      `json:"requests"`
	Failed   int      `json:"failed"`
	Errors   []string `json:"errors,omitempty"` // the first few failures
	P50      float64  `json:"p50_s"`
	P99      float64  `json:"p99_s"`
	Max      float64  `json:"max_s"`
}

type zeroDetails struct {
	Runs     []zeroRun   `json:"runs"`
	Bursts   []zeroBurst `json:"bursts"`
	P50      *float64    `json:"first_request_p50_s"`
	P99      *float64    `json:"first_request_p99_s"`
	AwakeP50 *float64    `json:"awake_p50_s"`
	AwakeP99 *float64    `json:"awake_p99_s"`
	Failed   int         `json:"burst_failed"`
	Sent     int         `json:"burst_requests"`
}

func runZero(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	runs := fs.Int("runs", 20, "wake-ups timed")
	bursts := fs.Int("bursts", 3, "bursts sent while asleep")
	burstN := fs.Int("burst", 200, "concurrent requests per burst")
	interval := fs.Duration("interval", time.Second, "metrics.interval: how often shoal looks for held requests")
	timeout := fs.Duration("timeout", 60*time.Second, "longest a wake-up or sleep may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *runs < 1 || *bursts < 0 || *burstN < 1 || *burstN > 5000 || *interval < 100*time.Millisecond || *timeout < 10*time.Second {
		return nil, bench.BadUsage("-runs >= 1, -bursts >= 0, -burst 1..5000, -interval >= 100ms and -timeout >= 10s please")
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return zeroConfig(port, filepath.Join(env.Work, "state"), backend, *interval)
	})
	if err != nil {
		return nil, err
	}
	// In service: none, once the API answers (the group starts asleep).
	if err := sh.WaitInService(ctx, "web", 0, *timeout, bench.PollEvery); err != nil {
		return nil, err
	}
	url := sh.URL("/")
	// One connection per request: a kept-alive one would hide the
	// connection setup the baseline pays too.
	client := &http.Client{Timeout: 40 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	get := func() (time.Duration, error) {
		t0 := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, errors.New(resp.Status)
		}
		return time.Since(t0), nil
	}
	sleep := func() error {
		// The wake-up's job may still be running (it ends once the group
		// has converged, after the request was served).
		deadline := time.Now().Add(*timeout)
		for {
			err := sh.API.Size(ctx, "web", 0, *timeout)
			if err == nil {
				break
			}
			if !strings.Contains(err.Error(), "another job") || time.Now().After(deadline) {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
		// Two samples without the requests of the run before, so the next
		// request is what wakes the group; then a random part of an
		// interval, or every request would arrive at the same point
		// between two samples and the detection delay would be measured
		// at one value instead of over its range.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2**interval + rand.N(*interval)):
		}
		return nil
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &zeroDetails{}
	rep.Details = det
	var lastEvent int64
	if evs, err := sh.API.EventsAfter(ctx, "web", 0, 1000); err == nil && len(evs) > 0 {
		lastEvent = evs[len(evs)-1].ID
	}
	for i := 1; i <= *runs; i++ {
		if err := sleep(); err != nil {
			return nil, fmt.Errorf("run %d: put to sleep: %w: %s", i, err, sh.LogTail(5))
		}
		var r zeroRun
		sent := time.Now()
		d, err := get()
		if err != nil {
			return nil, fmt.Errorf("run %d: first request: %w: %s", i, err, sh.LogTail(5))
		}
		r.FirstRequest = d.Seconds()
		if d, err = get(); err != nil {
			return nil, fmt.Errorf("run %d: request with the instance running: %w", i, err)
		}
		r.Awake = d.Seconds()
		evs, err := sh.API.EventsAfter(ctx, "web", lastEvent, 1000)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			lastEvent = e.ID
			if e.Rule == "wake" && e.JobID != "" && r.JobID == "" {
				r.Detection, r.JobID, r.Reason = e.Time.Sub(sent).Seconds(), e.JobID, e.Reason
			}
		}
		env.Log.Info("wake-up", "n", i, "of", *runs, "first_request_s", bench.Round2(r.FirstRequest), "awake_s", bench.Round2(r.Awake), "detection_s", bench.Round2(r.Detection), "reason", r.Reason)
		det.Runs = append(det.Runs, r)
	}
	for i := 1; i <= *bursts; i++ {
		if err := sleep(); err != nil {
			return nil, fmt.Errorf("burst %d: put to sleep: %w", i, err)
		}
		b := burstAsleep(client, url, *burstN)
		env.Log.Info("burst", "n", i, "of", *bursts, "requests", b.Requests, "failed", b.Failed, "p99_s", bench.Round2(b.P99), "max_s", bench.Round2(b.Max))
		det.Bursts = append(det.Bursts, b)
		det.Failed += b.Failed
		det.Sent += b.Requests
	}

	var first, awake, detection []float64
	for _, r := range det.Runs {
		first, awake = append(first, r.FirstRequest), append(awake, r.Awake)
		if r.JobID != "" {
			detection = append(detection, r.Detection)
		}
	}
	det.P50, det.P99 = bench.Num(bench.Quantile(first, 0.5)), bench.Num(bench.Quantile(first, 0.99))
	det.AwakeP50, det.AwakeP99 = bench.Num(bench.Quantile(awake, 0.5)), bench.Num(bench.Quantile(awake, 0.99))
	failed := float64(det.Failed)
	rep.Figures = []bench.Figure{{
		Name: fmt.Sprintf("first-request latency from zero, p50 of %d", len(first)), Unit: "s", Value: det.P50,
		Baseline: "one instance running, p50", BaselineValue: det.AwakeP50, Ratio: bench.RatioOf(det.P50, det.AwakeP50),
		Note: "one GET on a new connection to a sleeping group, until its 200: detection (up to one metrics interval) + the instance's start + its health gate",
	}, {
		Name: fmt.Sprintf("first-request latency from zero, p99 of %d", len(first)), Unit: "s", Value: det.P99,
		Baseline: "one instance running, p99", BaselineValue: det.AwakeP99, Ratio: bench.RatioOf(det.P99, det.AwakeP99),
		Note: "nearest rank: with 20 runs the p99 is the slowest",
	}, {
		Name: "request sent to the wake decision, median", Unit: "s", Value: bench.Num(bench.Median(detection)),
		Note: fmt.Sprintf("metrics.interval %s", *interval),
	}, {
		Name: fmt.Sprintf("failed requests of %d bursts of %d sent while asleep", len(det.Bursts), *burstN), Value: bench.Num(failed),
		Goal: "0", Verdict: bench.Verdict(bench.Num(failed), func(v float64) bool { return v == 0 }),
	}}
	rep.Settings = []bench.Setting{
		{Name: "group", Value: fmt.Sprintf("demo-backend (GOMAXPROCS=1), min_size 0, max_size 2, scale_to_zero {idle_after: 10m, max_queue: 1000}; health check every 100 ms, rise 1; metrics every %s", *interval)},
		{Name: "sleep", Value: "by hand before each wake-up and burst (a job to size 0), then two metrics intervals and a random part of a third without requests"},
		{Name: "requests", Value: "GET / (9 KB page), one connection per request, from this process on 127.0.0.1"},
	}
	var md strings.Builder
	md.WriteString("| wake-up | first request | with one running | to the wake decision | job |\n|---:|---:|---:|---:|---|\n")
	for i, r := range det.Runs {
		fmt.Fprintf(&md, "| %d | %.3f s | %.4f s | %.2f s | %s |\n", i+1, r.FirstRequest, r.Awake, r.Detection, r.JobID)
	}
	md.WriteString("\n| burst | requests | failed | p50 | p99 | last answered |\n|---:|---:|---:|---:|---:|---:|\n")
	for i, b := range det.Bursts {
		fmt.Fprintf(&md, "| %d | %d | %d | %.3f s | %.3f s | %.3f s |\n", i+1, b.Requests, b.Failed, b.P50, b.P99, b.Max)
		for _, e := range b.Errors {
			fmt.Fprintf(&md, "|  | | %s | | | |\n", e)
		}
	}
	rep.Markdown = md.String()
	return rep, nil
}

// burstAsleep sends n concurrent GETs at once and times each to its answer.
func burstAsleep(client *http.Client, url string, n int) zeroBurst {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		times []float64
		b     = zeroBurst{Requests: n}
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get(url)
			msg := ""
			if err != nil {
				msg = err.Error()
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					msg = resp.Status
				}
			}
			mu.Lock()
			defer mu.Unlock()
			times = append(times, time.Since(start).Seconds())
			if msg != "" {
				b.Failed++
				if len(b.Errors) < 5 {
					b.Errors = append(b.Errors, msg)
				}
			}
		}()
	}
	wg.Wait()
	b.P50, b.P99, b.Max = bench.Quantile(times, 0.5), bench.Quantile(times, 0.99), slices.Max(times)
	return b
}

// zeroConfig is a group that sleeps at 0 instances; idle_after is long so
// that only the benchmark puts it to sleep, at the moments it chooses.
func zeroConfig(port int, stateDir, backend string, interval time.Duration) string {
	return fmt.Sprintf(`listen: 127.0.0.1:%d
state_dir: %s
metrics: {interval: %s}
groups:
  - name: web
    min_size: 0
    max_size: 2
    cooldown: {up: 0s, down: 0s}
    drain_timeout: 5s
    health: {path: /healthz, interval: 100ms, rise: 1, fall: 3, timeout: 1s, grace: 20s}
    scale_to_zero: {idle_after: 10m, max_queue: 1000}
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
      env: {GOMAXPROCS: "1"}
      stop_timeout: 5s
`, port, stateDir, interval, backend)
}
