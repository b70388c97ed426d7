package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/dashboard/tour"
	"github.com/shoal-lb/shoal/internal/loadgen"

	"github.com/shoal-lb/shoal/internal/bench"
)

// dashboard drives the live dashboard in headless Chromium (the tour the
// end-to-end test takes) against a core with one group under steady
// traffic, and keeps its screenshots in -screenshots for a person to look
// at: the login page, the group's live view, and the view after "Scale up".
var Command = &bench.Command{
	Name:    "dashboard",
	Summary: "the web dashboard in headless Chromium: time to live data and to a scale-up shown; screenshots",
	Run:     runDashboard,
}

// dashboardAssets are the files the dashboard's page loads besides itself.
var dashboardAssets = []string{"app.js", "chart.js", "app.css"}

func runDashboard(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	shots := fs.String("screenshots", "bench/results/screenshots", "directory for the screenshots")
	rate := fs.Float64("rate", 20, "requests per second sent to the group while the browser looks")
	warm := fs.Duration("warm", 90*time.Second, "traffic before the browser looks, so that the chart has a history")
	timeout := fs.Duration("timeout", 60*time.Second, "longest each step of the tour may take")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *rate <= 0 || *rate > 1000 || *timeout < 5*time.Second || *warm < 0 {
		return nil, bench.BadUsage("-rate 0..1000, -timeout >= 5s and -warm >= 0 please")
	}
	if _, err := tour.Browser(); err != nil {
		return nil, err
	}
	backend, sbin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	adminPort, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	sh, err := env.StartShoalOn(sbin, func(port int) string {
		return fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: %s\n", adminPort, token) +
			bench.BenchConfig(port, filepath.Join(env.Work, "state"), "warmup: 1s\n",
				bench.GroupYAML("web", backend, 1, 3, "300ms", "autoscale:\n  target: {metric: cpu.avg, value: 50, scale_in_stabilization: 10m}\n"))
	})
	if err != nil {
		return nil, err
	}
	if err := sh.WaitInService(ctx, "web", 1, *timeout, bench.PollEvery); err != nil {
		return nil, err
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	weight, err := assetBytes(ctx, base)
	if err != nil {
		return nil, err
	}

	load := bench.StartOpenLoad(ctx, loadgen.OpenOptions{URL: sh.URL("/"), Timeout: 5 * time.Second,
		Schedule: []loadgen.Segment{{Rate: *rate / 2, Duration: *warm / 2}, {Rate: *rate, Duration: *warm/2 + 10*time.Minute}}})
	defer load.Stop()
	env.Log.Info("traffic before the browser looks", "for", *warm)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(*warm):
	}
	if err := os.MkdirAll(*shots, 0o755); err != nil {
		return nil, err
	}
	date := time.Now()
	stamp := date.UTC().Format("20060102-150405")
	var saved []string
	res, err := tour.Run(ctx, tour.Options{URL: base, Token: token, Group: "web", Timeout: *timeout,
		Shot: func(name string, png []byte) error {
			path := filepath.Join(*shots, stamp+"-dashboard-"+name+".png")
			saved = append(saved, path)
			env.Log.Info("screenshot", "path", path)
			return os.WriteFile(path, png, 0o644)
		}})
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, sh.LogTail(5))
	}
	if res.JobState == "ignored" {
		return nil, fmt.Errorf("scale up was ignored: %s", res.Answer)
	}

	rep := &bench.Report{Date: date, Machine: bench.NewMachine(), Details: res}
	rep.Settings = []bench.Setting{{Name: "traffic", Value: fmt.Sprintf("%g requests/s to the group for %s, then %g", *rate/2, *warm/2, *rate)}, {Name: "browser", Value: "headless Chromium via chromedp, 1280×1100"}}
	rep.Figures = []bench.Figure{
		{Name: "login to live data", Unit: "s", Value: bench.Num(res.Live.Seconds()), Goal: "< 5 s", Verdict: bench.Verdict(bench.Num(res.Live.Seconds()), func(v float64) bool { return v < 5 }),
			Note: "from submitting the token to the group's chart holding data and its instance table filled"},
		{Name: "scale up to the new instance shown", Unit: "s", Value: bench.Num(res.ScaleShown.Seconds()),
			Note: "from the click to the job answered and a new row in the instance table (the instance starting)"},
		{Name: "stream messages rendered", Unit: "/s", Value: bench.Num(res.MessagesPerSecond), Goal: "1", Verdict: bench.Verdict(bench.Num(res.MessagesPerSecond), func(v float64) bool { return v >= 0.8 && v <= 1.2 }),
			Note: "server-sent events the page rendered over 5 s"},
		{Name: "page assets", Unit: "bytes", Value: bench.Num(float64(weight)), Goal: "< 300 KB", Verdict: bench.Verdict(bench.Num(float64(weight)), func(v float64) bool { return v < 300<<10 }),
			Note: "the login page and every embedded asset, uncompressed"},
	}
	var md strings.Builder
	md.WriteString("## Screenshots\n\n")
	for _, p := range saved {
		rel, err := filepath.Rel(filepath.Dir(*shots), p)
		if err != nil {
			rel = p
		}
		fmt.Fprintf(&md, "![%s](%s)\n\n", filepath.Base(p), rel)
	}
	rep.Markdown = md.String()
	return rep, nil
}

// assetBytes sums the login page and the assets the dashboard loads.
func assetBytes(ctx context.Context, base string) (int64, error) {
	var total int64
	paths := []string{"/ui/"}
	for _, a := range dashboardAssets {
		paths = append(paths, "/ui/assets/"+a)
	}
	for _, p := range paths {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+p, nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, fmt.Errorf("dashboard asset %s: %w", p, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("dashboard asset %s: %w", p, err)
		}
		total += n
	}
	return total, nil
}
