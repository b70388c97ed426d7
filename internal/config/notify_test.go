package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifyDoc has one target of each type; SECRET_FILE is replaced by a file.
const notifyDoc = `listen: :8080
notify:
  ttl: 1h
  retry_min: 2s
  retry_max: 1m
  targets:
    - name: ops
      type: webhook
      url: http://127.0.0.1:9000/hook
      secret_file: SECRET_FILE
      events: [instance.launched, scale.*]
      groups: [web]
    - name: chat
      type: slack
      url: https://hooks.example.com/services/T/B/X
    - name: mail
      type: email
      smtp: 127.0.0.1:2525
      from: shoal@example.com
      to: [ops@example.com]
      username: shoal
      password_env: SHOAL_TEST_SMTP_PASSWORD
    - name: run
      type: command
      command: [/usr/local/bin/page, "{{.Type}}", "{{.Group}}"]
      timeout: 3s
` + minimalGroups

func writeSecret(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(doc, "SECRET_FILE", path, 1)
}

func TestParseNotify(t *testing.T) {
	t.Setenv("SHOAL_TEST_SMTP_PASSWORD", "pw")
	cfg, err := Parse("shoal.yaml", []byte(writeSecret(t, notifyDoc)))
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notify
	if n.TTL != time.Hour || n.RetryMin != 2*time.Second || n.RetryMax != time.Minute || len(n.Targets) != 4 {
		t.Fatalf("notify = %+v", n)
	}
	hook, slack, mail, run := n.Targets[0], n.Targets[1], n.Targets[2], n.Targets[3]
	if hook.Secret != "s3cret" || hook.Timeout != defaultNotifyTarget.Timeout || strings.Join(hook.Events, ",") != "instance.launched,scale.*" || hook.Groups[0] != "web" {
		t.Errorf("webhook = %+v", hook)
	}
	if slack.URL != "https://hooks.example.com/services/T/B/X" || slack.Secret != "" {
		t.Errorf("slack = %+v", slack)
	}
	if mail.SMTP != "127.0.0.1:2525" || mail.Password != "pw" || mail.Username != "shoal" || len(mail.To) != 1 {
		t.Errorf("email = %+v", mail)
	}
	if len(run.Argv) != 3 || run.Timeout != 3*time.Second {
		t.Errorf("command = %+v", run)
	}

	cfg, err = Parse("shoal.yaml", []byte("listen: :8080\n"+minimalGroups))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Notify.TTL != defaultNotify.TTL || len(cfg.Notify.Targets) != 0 {
		t.Errorf("default notify = %+v", cfg.Notify)
	}
}

func TestNotifyErrors(t *testing.T) {
	t.Setenv("SHOAL_TEST_SMTP_PASSWORD", "pw")
	doc := writeSecret(t, notifyDoc)
	tests := []struct{ old, new, want string }{
		{"[instance.launched, scale.*]", "[instance.launched, instance.exploded]",
			`shoal.yaml:11:35: notify.targets[0].events[1]: unknown event type "instance.exploded"; known: instance.launched,`},
		{"[instance.launched, scale.*]", "[nope.*]", `notify.targets[0].events[0]: unknown event type "nope.*"`},
		{"url: http://127.0.0.1:9000/hook", "url: 127.0.0.1:9000/hook",
			`shoal.yaml:9:12: notify.targets[0].url: must be an http:// or https:// URL, got "127.0.0.1:9000/hook"`},
		{"url: https://hooks.example.com/services/T/B/X", "url: ftp://x/y", `notify.targets[1].url: must be an http:// or https:// URL`},
		{"secret_file: /", "secret_file: /nonexistent/", `shoal.yaml:10:20: notify.targets[0].secret_file: stat /nonexistent/`},
		{"      secret_file:", "      x_secret_file:", `notify.targets[0].x_secret_file: unknown field`},
		{"password_env: SHOAL_TEST_SMTP_PASSWORD", "password_env: SHOAL_TEST_UNSET_VARIABLE",
			`notify.targets[2].password_env: SHOAL_TEST_UNSET_VARIABLE is not set in shoal's environment`},
		{"password_env: SHOAL_TEST_SMTP_PASSWORD", "smtp_port: 25", `notify.targets[2].smtp_port: unknown field`},
		{"      username: shoal\n", "", ""}, // password without username is fine
		{"groups: [web]", "groups: [api]", `notify.targets[0].groups[0]: no group named "api"`},
		{"type: slack", "type: pager", `notify.targets[1].type: must be webhook, slack, email or command, got "pager"`},
		{"type: slack", "type: command", `notify.targets[1].url: applies to type webhook, not command`},
		{"name: chat", "name: ops", `notify.targets[1].name: duplicate target name "ops" (first is notify.targets[0])`},
		{`"{{.Type}}"`, `"{{.Type"`, `notify.targets[3].command[1]: does not parse as a template`},
		{"retry_max: 1m", "retry_max: 1s", `notify.retry_max: must be at least retry_min (2s), got 1s`},
		{"ttl: 1h", "ttl: 0s", `notify.ttl: must be positive, got 0s`},
		{"to: [ops@example.com]", "to: []", `notify.targets[2].to: must name at least one address`},
		{"smtp: 127.0.0.1:2525", "smtp: mail.example.com", `notify.targets[2].smtp: must be host:port`},
	}
	for _, tt := range tests {
		if tt.want == "" {
			if _, err := Parse("shoal.yaml", []byte(strings.Replace(doc, tt.old, tt.new, 1))); err != nil {
				t.Errorf("%q → %q: %v", tt.old, tt.new, err)
			}
			continue
		}
		err := parseEdited(t, doc, tt.old, tt.new)
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q → %q:\n got %v\nwant %s", tt.old, tt.new, err, tt.want)
		}
	}
	// A webhook must be signed: a secret from a file or the environment.
	err := parseEdited(t, doc, "      secret_file: ", "      # ")
	if want := `shoal.yaml:7:7: notify.targets[0].secret_file: required (or secret_env)`; !strings.Contains(err.Error(), want) {
		t.Errorf("no secret: %v; want %s", err, want)
	}
}
