package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/core"
	"github.com/shoal-lb/shoal/internal/provider/cloud/ec2"
	cloudexec "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/provider/cloud/sacloud"
)

// runShoal runs the command line as Main does, with stdin in.
func runShoal(t *testing.T, in io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	root := newRoot(&options{stdout: &out, stderr: &errb})
	root.SetIn(in)
	root.SetArgs(args)
	err := root.Execute()
	var ee *exitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.code
		if ee.msg != "" {
			errb.WriteString("shoal: " + ee.msg + "\n")
		}
	default:
		code = exitFailed
		errb.WriteString("shoal: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), code
}

// validated loads path with the real loader and runs the checks of
// `shoal validate` (programs, haproxy -c), then `shoal validate` itself.
func validated(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("Load(%s): %v\n%s", path, err, b)
	}
	if _, err := core.Preflight(context.Background(), cfg); err != nil {
		t.Fatalf("Check(%s): %v", path, err)
	}
	out, stderr, code := runShoal(t, strings.NewReader(""), "validate", "-c", path)
	if code != 0 || !strings.Contains(out, ": OK (1 group(s): ") {
		t.Fatalf("shoal validate -c %s: exit %d\n%s%s", path, code, out, stderr)
	}
	return cfg
}

// executable writes a program at path that does nothing.
func executable(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each kind of first config validates as written, holds what was asked
// for, and is mode 0644 (it holds no secret).
func TestInitVariantsValidate(t *testing.T) {
	bin := t.TempDir()
	app := executable(t, filepath.Join(bin, "app"))
	cli := executable(t, filepath.Join(bin, "mycloud"))
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE00")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret-not-in-the-file")
	local := app + " --listen 127.0.0.1:{{.Port}} --name {{.Name}}"
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, cfg *config.Config, text string)
	}{
		{"local", []string{"--local", local}, func(t *testing.T, cfg *config.Config, _ string) {
			g := cfg.Groups[0]
			if g.Name != "web" || g.MinSize != 2 || g.MaxSize != 4 || g.Provider != config.ProviderLocal || g.Autoscale == nil {
				t.Errorf("group = %+v", g)
			}
			want := []string{app, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"}
			if !slices.Equal(g.Template.Command, want) {
				t.Errorf("command = %q, want %q", g.Template.Command, want)
			}
			argv, env, err := g.Template.Expand(config.TemplateData{Name: "web-001", Host: "127.0.0.1", Port: 20001, Index: 1, Group: "web"})
			if err != nil || argv[2] != "127.0.0.1:20001" || !slices.Contains(env, "PORT=20001") {
				t.Errorf("expanded: %q, env %q, %v", argv, env, err)
			}
			if len(cfg.Frontends) != 1 || cfg.Frontends[0].Bind[0] != "0.0.0.0:8080" {
				t.Errorf("frontends = %+v", cfg.Frontends)
			}
		}},
		{"local options", []string{"--local", local, "--listen", "127.0.0.1:9090", "--group", "api", "--min", "1", "--max", "3", "--health-path", "/healthz", "--state-dir", "/var/lib/shoal"}, func(t *testing.T, cfg *config.Config, _ string) {
			g := cfg.Groups[0]
			if g.Name != "api" || g.MinSize != 1 || g.MaxSize != 3 || g.Health.Path != "/healthz" || cfg.StateDir != "/var/lib/shoal" || cfg.Frontends[0].Bind[0] != "127.0.0.1:9090" {
				t.Errorf("group = %+v, state_dir %s, frontends %+v", g, cfg.StateDir, cfg.Frontends)
			}
		}},
		{"tls", []string{"--local", local, "--tls", "example.com", "--tls", "www.example.com", "--email", "ops@example.com"}, func(t *testing.T, cfg *config.Config, _ string) {
			fe := cfg.Frontends[0]
			if fe.TLS == nil || fe.TLS.ACME == nil || !slices.Equal(fe.TLS.ACME.Domains, []string{"example.com", "www.example.com"}) ||
				fe.TLS.ACME.Email != "ops@example.com" || !fe.TLS.RedirectHTTP || !slices.Equal(fe.Bind, []string{"[::]:80", "[::]:443"}) ||
				!slices.Equal(fe.TLS.Bind, []string{"[::]:443"}) {
				t.Errorf("frontend = %+v, tls %+v", fe, fe.TLS)
			}
		}},
		{"tls staging", []string{"--local", local, "--tls", "example.com", "--email", "ops@example.com", "--acme-directory", "https://acme-staging-v02.api.letsencrypt.org/directory", "--listen", "127.0.0.1:8080", "--tls-listen", "127.0.0.1:8443"}, func(t *testing.T, cfg *config.Config, _ string) {
			fe := cfg.Frontends[0]
			if fe.TLS.ACME.Directory != "https://acme-staging-v02.api.letsencrypt.org/directory" || !slices.Equal(fe.Bind, []string{"127.0.0.1:8080", "127.0.0.1:8443"}) {
				t.Errorf("frontend = %+v, acme %+v", fe, fe.TLS.ACME)
			}
		}},
		{"ha", []string{"--local", local, "--ha", "10.0.0.2", "--etcd", "http://10.0.0.1:2379", "--etcd", "http://10.0.0.2:2379", "--node", "left"}, func(t *testing.T, cfg *config.Config, text string) {
			h := cfg.HA
			if h == nil || h.Node != "left" || h.Priority != 100 || len(h.Etcd.Endpoints) != 2 || h.VIP != nil {
				t.Errorf("ha = %+v", h)
			}
			if !strings.Contains(text, `#   unicast_peers: ["10.0.0.2"]`) {
				t.Errorf("the peer is not in the commented vip:\n%s", text)
			}
		}},
		{"ha vip", []string{"--local", local, "--ha", "10.0.0.2", "--etcd", "https://10.0.0.1:2379", "--vip", "10.0.0.100/24", "--vip-interface", "eth0", "--priority", "90"}, func(t *testing.T, cfg *config.Config, _ string) {
			h := cfg.HA
			if h == nil || h.Priority != 90 || h.VIP == nil || h.VIP.Address != "10.0.0.100/24" || h.VIP.Interface != "eth0" || !slices.Equal(h.VIP.UnicastPeers, []string{"10.0.0.2"}) {
				t.Errorf("ha = %+v, vip %+v", h, h.VIP)
			}
		}},
		{"max conn", []string{"--local", local, "--max-conn", "20"}, func(t *testing.T, cfg *config.Config, text string) {
			g := cfg.Groups[0]
			if g.Limits == nil || g.Limits.MaxConn != 20 || g.Limits.QueueTimeout != 30*time.Second || g.Balance != "leastconn" {
				t.Errorf("limits = %+v, balance %q; want max_conn 20, queue_timeout 30s, leastconn", g.Limits, g.Balance)
			}
			if a := g.Autoscale; a == nil || a.Target == nil || a.Target.Metric != "concurrency" || a.Target.Value != 14 {
				t.Errorf("autoscale = %+v; want target concurrency 14 (0.7 × 20)", a)
			}
			if !strings.Contains(text, "limits: {max_conn: 20,") {
				t.Errorf("the file does not carry max_conn:\n%s", text)
			}
		}},
		{"max conn cloud", []string{"--cloud", "exec", "--cloud-cli", cli, "--max-conn", "5"}, func(t *testing.T, cfg *config.Config, _ string) {
			g := cfg.Groups[0]
			if g.Limits == nil || g.Limits.MaxConn != 5 {
				t.Errorf("limits = %+v", g.Limits)
			}
			if a := g.Autoscale; a == nil || a.Target == nil || a.Target.Metric != "concurrency" || a.Target.Value != 3.5 {
				t.Errorf("autoscale = %+v; want target concurrency 3.5 (0.7 × 5)", a)
			}
		}},
		{"exec", []string{"--cloud", "exec", "--cloud-cli", cli, "--port", "8081"}, func(t *testing.T, cfg *config.Config, _ string) {
			p := cfg.Providers[0]
			e := cloudexec.Of(p)
			if e == nil || p.Cloud.Port != 8081 || e.Start[0] != cli || !slices.Equal(e.Stop[1:], []string{"stop", "{{.ID}}"}) || cfg.Groups[0].Provider != "cloud" {
				t.Errorf("provider = %+v, exec %+v", p, e)
			}
		}},
		{"ec2", []string{"--cloud", "ec2", "--region", "ap-northeast-1", "--launch-template", "web"}, func(t *testing.T, cfg *config.Config, text string) {
			e := ec2.Of(cfg.Providers[0])
			if e == nil || e.Region != "ap-northeast-1" || e.LaunchTemplate == nil || e.LaunchTemplate.Name != "web" || e.CredentialsFile != "" {
				t.Errorf("ec2 = %+v", e)
			}
			if strings.Contains(text, "secret-not-in-the-file") {
				t.Error("the secret key from the environment is in the file")
			}
		}},
		{"sacloud", []string{"--cloud", "sacloud", "--archive", "my-app", "--zone", "tk1b", "--port", "80"}, func(t *testing.T, cfg *config.Config, _ string) {
			s := sacloud.Of(cfg.Providers[0])
			if s == nil || s.Zone != "tk1b" || cfg.Providers[0].Cloud.Port != 80 || len(s.Template.Disks) != 1 {
				t.Errorf("sacloud = %+v", s)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "shoal.yaml")
			out, stderr, code := runShoal(t, strings.NewReader(""), append([]string{"init", "-o", path}, tc.args...)...)
			if code != 0 {
				t.Fatalf("init: exit %d\n%s%s", code, out, stderr)
			}
			if !strings.Contains(stderr, "wrote "+path) {
				t.Errorf("stderr = %q, want it to say what it wrote", stderr)
			}
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != 0o644 {
				t.Fatalf("stat: %v, %v; want mode 0644", fi, err)
			}
			text, _ := os.ReadFile(path)
			if !strings.HasPrefix(string(text), "# shoal.yaml, written by `shoal init`") {
				t.Errorf("the file does not start with its comment:\n%s", text)
			}
			tc.check(t, validated(t, path), string(text))
		})
	}
}

// ec2's keys, without the environment's, come from ~/.aws/credentials.
func TestInitEC2CredentialsFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	path := filepath.Join(t.TempDir(), "shoal.yaml")
	args := []string{"init", "-o", path, "--cloud", "ec2", "--region", "eu-west-1", "--launch-template", "web"}
	// Without either, the file would not validate: nothing is written.
	if _, stderr, code := runShoal(t, strings.NewReader(""), args...); code != exitUsage || !strings.Contains(stderr, "AWS_ACCESS_KEY_ID is not set") || !strings.Contains(stderr, "nothing written") {
		t.Fatalf("init without credentials: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file that does not validate was written: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(home, ".aws"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".aws", "credentials"), []byte("[default]\naws_access_key_id = AKIAEXAMPLEEXAMPLE00\naws_secret_access_key = s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runShoal(t, strings.NewReader(""), args...); code != 0 {
		t.Fatalf("init: exit %d, %s", code, stderr)
	}
	if e := ec2.Of(validated(t, path).Providers[0]); e.CredentialsFile != filepath.Join(home, ".aws", "credentials") {
		t.Errorf("credentials_file = %q", e.CredentialsFile)
	}
}

// A command is split into words as a shell splits it, and each word is
// written so that YAML reads it back unchanged: spaces, quotes, #, :, {.
func TestInitCommandIsArgv(t *testing.T) {
	dir := t.TempDir()
	app := executable(t, filepath.Join(dir, "my app", "run server"))
	path := filepath.Join(dir, "shoal.yaml")
	line := `'` + app + `' --port {{.Port}} --greeting "he said \"hi\" # not a comment: {x}" --tab 'a	b' --unicode 'ünï ☃' \--literal`
	if _, stderr, code := runShoal(t, strings.NewReader(""), "init", "-o", path, "--local", line); code != 0 {
		t.Fatalf("init: exit %d, %s", code, stderr)
	}
	want := []string{app, "--port", "{{.Port}}", "--greeting", `he said "hi" # not a comment: {x}`, "--tab", "a\tb", "--unicode", "ünï ☃", "--literal"}
	if got := validated(t, path).Groups[0].Template.Command; !slices.Equal(got, want) {
		t.Errorf("command = %q, want %q", got, want)
	}
}

// What cannot make a valid file is refused with the flag's name, and
// nothing is written.
func TestInitRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	app := executable(t, filepath.Join(dir, "app"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--local", app + " {{.Port}} | tee log"}, `"|" is a shell operator`},
		{[]string{"--local", app + " --port $PORT"}, "$ expands nothing"},
		{[]string{"--local", app + " 'unterminated {{.Port}}"}, "unterminated ' quote"},
		{[]string{"--local", app + " --listen 127.0.0.1:8000"}, "never says the instance's port"},
		{[]string{"--local", filepath.Join(dir, "missing") + " {{.Port}}"}, `program "` + filepath.Join(dir, "missing") + `" not found`},
		{[]string{"--local", app + " {{.Port}}", "--cloud", "exec"}, "one of --local CMD, --ssh HOST or --cloud"},
		{[]string{"--cloud", "gcp"}, "--cloud must be one of exec, ec2, sacloud"},
		{[]string{"--cloud", "exec"}, "--cloud exec needs --cloud-cli PROG"},
		{[]string{"--ssh", "10.0.0.1", "--key", "k", "--command", "app {{.Port}}"}, "--ssh needs --user"},
		{[]string{"--local", app + " {{.Port}}", "--tls", "example.com"}, "--tls DOMAIN needs --email"},
		{[]string{"--local", app + " {{.Port}}", "--tls", "*.example.com", "--email", "ops@example.com"}, "wildcard cannot be validated"},
		{[]string{"--local", app + " {{.Port}}", "--ha", "peer.example.com", "--etcd", "http://10.0.0.1:2379"}, "--ha takes the other node's IP address"},
		{[]string{"--local", app + " {{.Port}}", "--ha", "10.0.0.2"}, "--ha needs --etcd URL"},
		{[]string{"--local", app + " {{.Port}}", "--min", "5", "--max", "2"}, "want 0 <= min <= max"},
		{[]string{"--local", app + " {{.Port}}", "--listen", "nowhere"}, "listen"},
		{[]string{"--local", app + " {{.Port}}", "--max-conn", "0"}, "--max-conn must be at least 1"},
		{[]string{"--local", app + " {{.Port}}", "--max-conn", "-3"}, "--max-conn must be at least 1"},
		{[]string{"--local", app + " {{.Port}}", "--max-conn", "2000000"}, "max_conn: must be from 1 to"},
	} {
		path := filepath.Join(dir, "shoal.yaml")
		_, stderr, code := runShoal(t, strings.NewReader(""), append([]string{"init", "-o", path}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("init %q: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("init %q wrote a file", tc.args)
			os.Remove(path)
		}
	}
}

// init never replaces a file without --force; with it, the file is
// replaced whole.
func TestInitOverwrite(t *testing.T) {
	dir := t.TempDir()
	app := executable(t, filepath.Join(dir, "app"))
	path := filepath.Join(dir, "shoal.yaml")
	old := []byte("# mine\n")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"init", "-o", path, "--local", app + " {{.Port}}"}
	_, stderr, code := runShoal(t, strings.NewReader(""), args...)
	if code != exitUsage || !strings.Contains(stderr, "exists; init never replaces a file: --force does") {
		t.Errorf("init over a file: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, old) {
		t.Fatalf("the file changed without --force: %q", b)
	}
	// -c names the file too, as for serve and validate.
	if _, stderr, code := runShoal(t, strings.NewReader(""), "init", "-c", path, "--local", app+" {{.Port}}"); code != exitUsage || !strings.Contains(stderr, path+" exists") {
		t.Errorf("init -c over a file: exit %d, %s", code, stderr)
	}
	if _, stderr, code := runShoal(t, strings.NewReader(""), append(args, "--force")...); code != 0 {
		t.Fatalf("init --force: exit %d, %s", code, stderr)
	}
	validated(t, path)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v after --force, want 0644", fi.Mode())
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// -o - writes the file to stdout and nothing to disk.
func TestInitStdout(t *testing.T) {
	dir := t.TempDir()
	app := executable(t, filepath.Join(dir, "app"))
	t.Chdir(dir)
	out, stderr, code := runShoal(t, strings.NewReader(""), "init", "-o", "-", "--local", app+" {{.Port}}")
	if code != 0 || !strings.Contains(out, "listen: \"0.0.0.0:8080\"") {
		t.Fatalf("init -o -: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := config.Parse(filepath.Join(dir, "x.yaml"), []byte(out)); err != nil {
		t.Errorf("stdout does not load: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files written: %v", ents)
	}
}

// Without flags, init asks only on a terminal; otherwise it says how to
// use it and exits 2, writing nothing.
func TestInitNoFlagsNotTerminal(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "shoal.yaml")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.Close()
	for _, in := range []io.Reader{strings.NewReader("local\n"), r} {
		_, stderr, code := runShoal(t, in, "init", "-o", path)
		if code != exitUsage || !strings.Contains(stderr, "Usage:") || !strings.Contains(stderr, "without flags init asks, on a terminal only") {
			t.Errorf("init without flags from %T: exit %d, %s", in, code, stderr)
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file was written")
	}
}

// On a terminal, without flags, init asks; a bad answer is asked again.
func TestInitInteractive(t *testing.T) {
	dir := t.TempDir()
	app := executable(t, filepath.Join(dir, "app"))
	path := filepath.Join(dir, "shoal.yaml")
	master, tty := openPTY(t, 80)
	answers := strings.Join([]string{
		"",                          // where: local (the default)
		app + " --listen 127.0.0.1", // no {{.Port}}: asked again
		app + " --listen 127.0.0.1:{{.Port}}",
		"",               // no HTTPS
		"127.0.0.1:8181", // listen
		"",               // no HA peer
	}, "\n") + "\n"
	if _, err := master.WriteString(answers); err != nil {
		t.Fatal(err)
	}
	// The terminal echoes what was typed; keep its buffer drained.
	go func() { _, _ = io.Copy(io.Discard, master) }()
	_, stderr, code := runShoal(t, tty, "init", "-o", path)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"Where do the instances run", "must say the instance's port", "Address HAProxy listens on [0.0.0.0:8080]: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	cfg := validated(t, path)
	if g := cfg.Groups[0]; !slices.Equal(g.Template.Command, []string{app, "--listen", "127.0.0.1:{{.Port}}"}) || cfg.Frontends[0].Bind[0] != "127.0.0.1:8181" {
		t.Errorf("command %q, frontends %+v", g.Template.Command, cfg.Frontends)
	}
}

// The interview's other paths: a cloud, HTTPS and an HA peer.
func TestInitInteractiveCloudTLSHA(t *testing.T) {
	dir := t.TempDir()
	cli := executable(t, filepath.Join(dir, "bin", "mycloud"))
	path := filepath.Join(dir, "conf", "shoal.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// The program is named relative to the working directory, and written
	// so that the config finds it from its own.
	t.Chdir(dir)
	master, tty := openPTY(t, 80)
	answers := strings.Join([]string{
		"cloud",
		"gcp", // not one of them: asked again
		"exec",
		"9000",                    // port
		"bin/mycloud",             // the CLI
		"example.com example.org", // HTTPS
		"ops@example.com",         // ACME account
		"10.0.0.2",                // HA peer
		"http://10.0.0.1:2379 http://10.0.0.2:2379",
	}, "\n") + "\n"
	if _, err := master.WriteString(answers); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, master) }()
	_, stderr, code := runShoal(t, tty, "init", "-o", path)
	if code != 0 {
		t.Fatalf("init: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "answer one of exec, ec2, sacloud") {
		t.Errorf("a bad answer was not asked again:\n%s", stderr)
	}
	cfg := validated(t, path)
	p := cfg.Providers[0]
	if e := cloudexec.Of(p); e == nil || e.Start[0] != cli || p.Cloud.Port != 9000 {
		t.Errorf("provider %+v", p)
	}
	if fe := cfg.Frontends[0]; fe.TLS == nil || !slices.Equal(fe.TLS.ACME.Domains, []string{"example.com", "example.org"}) || fe.Bind[0] != "[::]:80" {
		t.Errorf("frontend %+v", fe)
	}
	if h := cfg.HA; h == nil || len(h.Etcd.Endpoints) != 2 {
		t.Errorf("ha %+v", h)
	}
}
