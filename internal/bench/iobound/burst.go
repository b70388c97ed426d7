package iobound

import (
	"bufio"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

// burstTarget is one of the two shoals of the burst part.
type burstTarget struct {
	name string // "queued" or "direct"
	sh   *bench.Shoal
	dir  string // its state_dir
}

// burstConfig is a group of two instances, queued under max_conn or not.
// Checks every 5 s (down after 3 failed, each timing out at 1 s): a burst
// that slows the instances' answers is measured as latency, not as
// instances taken out.
func burstConfig(port int, dir, backend string, maxConn int) string {
	extra := ""
	if maxConn > 0 {
		extra = fmt.Sprintf("limits: {max_conn: %d, queue_timeout: 60s}\n", maxConn)
	}
	return bench.BenchConfig(port, dir, "", bench.GroupYAML("web", backend, 2, 2, "5s", extra)) + "access_log: {sample: 1}\n"
}

// burstSide is one burst on one shoal.
type burstSide struct {
	Target string `json:"target"`
	// Client side, from sending to the end of the body.
	ClientP50ms float64 `json:"client_p50_ms"`
	ClientP99ms float64 `json:"client_p99_ms"`
	ClientMaxms float64 `json:"client_max_ms"`
	Failed      int     `json:"failed"`
	// FailedBy counts the failures by status ("0": no answer).
	FailedBy map[string]int `json:"failed_by,omitempty"`
	TookMS   float64        `json:"took_ms"`
	// From HAProxy's access log: Tw (queue), Tr (the instance), Ta (all).
	Logged  int     `json:"logged"`
	TwP50ms float64 `json:"tw_p50_ms"`
	TwP99ms float64 `json:"tw_p99_ms"`
	TrP50ms float64 `json:"tr_p50_ms"`
	TrP99ms float64 `json:"tr_p99_ms"`
	TrMaxms float64 `json:"tr_max_ms"`
	TaP99ms float64 `json:"ta_p99_ms"`
	// MostInFlight is the most requests an instance had at once since
	// HAProxy started (smax, the larger of the two).
	MostInFlight int `json:"most_in_flight_per_instance"`
}

// burstRound is one burst on each shoal.
type burstRound struct {
	Round  int        `json:"round"`
	Order  [2]string  `json:"order"`
	Queued *burstSide `json:"queued"`
	Direct *burstSide `json:"direct"`
}

func runBursts(ctx context.Context, env *bench.Env, backend, sbin string, s settings) ([]*burstRound, error) {
	var targets []*burstTarget
	for _, t := range []struct {
		name    string
		maxConn int
	}{{"queued", s.maxConn}, {"direct", 0}} {
		port, err := env.FreePort()
		if err != nil {
			return nil, err
		}
		dir := stateDir(env, "burst-"+t.name)
		sh, err := env.StartShoalNamed("shoal-"+t.name, sbin, burstConfig(port, dir, backend, t.maxConn))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
		defer env.Stop(sh.Proc)
		targets = append(targets, &burstTarget{name: t.name, sh: sh, dir: dir})
	}
	for _, t := range targets {
		if err := t.sh.WaitInService(ctx, "web", 2, 90*time.Second, bench.PollEvery); err != nil {
			return nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	url := fmt.Sprintf("/work?ms=%d&wait=%d", s.burstCPU, s.burstIO)
	var rounds []*burstRound
	for i := range s.rounds {
		r := &burstRound{Round: i + 1}
		order := []*burstTarget{targets[0], targets[1]}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for j, t := range order {
			r.Order[j] = t.name
			side, err := burstOnce(ctx, t, url, s.burst)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", i+1, t.name, err)
			}
			env.Log.Info("iobound burst", "round", i+1, "target", t.name, "client_p99_ms", side.ClientP99ms, "tr_p99_ms", side.TrP99ms, "tw_p99_ms", side.TwP99ms, "failed", side.Failed)
			if t.name == "queued" {
				r.Queued = side
			} else {
				r.Direct = side
			}
			// The instances' CPU settles before the next burst.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(3 * time.Second):
			}
		}
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// burstOnce sends n requests at once to t and reads their timers from
// HAProxy's access log.
func burstOnce(ctx context.Context, t *burstTarget, path string, n int) (*burstSide, error) {
	logPath := filepath.Join(t.dir, "logs", "access.log")
	var offset int64
	if fi, err := os.Stat(logPath); err == nil {
		offset = fi.Size()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 90 * time.Second, Transport: tr}
	url := t.sh.URL(path)
	lat := make([]float64, n)
	status := make([]int, n) // 0: no answer
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				lat[i] = bench.Msf(time.Since(t0))
				return
			}
			if _, err = io.Copy(io.Discard, resp.Body); err == nil {
				status[i] = resp.StatusCode
			}
			resp.Body.Close()
			lat[i] = bench.Msf(time.Since(t0))
		}()
	}
	wg.Wait()
	side := &burstSide{Target: t.name, TookMS: bench.Msf(time.Since(start))}
	for _, c := range status {
		if c != http.StatusOK {
			side.Failed++
			if side.FailedBy == nil {
				side.FailedBy = map[string]int{}
			}
			side.FailedBy[strconv.Itoa(c)]++
		}
	}
	side.ClientP50ms, side.ClientP99ms, side.ClientMaxms = bench.Quantile(lat, 0.5), bench.Quantile(lat, 0.99), bench.Quantile(lat, 1)

	// The log comes as datagrams through shoal: wait until every request
	// is in it, or 10 s.
	var tw, trs, ta []float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, err := readLog(logPath, offset)
		if err != nil {
			return nil, err
		}
		tw, trs, ta = tw[:0], trs[:0], ta[:0]
		for _, e := range entries {
			if e.backend != "web" || !strings.HasPrefix(e.uri, "/work") || e.tr < 0 {
				continue
			}
			tw, trs, ta = append(tw, e.tw), append(trs, e.tr), append(ta, e.ta)
		}
		if len(tw) >= n || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	side.Logged = len(tw)
	if len(tw) > 0 {
		side.TwP50ms, side.TwP99ms = bench.Quantile(tw, 0.5), bench.Quantile(tw, 0.99)
		side.TrP50ms, side.TrP99ms, side.TrMaxms = bench.Quantile(trs, 0.5), bench.Quantile(trs, 0.99), bench.Quantile(trs, 1)
		side.TaP99ms = bench.Quantile(ta, 0.99)
	}
	smax, err := mostInFlight(ctx, filepath.Join(t.dir, "haproxy", "admin.sock"), "web")
	if err != nil {
		return nil, err
	}
	side.MostInFlight = smax
	return side, nil
}

// logEntry is what the burst reads of an access.log line (the format is in
// docs/routing.md): "TIME CLIENT BACKEND SERVER STATUS Tw Tc Tr Ta BYTES
// RETRIES TERMINATION SAMPLE METHOD URI", timers in ms, -1 for a phase
// that did not happen.
type logEntry struct {
	backend, uri string
	tw, tr, ta   float64
}

// readLog reads access.log from offset; lines that are not requests (of
// HAProxy's own messages) are skipped.
func readLog(path string, offset int64) ([]logEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("access log: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	var out []logEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fs := strings.SplitN(sc.Text(), " ", 15)
		if len(fs) != 15 {
			continue
		}
		var timers [4]float64
		ok := true
		for i := range timers {
			v, err := strconv.ParseFloat(fs[5+i], 64)
			ok = ok && err == nil
			timers[i] = v
		}
		if ok {
			out = append(out, logEntry{backend: fs[2], uri: fs[14], tw: timers[0], tr: timers[2], ta: timers[3]})
		}
	}
	return out, sc.Err()
}

// mostInFlight asks HAProxy's admin socket (as socat would) for backend's
// servers' smax: the most requests each had at once since HAProxy
// started; it returns the largest.
func mostInFlight(ctx context.Context, socket, backend string) (int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return 0, fmt.Errorf("haproxy stats: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "show stat %s 4 -1\n", backend); err != nil {
		return 0, fmt.Errorf("haproxy stats: %w", err)
	}
	rows, err := csv.NewReader(conn).ReadAll()
	if err != nil && len(rows) == 0 {
		return 0, fmt.Errorf("haproxy stats: %w", err)
	}
	col := -1
	most := 0
	for _, r := range rows {
		if len(r) > 0 && strings.HasPrefix(r[0], "# ") {
			col = slices.Index(r, "smax")
			continue
		}
		if col < 0 || col >= len(r) {
			continue
		}
		if v, err := strconv.Atoi(r[col]); err == nil {
			most = max(most, v)
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("haproxy stats: no smax column in %q", rows)
	}
	return most, nil
}

// burstFigures are the medians over rounds: the instance's own p99 (Tr)
// and the clients' p99 and p50, queued against direct.
func burstFigures(rounds []*burstRound, maxConn int) []bench.Figure {
	med := func(get func(*burstSide) float64, side func(*burstRound) *burstSide) *float64 {
		var vs []float64
		for _, r := range rounds {
			if s := side(r); s != nil {
				vs = append(vs, get(s))
			}
		}
		if len(vs) == 0 {
			return nil
		}
		return bench.Num(bench.Median(vs))
	}
	q := func(r *burstRound) *burstSide { return r.Queued }
	d := func(r *burstRound) *burstSide { return r.Direct }
	fig := func(name string, get func(*burstSide) float64, note string) bench.Figure {
		v, b := med(get, q), med(get, d)
		return bench.Figure{Name: name, Unit: "ms", Value: v, Baseline: "without max_conn", BaselineValue: b, Ratio: bench.RatioOf(v, b), Note: note}
	}
	return []bench.Figure{
		fig(fmt.Sprintf("instance's own p99 (Tr) in a burst, max_conn %d", maxConn), func(s *burstSide) float64 { return s.TrP99ms }, "median over rounds; Tr from HAProxy's access log: the instance's time to its response headers"),
		fig(fmt.Sprintf("client p99 in a burst, max_conn %d", maxConn), func(s *burstSide) float64 { return s.ClientP99ms }, "median over rounds; the queued side's wait in HAProxy's queue (Tw) is in the table below"),
		fig(fmt.Sprintf("client p50 in a burst, max_conn %d", maxConn), func(s *burstSide) float64 { return s.ClientP50ms }, "median over rounds"),
	}
}

func burstMarkdown(rounds []*burstRound) string {
	var b strings.Builder
	b.WriteString("\n### Burst: with and without max_conn\n\n")
	b.WriteString("| round | shoal | client p50 | client p99 | failed | HAProxy queue Tw p50 / p99 | instance Tr p50 / p99 / max | Ta p99 | most in flight per instance | logged |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rounds {
		for _, s := range []*burstSide{r.Queued, r.Direct} {
			if s == nil {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %.0f ms | %.0f ms | %s | %.0f / %.0f ms | %.0f / %.0f / %.0f ms | %.0f ms | %d | %d |\n",
				r.Round, s.Target, s.ClientP50ms, s.ClientP99ms, failures(s), s.TwP50ms, s.TwP99ms, s.TrP50ms, s.TrP99ms, s.TrMaxms, s.TaP99ms, s.MostInFlight, s.Logged)
		}
	}
	return b.String()
}

// failures is the failed count with its statuses ("0": no answer).
func failures(s *burstSide) string {
	if s.Failed == 0 {
		return "0"
	}
	var by []string
	for _, k := range slices.Sorted(maps.Keys(s.FailedBy)) {
		by = append(by, fmt.Sprintf("%s: %d", k, s.FailedBy[k]))
	}
	return fmt.Sprintf("%d (%s)", s.Failed, strings.Join(by, ", "))
}
