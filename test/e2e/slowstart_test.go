package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestSlowStart: with slow_start: 10s, an instance a scale-out adds is in
// service (the job is done) at once, while HAProxy ramps its weight: its
// share of the requests, measured from the per-server request counts, is
// small in its first 2 s and near half once the ramp is over.
func TestSlowStart(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 2, Extra: "    slow_start: 10s\n"})
	e.start()
	e.waitInService("web", 1)
	old := e.status().Groups[0].Instances[0].Name
	// The first instance ramps too: wait for its full weight.
	e.eventually("the first instance's ramp ends", 20*time.Second, func() error {
		if w := e.serverStat("web", old).Weight; w != 100 {
			return fmt.Errorf("weight %d", w)
		}
		return nil
	})

	// Steady load, bounded in time: 4 clients in a loop.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+e.listen+"/work?ms=0&wait=5", nil)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}

	began := time.Now()
	if out, stderr, code := e.cli("scale", "web", "up", "--sync"); code != 0 {
		t.Fatalf("shoal scale web up --sync exited %d: %s %s", code, out, stderr)
	}
	jobTook := time.Since(began)
	var fresh string
	for _, in := range e.status().Groups[0].Instances {
		if in.Name != old {
			fresh = in.Name
		}
	}
	if fresh == "" {
		t.Fatal("no new instance after the scale-out")
	}
	// The job counted the instance in service while its weight ramps.
	st := e.serverStat("web", fresh)
	t.Logf("scale-out job took %s; new instance %s: weight %d just after", jobTook.Round(time.Millisecond), fresh, st.Weight)
	if st.Weight >= 100 {
		t.Errorf("%s in service with its full weight at once: slow start did not apply", fresh)
	}

	// share is the new instance's share of the requests over d.
	share := func(d time.Duration) float64 {
		n0, o0 := e.serverStat("web", fresh).Requests, e.serverStat("web", old).Requests
		time.Sleep(d)
		n1, o1 := e.serverStat("web", fresh).Requests, e.serverStat("web", old).Requests
		total := (n1 - n0) + (o1 - o0)
		if total < 50 {
			t.Fatalf("only %d requests in %s: the load did not run", total, d)
		}
		return float64(n1-n0) / float64(total)
	}
	early := share(2 * time.Second)
	time.Sleep(time.Until(began.Add(jobTook + 10*time.Second)))
	late := share(3 * time.Second)
	t.Logf("new instance's share: %.2f in its first 2 s, %.2f after the 10 s ramp", early, late)
	if early > 0.3 {
		t.Errorf("new instance took %.0f%% of the requests in its first 2 s of a 10 s slow start, want under 30%%", early*100)
	}
	if late < 0.4 || late > 0.6 {
		t.Errorf("new instance took %.0f%% of the requests after the ramp, want 40 to 60%%", late*100)
	}
}
