package gslb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/shoal-lb/shoal/internal/bench"
)

// gslbBench compares shoal's GSLB with gdnsd 3.8 (Debian's gdnsd, multifo
// with http_status checks) on the same two sites, checked the same way, in
// the same run: two demo-backends on 127.0.0.1:P and 127.0.0.2:P. Each round
// kills the second site (SIGKILL) and polls every DNS server until its
// answer drops 127.0.0.2, then starts the site again and polls until it is
// back. shoal answers two records: one at gdnsd's settings (2 s interval,
// gdnsd's least: its timeout must be a whole second below the interval) and
// one at a 1 s interval, which gdnsd refuses.
var Command = &bench.Command{
	Name:    "gslb",
	Summary: "GSLB failover: time until a killed site leaves the DNS answer, shoal vs gdnsd 3.8 at equal settings, and shoal at 1 s",
	Run:     runGSLBBench,
}

// gslbPoll is how often the harness asks each DNS server.
const gslbPoll = 25 * time.Millisecond

// gslbTarget is one DNS server and name the harness polls.
type gslbTarget struct {
	Key      string    `json:"key"`
	Label    string    `json:"label"`
	Addr     string    `json:"addr"`
	Name     string    `json:"name"`
	Interval int       `json:"interval_s"`
	Dropped  []float64 `json:"dropped_ms"`
	Back     []float64 `json:"back_ms"`
}

func runGSLBBench(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	rounds := fs.Int("rounds", 20, "kills of the site")
	upThresh := fs.Int("up-thresh", 5, "up_thresh (the seed's 5)")
	okThresh := fs.Int("ok-thresh", 3, "ok_thresh (the seed's 3)")
	downThresh := fs.Int("down-thresh", 2, "down_thresh (the seed's 2)")
	gdnsdBin := fs.String("gdnsd", "gdnsd", "the gdnsd binary (Debian's gdnsd 3.8)")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *rounds < 1 || *upThresh < 1 || *okThresh < 1 || *downThresh < 1 {
		return nil, bench.BadUsage("-rounds and the thresholds must be at least 1")
	}
	backend, shoalBin, err := bins.Resolve()
	if err != nil {
		return nil, err
	}
	gdnsd, err := exec.LookPath(*gdnsdBin)
	if err != nil {
		return nil, fmt.Errorf("gdnsd: %w (apt-get install gdnsd, or make bench installs it)", err)
	}
	gdnsdVersion := "unknown"
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "gdnsd").Output(); err == nil {
		gdnsdVersion = string(out)
	}
	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}

	sitePort, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	startSite := func(ip string) (*bench.Proc, error) {
		name := "site-" + ip
		p, err := env.Start(name, backend, "--listen", ip+":"+strconv.Itoa(sitePort), "--name", name)
		if err != nil {
			return nil, err
		}
		if err := bench.WaitHTTP(ctx, fmt.Sprintf("http://%s:%d/healthz", ip, sitePort), p, 10*time.Second); err != nil {
			return nil, fmt.Errorf("site %s: %w: %s", ip, err, env.LogTail(name, 3))
		}
		// Killed, not stopped: a site that dies.
		p.StopSignal = syscall.SIGKILL
		return p, nil
	}
	if _, err := startSite("127.0.0.1"); err != nil {
		return nil, err
	}
	siteB, err := startSite("127.0.0.2")
	if err != nil {
		return nil, err
	}

	gdnsdPort, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	if err := writeGdnsdConfig(env.Work, gdnsdPort, sitePort, *upThresh, *okThresh, *downThresh); err != nil {
		return nil, err
	}
	if _, err := env.Start("gdnsd", gdnsd, "-c", filepath.Join(env.Work, "gdnsd"), "-D", "start"); err != nil {
		return nil, err
	}

	dnsPort, err := env.FreePort()
	if err != nil {
		return nil, err
	}
	check := func(interval, timeout string) string {
		return fmt.Sprintf("{port: %d, path: /healthz, interval: %s, timeout: %s, up_thresh: %d, ok_thresh: %d, down_thresh: %d}", sitePort, interval, timeout, *upThresh, *okThresh, *downThresh)
	}
	gslbYAML := fmt.Sprintf(`gslb:
  listen: [127.0.0.1:%d]
  zone: example.org
  records:
    - name: eq
      ttl: 0s
      sites: [{address: 127.0.0.1, check: %s}, {address: 127.0.0.2, check: %s}]
    - name: fast
      ttl: 0s
      sites: [{address: 127.0.0.1, check: %s}, {address: 127.0.0.2, check: %s}]
`, dnsPort, check("2s", "1s"), check("2s", "1s"), check("1s", "500ms"), check("1s", "500ms"))
	sh, err := env.StartShoalOn(shoalBin, func(port int) string {
		return bench.BenchConfig(port, filepath.Join(env.Work, "state"), "", bench.GroupYAML("web", backend, 1, 1, "1s", "")) + gslbYAML
	})
	if err != nil {
		return nil, err
	}
	if err := sh.WaitInService(ctx, "web", 0, 30*time.Second, bench.PollEvery); err != nil {
		return nil, err
	}

	targets := []*gslbTarget{
		{Key: "gdnsd", Label: "gdnsd 3.8 (multifo, http_status)", Addr: fmt.Sprintf("127.0.0.1:%d", gdnsdPort), Name: "www.example.org.", Interval: 2},
		{Key: "shoal", Label: "shoal, gdnsd's settings", Addr: fmt.Sprintf("127.0.0.1:%d", dnsPort), Name: "eq.example.org.", Interval: 2},
		{Key: "shoal-1s", Label: "shoal, 1 s interval", Addr: fmt.Sprintf("127.0.0.1:%d", dnsPort), Name: "fast.example.org.", Interval: 1},
	}
	both := []string{"127.0.0.1", "127.0.0.2"}
	// Both sites in every answer before the first kill.
	if err := waitAll(ctx, targets, both, 60*time.Second, nil); err != nil {
		return nil, err
	}
	// The time from a kill to the next check is random in [0, interval):
	// rounds start at a random instant, or the harness, waiting for each
	// server in turn, would lock them to one phase of the checks' schedule
	// and compare the servers' phases instead of their speed.
	phase := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rand.N(2 * time.Second)):
			return nil
		}
	}
	for r := range *rounds {
		if err := phase(); err != nil {
			return nil, err
		}
		env.Log.Info("killing a site", "round", r+1, "site", "127.0.0.2")
		env.Stop(siteB)
		err := waitAll(ctx, targets, []string{"127.0.0.1"}, 60*time.Second, func(t *gslbTarget, d time.Duration) {
			t.Dropped = append(t.Dropped, bench.Msf(d))
		})
		if err != nil {
			return nil, err
		}
		if err := phase(); err != nil {
			return nil, err
		}
		if siteB, err = startSite("127.0.0.2"); err != nil {
			return nil, err
		}
		err = waitAll(ctx, targets, both, 120*time.Second, func(t *gslbTarget, d time.Duration) {
			t.Back = append(t.Back, bench.Msf(d))
		})
		if err != nil {
			return nil, err
		}
		// ok_thresh successes, so the next kill starts from a clean slate.
		time.Sleep(time.Duration(*okThresh+1) * 2 * time.Second)
	}

	med := func(t *gslbTarget) *float64 { return bench.Num(bench.Median(t.Dropped)) }
	gd, eq, fast := med(targets[0]), med(targets[1]), med(targets[2])
	ratio := bench.RatioOf(eq, gd)
	fastBound := float64(*downThresh) * 1000
	*rep = bench.Report{
		Date: rep.Date, Machine: rep.Machine,
		Settings: []bench.Setting{
			{Name: "gdnsd", Value: gdnsdVersion + " (Debian), multifo with up_thresh 0.01, http_status checks"},
			{Name: "sites", Value: fmt.Sprintf("2 demo-backends, 127.0.0.1:%d and 127.0.0.2:%d, GET /healthz", sitePort, sitePort)},
			{Name: "thresholds", Value: fmt.Sprintf("up_thresh %d, ok_thresh %d, down_thresh %d (the seed's)", *upThresh, *okThresh, *downThresh)},
			{Name: "equal settings", Value: "interval 2 s, timeout 1 s (gdnsd's least interval)"},
			{Name: "rounds", Value: strconv.Itoa(*rounds)},
			{Name: "poll", Value: gslbPoll.String() + " per DNS server, UDP"},
		},
		Figures: []bench.Figure{
			{Name: "killed site out of the answer, shoal at gdnsd's settings (median)", Unit: "ms", Value: eq, Baseline: "gdnsd 3.8, same settings, same run", BaselineValue: gd, Ratio: ratio,
				Goal: "≤ 1.0 × gdnsd", Verdict: bench.Verdict(ratio, func(v float64) bool { return v <= 1 })},
			{Name: "killed site out of the answer, shoal at a 1 s interval (median)", Unit: "ms", Value: fast, Baseline: "gdnsd 3.8 at its least interval (2 s)", BaselineValue: gd, Ratio: bench.RatioOf(fast, gd),
				Goal: fmt.Sprintf("≤ interval × down_thresh = %.0f ms", fastBound+200), Verdict: bench.Verdict(fast, func(v float64) bool { return v <= fastBound+200 }),
				Note: "200 ms allowed over interval × down_thresh for the check and the poll"},
		},
		Details: targets,
	}
	return rep, nil
}

// waitAll polls every target until its A answer is want, calling took with
// the time each took; it fails after limit.
func waitAll(ctx context.Context, targets []*gslbTarget, want []string, limit time.Duration, took func(*gslbTarget, time.Duration)) error {
	start := time.Now()
	pending := slices.Clone(targets)
	c := &dns.Client{Timeout: time.Second}
	for len(pending) > 0 {
		if time.Since(start) > limit {
			return fmt.Errorf("after %s, %s does not answer %v", limit, pending[0].Label, want)
		}
		pending = slices.DeleteFunc(pending, func(t *gslbTarget) bool {
			m := new(dns.Msg)
			m.SetQuestion(t.Name, dns.TypeA)
			r, _, err := c.ExchangeContext(ctx, m, t.Addr)
			if err != nil || r.Rcode != dns.RcodeSuccess {
				return false
			}
			var got []string
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					got = append(got, a.A.String())
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return false
			}
			if took != nil {
				took(t, time.Since(start))
			}
			return true
		})
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(gslbPoll):
		}
	}
	return nil
}

// writeGdnsdConfig writes WORK/gdnsd: gdnsd on 127.0.0.1:dnsPort, the
// record www.example.org answered by multifo from the two sites, checked
// by http_status on sitePort. multifo's up_thresh 0.01 answers a lone
// healthy site, as shoal does (its default, 0.5, would answer both sites
// once one of the two is down).
func writeGdnsdConfig(work string, dnsPort, sitePort, up, ok, down int) error {
	dir := filepath.Join(work, "gdnsd")
	for _, d := range []string{"zones", "run", "state"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return fmt.Errorf("gdnsd config: %w", err)
		}
	}
	config := fmt.Sprintf(`options => {
  listen => [ 127.0.0.1:%d ]
  run_dir => %s
  state_dir => %s
}
service_types => {
  web => {
    plugin => http_status
    port => %d
    url_path => /healthz
    interval => 2
    timeout => 1
    up_thresh => %d
    ok_thresh => %d
    down_thresh => %d
  }
}
plugins => {
  multifo => {
    up_thresh => 0.01
    www => { service_types => web, a => 127.0.0.1, b => 127.0.0.2 }
  }
}
`, dnsPort, filepath.Join(dir, "run"), filepath.Join(dir, "state"), sitePort, up, ok, down)
	zone := `@ 30 SOA ns1 hostmaster 1 3600 600 604800 30
@ 30 NS ns1
ns1 30 A 127.0.0.1
www 0 DYNA multifo!www
`
	return errors.Join(
		os.WriteFile(filepath.Join(dir, "config"), []byte(config), 0o600),
		os.WriteFile(filepath.Join(dir, "zones", "example.org"), []byte(zone), 0o600),
	)
}
