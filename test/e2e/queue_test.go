package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestQueueLimits: a group with limits.max_conn: 4 on 2 instances takes a
// burst of 500 concurrent requests (each waiting 100 ms, no CPU): HAProxy
// queues what the instances may not take, serves every request, and no
// instance ever has more than 4 in flight (HAProxy's smax per server, which
// counts every request that reached it), on an idle machine and with every
// core saturated. `shoal status` and /metrics show the queue.
func TestQueueLimits(t *testing.T) {
	parallel(t)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, "metrics: {listen: "+metricsAddr+"}\n", groupSpec{Name: "web", Min: 2, Max: 2, Extra: "    limits: {max_conn: 4, queue_timeout: 60s}\n"})
	e.start()
	e.waitInService("web", 2)

	burst := func(what string) {
		t.Helper()
		const n = 500
		url := "http://" + e.listen + "/work?ms=0&wait=100"
		client := &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
		defer client.CloseIdleConnections()
		codes := make(chan int, n)
		var wg sync.WaitGroup
		start := time.Now()
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(url)
				if err != nil {
					codes <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes <- resp.StatusCode
			}()
		}
		// While the burst waits, status shows the queue.
		var seenQueue int
		for time.Since(start) < 5*time.Second && seenQueue == 0 {
			s, err := e.client().Group(context.Background(), "web")
			if err != nil {
				t.Fatal(err)
			}
			if s.Queue == nil {
				t.Fatal("status has no queue for a group with limits")
			}
			seenQueue = s.Queue.Current
			time.Sleep(50 * time.Millisecond)
		}
		wg.Wait()
		close(codes)
		took := time.Since(start)
		bad := map[int]int{}
		for c := range codes {
			if c != http.StatusOK {
				bad[c]++
			}
		}
		t.Logf("%s: %d requests in %s; queue seen at %d", what, n, took.Round(time.Millisecond), seenQueue)
		if len(bad) > 0 {
			t.Errorf("%s: requests not answered 200, by status (0: no answer): %v", what, bad)
		}
		if seenQueue == 0 {
			t.Errorf("%s: status never showed a queue during the burst", what)
		}
		// 8 in flight at a time, 100 ms each: at least 500/8 × 100 ms.
		if took < 6*time.Second {
			t.Errorf("%s: the burst took %s: faster than 8 at a time allows, so the limit did not hold", what, took)
		}
	}
	burst("idle machine")
	// The same with every core saturated: still every request served, and
	// smax (the most since HAProxy started) below covers both bursts.
	busy(t)
	stopHogs := cpuHogs(t, runtime.NumCPU()+1, 2*time.Minute)
	burst("CPU saturated")
	stopHogs()

	s := e.status()
	var names []string
	for _, g := range s.Groups {
		if g.Name == "web" {
			for _, in := range g.Instances {
				names = append(names, in.Name)
			}
			if q := g.Queue; q == nil || q.MaxConn != 4 || q.Max < 100 {
				t.Errorf("status queue after the burst = %+v, want max_conn 4 and a max of at least 100", q)
			}
		}
	}
	for _, name := range names {
		st := e.serverStat("web", name)
		t.Logf("%s: smax %d, slim %d, requests %d", name, st.MaxSessions, st.SessionLimit, st.Requests)
		if st.SessionLimit != 4 {
			t.Errorf("%s: HAProxy's maxconn %d, want 4", name, st.SessionLimit)
		}
		if st.MaxSessions > 4 || st.MaxSessions < 1 {
			t.Errorf("%s: at most %d requests in flight, want 1 to 4", name, st.MaxSessions)
		}
	}
	// /metrics: the queue's most since the reload, and its average wait.
	code, text := httpGet(t, "http://"+metricsAddr+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	if v, err := strconv.ParseFloat(metricValue(text, `shoal_group_queue_max{group="web"}`), 64); err != nil || v < 100 {
		t.Errorf("shoal_group_queue_max = %q, want at least 100", metricValue(text, `shoal_group_queue_max{group="web"}`))
	}
	if v, err := strconv.ParseFloat(metricValue(text, `shoal_group_queue_time_seconds{group="web"}`), 64); err != nil || v <= 0 {
		t.Errorf("shoal_group_queue_time_seconds = %q, want above 0", metricValue(text, `shoal_group_queue_time_seconds{group="web"}`))
	}
	out, stderr, code := e.cli("status")
	if code != 0 {
		t.Fatalf("shoal status exited %d: %s", code, stderr)
	}
	if !strings.Contains(out, "max_conn 4 per instance") {
		t.Errorf("shoal status does not show the queue:\n%s", out)
	}
}
