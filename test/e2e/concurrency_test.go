package e2e

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestScaleOnConcurrency: an I/O-bound endpoint (200 ms of waiting, no CPU)
// under 12 clients keeps about 12 requests in flight on one instance; a
// target of 4 on the policy metric concurrency scales the group out to 3 on
// that alone, with the instances' CPU near idle, and the metrics document
// shows the concurrency.
func TestScaleOnConcurrency(t *testing.T) {
	parallel(t)
	g := groupSpec{Name: "web", Min: 1, Max: 3, Drain: "2s", Extra: `    limits: {max_conn: 8}
    autoscale:
      target: {metric: concurrency, value: 4, scale_in_stabilization: 5m}
`}
	e := newEnv(t, "metrics: {warmup: 1s}\n", g)
	e.start()
	e.waitInService("web", 1)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	var mu sync.Mutex
	failed := 0
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+e.listen+"/work?ms=0&wait=200", nil)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					mu.Lock()
					failed++
					mu.Unlock()
				}
			}
		}()
	}

	up := e.waitEvent("the target on concurrency scales out", 40*time.Second, 0, accepted("target", "size"))
	t.Logf("decision: %s (values %v)", up.Reason, up.Values)
	if c := up.Values["concurrency"]; c <= 4 {
		t.Errorf("the scale-out saw concurrency %.2f, want above the target 4", c)
	}
	e.waitInService("web", 3)
	time.Sleep(3 * time.Second) // samples with 3 ready instances
	doc, err := e.client().Metrics(context.Background(), "web", 2*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Concurrency == nil || *doc.Concurrency <= 0 || *doc.Concurrency > 8 {
		t.Errorf("metrics document's concurrency with 3 instances = %v, want about 12/3", doc.Concurrency)
	} else {
		t.Logf("concurrency with 3 instances: %.2f; cpu.avg %v", *doc.Concurrency, fmtPtr(doc.CPU.Avg))
	}
	if doc.CPU.Avg != nil && *doc.CPU.Avg > 30 {
		t.Errorf("cpu.avg %.1f%%: the endpoint was meant to be I/O-bound", *doc.CPU.Avg)
	}
	cancel()
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d requests failed during the scale-out", failed)
	}
}

func fmtPtr(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
