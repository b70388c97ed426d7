package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const minimalGroups = "groups: [{name: web, min_size: 1, max_size: 2, template: {command: [app]}}]\n"

func TestParseTimeoutsAndAccessLog(t *testing.T) {
	doc := `listen: :8080
haproxy:
  timeouts: {connect: 250ms, client: 1m, server: 2m, http_request: 5s, http_keep_alive: 3, queue: 1s}
access_log: {sample: 1, max_size: 512KiB, max_files: 5}
` + minimalGroups
	cfg, err := Parse("shoal.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := Timeouts{Connect: 250 * time.Millisecond, Client: time.Minute, Server: 2 * time.Minute,
		HTTPRequest: 5 * time.Second, HTTPKeepAlive: 3 * time.Second, Queue: time.Second}
	if cfg.HAProxy.Timeouts != want {
		t.Errorf("Timeouts = %+v, want %+v", cfg.HAProxy.Timeouts, want)
	}
	if want := (AccessLog{Enabled: true, Sample: 1, MaxSize: 512 << 10, MaxFiles: 5}); cfg.AccessLog != want {
		t.Errorf("AccessLog = %+v, want %+v", cfg.AccessLog, want)
	}

	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\n"+minimalGroups))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HAProxy.Timeouts != DefaultTimeouts {
		t.Errorf("default Timeouts = %+v", cfg.HAProxy.Timeouts)
	}
	if want := (AccessLog{Enabled: true, Sample: 1, Adaptive: true, WhenNeeded: true, MaxSize: 10 << 20, MaxFiles: 3}); cfg.AccessLog != want {
		t.Errorf("default AccessLog = %+v, want %+v", cfg.AccessLog, want)
	}
	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\naccess_log: {sample: auto}\n"+minimalGroups))
	if err != nil {
		t.Fatal(err)
	}
	if want := (AccessLog{Enabled: true, Sample: 1, Adaptive: true, MaxSize: 10 << 20, MaxFiles: 3}); cfg.AccessLog != want {
		t.Errorf("sample: auto: AccessLog = %+v, want %+v", cfg.AccessLog, want)
	}

	for _, off := range []string{"{sample: 0}", "{enabled: false, sample: 5}"} {
		cfg, err = Parse("shoal.yaml", []byte("listen: :8080\naccess_log: "+off+"\n"+minimalGroups))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.AccessLog.Sample != 0 {
			t.Errorf("access_log %s: Sample = %d, want 0 (off)", off, cfg.AccessLog.Sample)
		}
	}
}

func TestParseTimeoutsAndAccessLogErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"haproxy:\n  timeouts: {client: 0s}\n",
			`shoal.yaml:3:22: haproxy.timeouts.client: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 0s`},
		{"haproxy:\n  timeouts: {http_request: 600h}\n",
			`shoal.yaml:3:28: haproxy.timeouts.http_request: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 600h0m0s`},
		{"haproxy:\n  timeouts: {queue: 1us}\n",
			`shoal.yaml:3:21: haproxy.timeouts.queue: must be from 1ms to 2147483647ms (596h31m23.647s, HAProxy's timer range), got 1µs`},
		{"haproxy:\n  timeouts: {connect: soon}\n",
			`shoal.yaml:3:23: haproxy.timeouts.connect: must be a duration such as "30s" or "3m", or a whole number of seconds; got "soon"`},
		{"haproxy:\n  timeouts: {read: 1s}\n",
			`shoal.yaml:3:14: haproxy.timeouts.read: unknown field; allowed: connect, client, server, http_request, http_keep_alive, queue`},
		{"access_log: {sample: -1}\n",
			`shoal.yaml:2:22: access_log.sample: must be auto, or from 0 (off) to 1000000 (log one request in N), got -1`},
		{"access_log: {max_size: 10MB}\n",
			`shoal.yaml:2:24: access_log.max_size: must be a size such as "10MiB", "512KiB" or a number of bytes, got "10MB"`},
		{"access_log: {max_size: 100}\n",
			`shoal.yaml:2:24: access_log.max_size: must be from 4KiB to 1TiB, got 100 bytes`},
		{"access_log: {max_files: 0}\n",
			`shoal.yaml:2:25: access_log.max_files: must be from 1 to 100 (access.log and its rotated copies), got 0`},
		{"access_log: {enabled: no}\n",
			`shoal.yaml:2:23: access_log.enabled: must be true or false, got "no"`},
	} {
		_, err := Parse("shoal.yaml", []byte("listen: :8080\n"+tc.doc+minimalGroups))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n got: %v\nwant: %s", tc.doc, err, tc.want)
		}
	}
}

// The default access log is on only while something reads its latencies;
// writing enabled or sample decides for good.
func TestAccessLogWhenNeeded(t *testing.T) {
	const head = "listen: :8080\nmetrics:\n  sources:\n    - {name: queue_depth, command: [/bin/echo, \"3\"]}\n"
	group := func(extra string) string {
		return "groups:\n  - name: web\n    min_size: 1\n    max_size: 4\n    template: {command: [app]}\n" + extra
	}
	for _, tc := range []struct {
		name, doc string
		on        bool
		readers   []string
	}{
		{"nothing reads latency", head + group("    autoscale: {target: {metric: cpu.avg, value: 50}}\n"), false, nil},
		{"a source and a formula without latency", head + group("    autoscale: {target: {metric: \"queue_depth / max(size, 1)\", value: 5}}\n"), false, nil},
		{"a latency rule", head + group("    autoscale:\n      rules: [{metric: latency_ms.p99, above: 200, for: 30s, action: up}]\n"), true,
			[]string{"groups[0].autoscale (latency_ms.p99)"}},
		{"a formula over latency", head + group("    autoscale: {target: {metric: \"latency_ms.p90 * queue_depth\", value: 50}}\n"), true,
			[]string{"groups[0].autoscale (latency_ms.p90 * queue_depth)"}},
		{"outliers by latency", head + group("    outliers: {latency: {p99_above: 2s}}\n"), true,
			[]string{"groups[0].outliers.latency"}},
		{"a canary judging p99", head + group("    deploy:\n      strategy: canary\n      canary:\n        steps: [{weight: 10%, for: 1m}]\n        analysis: {max_p99: {vs_stable: 1.5x}, min_requests: 100}\n"), true,
			[]string{"groups[0].deploy.canary.analysis.max_p99"}},
		{"sample: auto keeps it on", head + "access_log: {sample: auto}\n" + group(""), true, nil},
		{"enabled: true keeps it on", head + "access_log: {enabled: true, max_files: 2}\n" + group(""), true, nil},
		{"a fixed rate keeps it on", head + "access_log: {sample: 10}\n" + group(""), true, nil},
		{"max_size alone leaves it to need", head + "access_log: {max_size: 1MiB}\n" + group(""), false, nil},
		{"sample: 0 is off whatever reads", head + "access_log: {sample: 0}\n" + group("    autoscale: {target: {metric: cpu.avg, value: 50}}\n"), false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("shoal.yaml", []byte(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.LogsRequests(); got != tc.on {
				t.Errorf("LogsRequests() = %t, want %t (AccessLog %+v)", got, tc.on, cfg.AccessLog)
			}
			if got := cfg.LatencyReaders(); !slices.Equal(got, tc.readers) {
				t.Errorf("LatencyReaders() = %q, want %q", got, tc.readers)
			}
		})
	}
}

// A policy reading latency with the access log turned off would never see
// one: validate refuses it, as it does max_p99 and outliers.latency.
func TestLatencyPolicyNeedsAccessLog(t *testing.T) {
	doc := `listen: :8080
access_log: {sample: 0}
groups:
  - name: web
    min_size: 1
    max_size: 4
    template: {command: [app]}
    autoscale: {target: {metric: "latency_ms.p99 / 100", value: 2}}
`
	_, err := Parse("shoal.yaml", []byte(doc))
	want := "shoal.yaml:8:16: groups[0].autoscale: needs the access log (access_log.enabled), whose sampled requests give the group's latency (latency_ms.p99 / 100)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
