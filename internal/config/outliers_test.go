package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// outlierDoc is a group of max_size 4 with outliers (indented six spaces).
func outlierDoc(outliers string) string {
	return `listen: :8080
groups:
  - name: web
    min_size: 1
    max_size: 4
    template: {command: [app]}
    outliers:
` + outliers
}

// TestOutliersParse: the example decodes to its values, and an
// empty section to the defaults.
func TestOutliersParse(t *testing.T) {
	cfg, err := Parse("shoal.yaml", []byte(outlierDoc(`      consecutive_5xx: 5
      failure_rate: {above: 0.2, over: 30s, min_requests: 50}
      latency: {p99_above: 2s, over: 30s, vs_group: 3x}
      max_ejected: "34%"
      eject_for: 30s
`)))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Groups[0].Outliers
	want := Outliers{Consecutive5xx: 5, MaxEjected: 34, EjectFor: 30 * time.Second,
		FailureRate: &FailureRate{Above: 0.2, Over: 30 * time.Second, MinRequests: 50},
		Latency:     &LatencyOutlier{P99Above: 2 * time.Second, Over: 30 * time.Second, VsGroup: 3}}
	if o == nil || o.Consecutive5xx != want.Consecutive5xx || o.MaxEjected != want.MaxEjected || o.EjectFor != want.EjectFor ||
		*o.FailureRate != *want.FailureRate || *o.Latency != *want.Latency {
		t.Fatalf("outliers = %+v %+v %+v, want %+v", o, o.FailureRate, o.Latency, want)
	}

	cfg, err = Parse("shoal.yaml", []byte(outlierDoc("      {max_ejected: 40}\n")))
	if err != nil {
		t.Fatal(err)
	}
	o = cfg.Groups[0].Outliers
	if o.Consecutive5xx != 5 || o.MaxEjected != 40 || o.EjectFor != 30*time.Second || o.FailureRate != nil || o.Latency != nil {
		t.Fatalf("defaults: %+v", o)
	}
	cfg, err = Parse("shoal.yaml", []byte(outlierDoc("      {}\n")[:len(outlierDoc(""))-len("    outliers:\n")]))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Groups[0].Outliers != nil {
		t.Fatal("outliers set without the key")
	}
}

// TestOutliersErrors: each misfit is refused at its position, naming the
// field and what is expected.
func TestOutliersErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"max_ejected 100%", outlierDoc("      max_ejected: 100%\n"),
			`shoal.yaml:8:20: groups[0].outliers.max_ejected: must be below 100%, got 100%: ejecting the whole group leaves nothing to serve, and a whole group failing is not an outlier`},
		{"max_ejected over 100", outlierDoc("      max_ejected: 150\n"),
			`shoal.yaml:8:20: groups[0].outliers.max_ejected: must be below 100%, got 150: ejecting the whole group leaves nothing to serve, and a whole group failing is not an outlier`},
		{"max_ejected not a percentage", outlierDoc("      max_ejected: lots\n"),
			`shoal.yaml:8:20: groups[0].outliers.max_ejected: must be a percentage such as "30%", got "lots"`},
		{"max_ejected below one instance", outlierDoc("      max_ejected: 20%\n"),
			`shoal.yaml:8:7: groups[0].outliers.max_ejected: 20% of max_size 4 is less than one instance: no instance could ever be ejected; raise max_ejected to at least 25%`},
		{"a group of one", strings.Replace(outlierDoc("      consecutive_5xx: 5\n"), "max_size: 4", "max_size: 1", 1),
			`shoal.yaml:8:7: groups[0].outliers: a group of max_size 1 has no outlier: its one instance is the whole group; give it a max_size of 2 or more, or leave outliers out`},
		{"failure rate above 1", outlierDoc("      failure_rate: {above: 20}\n"),
			`shoal.yaml:8:29: groups[0].outliers.failure_rate.above: must be a share of the answers above 0 and below 1 (0.2: 20 %), got 20`},
		{"min_requests 0", outlierDoc("      failure_rate: {min_requests: 0}\n"),
			`shoal.yaml:8:36: groups[0].outliers.failure_rate.min_requests: must be from 1 to 1000000, got 0`},
		{"vs_group not a multiple", outlierDoc("      latency: {vs_group: 0.5x}\n"),
			`shoal.yaml:8:27: groups[0].outliers.latency.vs_group: must be a multiple of the group's median p99 above 1 such as "3x" (up to 1000x), got "0.5x"`},
		{"unknown key", outlierDoc("      consecutive_500: 5\n"),
			`shoal.yaml:8:7: groups[0].outliers.consecutive_500: unknown field; allowed: consecutive_5xx, failure_rate, latency, max_ejected, eject_for`},
		{"nothing to eject by", outlierDoc("      {consecutive_5xx: 0}\n"),
			`shoal.yaml:8:7: groups[0].outliers: ejects nothing: give consecutive_5xx, failure_rate or latency`},
		{"latency without the access log", outlierDoc("      latency: {p99_above: 1s}\n") + "access_log: {enabled: false}\n",
			`shoal.yaml:8:16: groups[0].outliers.latency: needs the access log (access_log.enabled), whose sampled requests give each instance's latency`},
		{"tcp group", `frontends:
  - name: pg
    mode: tcp
    bind: [127.0.0.1:5433]
    routes: [{group: db}]
groups:
  - name: db
    min_size: 1
    max_size: 3
    template: {command: [db]}
    outliers: {consecutive_5xx: 5, max_ejected: 34%}
`, `shoal.yaml:11:15: groups[0].outliers: a tcp frontend routes to group db: its backend sees bytes, not HTTP answers or their latency, so there is nothing to tell an outlier by; leave outliers out (health checks still take a dead instance out)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("shoal.yaml", []byte(tt.doc))
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("Parse error = %v, want ErrorList", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error:\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}
