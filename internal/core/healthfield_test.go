package core

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckHealthRegex: a body_regex Go compiles but HAProxy's PCRE2 does not
// (a code point above 255 without UTF mode) is reported at body_regex.
func TestCheckHealthRegex(t *testing.T) {
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Skip("haproxy not installed")
	}
	cfg := loadConfig(t, "listen: 127.0.0.1:18080\nstate_dir: state\ngroups:\n  - name: web\n    min_size: 1\n    max_size: 1\n"+
		"    health: {body_regex: '\\x{263a}'}\n    template: {command: [sh]}\n")
	_, err := Preflight(context.Background(), cfg)
	want := `shoal.yaml:7:26: groups[0].health.body_regex: HAProxy (`
	if err == nil || !strings.HasPrefix(strings.TrimPrefix(err.Error(), filepath.Dir(cfg.Path)+"/"), want) ||
		!strings.Contains(err.Error(), "is invalid") {
		t.Fatalf("Preflight error:\n got: %v\nwant: %s... is invalid", err, want)
	}
}

func TestHealthField(t *testing.T) {
	for line, want := range map[string]string{
		"http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost": "path",
		"http-check expect status 200-399":                                      "status",
		`http-check expect string ok`:                                           "body",
		`http-check expect rstring \x5ed`:                                       "body_regex",
		"tcp-check send-binary 50494e47":                                        "send",
		"tcp-check expect binary 2b504f4e47":                                    "expect",
		"tcp-check connect":                                                     "type",
	} {
		if got := healthField(strings.Fields(line)); got != want {
			t.Errorf("healthField(%q) = %q, want %q", line, got, want)
		}
	}
}
