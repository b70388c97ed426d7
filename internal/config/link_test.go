package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestLinkAcrossSections: the second pass finds what a group names or is
// bounded by in sections the file writes after it (as it does before it),
// each error at the group's key: a provider's health_grace lent to the
// group bounds its idle_after and haproxy's queue timeout, metrics.interval
// its rules' windows, and an unknown provider is named with the known ones.
func TestLinkAcrossSections(t *testing.T) {
	doc := `listen: 127.0.0.1:8080
groups:
  - name: web
    min_size: 0
    max_size: 4
    provider: cli
    scale_to_zero: {idle_after: 1m}
    autoscale:
      rules: [{metric: cpu.avg, above: 80, for: 1s, action: up}]
  - name: api
    min_size: 1
    max_size: 2
    hosts: [api.example.com]
    provider: nope
    template: {command: [app]}
metrics: {interval: 5s}
haproxy: {timeouts: {queue: 90s}}
providers:
  - name: cli
    type: exec
    port: 8080
    health_grace: 2m
    start: [mycloud, create]
    stop: [mycloud, delete, "{{.ID}}"]
    list: [mycloud, list]
`
	_, err := Parse("shoal.yaml", []byte(doc))
	var el ErrorList
	if !errors.As(err, &el) {
		t.Fatalf("Parse: %v, want an ErrorList", err)
	}
	var got []string
	for _, e := range el {
		got = append(got, e.Error())
	}
	want := []string{
		`shoal.yaml:7:20: groups[0].scale_to_zero: haproxy.timeouts.queue (1m30s) is shorter than health.grace (2m0s): the requests held while an instance starts would get 503 before it may be in service; raise timeouts.queue to at least 2m0s or lower grace`,
		`shoal.yaml:7:33: groups[0].scale_to_zero.idle_after: must be at least health.grace (2m0s), got 1m0s: a group that sleeps sooner than an instance may take to start spends its time starting`,
		`shoal.yaml:9:49: groups[0].autoscale.rules[0].for: must be at least metrics.interval (5s), got 1s`,
		`shoal.yaml:14:15: groups[1].provider: unknown provider "nope"; the config has local, cli`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
