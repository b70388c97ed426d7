package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/loadgen"
)

// The calibration of a demo-backend with one worker, for the benchmarks
// that replay a trace on it and model it in the simulator.

// Calibration is what Calibrate measured on one instance.
type Calibration struct {
	// capacity (requests/s), p99 and the coefficient of variation of the
	// service time, from serial requests: a serial request's latency is its
	// service time.
	Capacity  float64
	P99       time.Duration
	ServiceCV float64
	// CPUs is the CPU per request (from /proc) times the capacity: the
	// share of a core that reads as 100 %.
	CPUs float64
	// SaturatedCPU is the CPU, in percent of cpus, the instance shows with
	// requests always queued for it: less than 100, as it spends less per
	// request when the next one is already waiting.
	SaturatedCPU float64
}

// SaturatingClients keep a one-worker instance's queue from running dry.
const SaturatingClients = 4

// Calibrate measures one demo-backend (the binary at backend) with one
// worker: serial GET query for d, then SaturatingClients at once for d.
func Calibrate(ctx context.Context, env *Env, backend, query string, d time.Duration) (Calibration, error) {
	var cal Calibration
	p, port, err := env.StartBackend(ctx, backend, "calibrate", "--workers", "1")
	if err != nil {
		return cal, err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d%s", port, query)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	t0, err := CPUTicks(p.Pid())
	if err != nil {
		return cal, err
	}
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < d {
		if err := ctx.Err(); err != nil {
			return cal, err
		}
		s := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return cal, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return cal, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
		}
		lat = append(lat, time.Since(s))
	}
	elapsed := time.Since(start)
	t1, err := CPUTicks(p.Pid())
	if err != nil {
		return cal, err
	}
	cpuPerReq := float64(t1-t0) / ClockTicks / float64(len(lat))
	if cpuPerReq <= 0 {
		return cal, fmt.Errorf("no CPU time measured for %d requests", len(lat))
	}
	var sum, sumSq float64
	for _, l := range lat {
		sum += l.Seconds()
		sumSq += l.Seconds() * l.Seconds()
	}
	mean := sum / float64(len(lat))
	cal.ServiceCV = math.Sqrt(max(0, sumSq/float64(len(lat))-mean*mean)) / mean
	slices.Sort(lat)
	cal.P99 = lat[len(lat)*99/100]
	cal.Capacity = float64(len(lat)) / elapsed.Seconds()
	cal.CPUs = max(0.001, math.Round(cpuPerReq*cal.Capacity*1000)/1000)

	stop, err := loadgen.Start(ctx, loadgen.Options{URL: url, Concurrency: SaturatingClients, Timeout: 10 * time.Second})
	if err != nil {
		return cal, err
	}
	time.Sleep(time.Second) // the queue fills
	t0, err = CPUTicks(p.Pid())
	if err != nil {
		stop()
		return cal, err
	}
	start = time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	t1, err = CPUTicks(p.Pid())
	elapsed = time.Since(start)
	res := stop()
	if err != nil {
		return cal, err
	}
	if err := ctx.Err(); err != nil {
		return cal, err
	}
	if res.Failures > 0 {
		return cal, fmt.Errorf("%s: %d of %d saturating requests failed: %v", url, res.Failures, res.Requests, res.FailureSamples)
	}
	cal.SaturatedCPU = min(100, 100*float64(t1-t0)/ClockTicks/elapsed.Seconds()/cal.CPUs)
	return cal, nil
}
