package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// tlsBench measures TLS termination in front of the same two demo-backends
// (shoal's instances), three ways, with the same ECDSA P-256 certificate:
//
//	(b) haproxy  a minimal hand-written haproxy.cfg: bind ... ssl crt FILE alpn h2,http/1.1;
//	(c) shoal    shoal's HAProxy: a TLS frontend from the config (crt-list,
//	             ssl-min-ver TLSv1.2, rotated session ticket keys);
//	(d) nginx    Debian's nginx: listen ... ssl http2, upstream keepalive.
//
// Each is loaded three ways per round: requests/s over keep-alive
// connections (wrk), and handshakes/s with a new connection per request,
// once with full handshakes and once resuming sessions (handshakeLoad,
// which says why not wrk). Rounds rotate the order, so that each target
// takes each place; the figures are the medians of the per-round ratios of
// (c) to (b).
func init() {
	register(&command{
		name:    "tls",
		summary: "TLS requests/s and handshakes/s (full and resumed) through shoal vs a minimal haproxy.cfg vs nginx, same certificate",
		run:     runTLSBench,
	})
}

const tlsRatioGoal = 1.0

// tlsTarget is one TLS terminator, measured in the three modes.
type tlsTarget struct {
	Key       string            `json:"key"`
	Label     string            `json:"label"`
	Status    string            `json:"status"`
	URL       string            `json:"-"`
	KeepAlive []Sample          `json:"keep_alive_rounds"`
	Full      []HandshakeSample `json:"full_handshake_rounds"`
	Resumed   []HandshakeSample `json:"resumed_handshake_rounds"`
	RPS       *float64          `json:"rps"`
	FullHPS   *float64          `json:"full_handshakes_per_second"`
	ResHPS    *float64          `json:"resumed_handshakes_per_second"`
	// ResShare is the median share of the resuming client's handshakes
	// that did resume.
	ResShare *float64 `json:"resumed_share"`
	Errors   int64    `json:"errors"`
}

type tlsDetails struct {
	Targets     []*tlsTarget `json:"targets"`
	RPSRatios   []float64    `json:"round_ratios_rps_shoal_haproxy"`
	FullRatios  []float64    `json:"round_ratios_full_hps_shoal_haproxy"`
	ResRatios   []float64    `json:"round_ratios_resumed_hps_shoal_haproxy"`
	NginxRatios []float64    `json:"round_ratios_full_hps_shoal_nginx"`
}

func runTLSBench(ctx context.Context, env *Env, fs *flag.FlagSet, args []string) (*Report, error) {
	rounds := fs.Int("rounds", 5, "rounds per target and mode")
	seconds := fs.Duration("seconds", 5*time.Second, "length of a round")
	conns := fs.Int("conns", 32, "connections")
	extra := fs.String("shoal-yaml", "", "top-level YAML added to shoal's config, to measure a setting (e.g. 'access_log: {sample: 0}')")
	extraTLS := fs.String("shoal-tls", "", "keys added to shoal's tls mapping (e.g. 'ticket_keys: off')")
	var bins binFlags
	bins.register(fs)
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if *rounds < 1 || *seconds < time.Second || *conns < 1 {
		return nil, badUsage("-rounds >= 1, -seconds >= 1s and -conns >= 1 please")
	}
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		return nil, errors.New("wrk is not installed (scripts/install-deps.sh wrk): loadgen cannot drive TLS")
	}
	backend, sbin, err := bins.resolve()
	if err != nil {
		return nil, err
	}
	cert, key, err := writeBenchCert(env.Work)
	if err != nil {
		return nil, err
	}
	hs, err := newHandshakeLoad(cert)
	if err != nil {
		return nil, err
	}

	rep := &Report{Date: time.Now(), Machine: newMachine()}
	hapT := &tlsTarget{Key: "haproxy", Label: "(b) minimal haproxy.cfg, the same 2 instances"}
	shoalT := &tlsTarget{Key: "shoal", Label: "(c) shoal's HAProxy, 2 instances"}
	nginxT := &tlsTarget{Key: "nginx", Label: "(d) nginx, the same 2 instances"}
	det := &tlsDetails{Targets: []*tlsTarget{hapT, shoalT, nginxT}}
	rep.Details = det

	hap := haproxyPath()
	if hap == "" {
		return nil, errors.New("haproxy not installed")
	}
	// All three proxy to the same two processes, shoal's instances: what
	// differs between them is the proxy alone.
	sh, err := startShoalTLS(ctx, env, sbin, backend, cert, key, *extra, *extraTLS, shoalT)
	if err != nil {
		return nil, err
	}
	ports, err := instancePorts(ctx, sh, "web")
	if err != nil {
		return nil, err
	}
	if err := startMinimalTLSHAProxy(ctx, env, hap, cert, key, ports, hapT); err != nil {
		hapT.Status = err.Error()
	}
	if err := startNginx(ctx, env, cert, key, ports, nginxT); err != nil {
		nginxT.Status = err.Error()
	}

	for r := 1; r <= *rounds; r++ {
		// Each target takes each place in turn: the one after another's
		// handshake phase (thousands of connections in TIME_WAIT, a warm
		// client) is not always the same.
		n := len(det.Targets)
		order := append(slices.Clone(det.Targets[(r-1)%n:]), det.Targets[:(r-1)%n]...)
		for _, t := range order {
			if t.Status != "ok" {
				continue
			}
			addr, err := hostPort(t.URL)
			if err != nil {
				return nil, err
			}
			ka, err := runWrk(ctx, wrk, t.URL, *conns, *seconds)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return nil, fmt.Errorf("round %d of %s: %w", r, t.Key, err)
			}
			full, err := hs.run(ctx, addr, *conns, *seconds, false)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return nil, fmt.Errorf("round %d of %s, full handshakes: %w", r, t.Key, err)
			}
			res, err := hs.run(ctx, addr, *conns, *seconds, true)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return nil, fmt.Errorf("round %d of %s, resumed handshakes: %w", r, t.Key, err)
			}
			env.Log.Info("round", "n", r, "of", *rounds, "target", t.Key, "rps", math.Round(ka.RPS),
				"full_handshakes_per_s", math.Round(full.RPS), "resumed_handshakes_per_s", math.Round(res.RPS),
				"resumed_share", round2(res.Resumed), "errors", ka.Errors+full.Errors+res.Errors)
			t.KeepAlive, t.Full, t.Resumed = append(t.KeepAlive, ka), append(t.Full, full), append(t.Resumed, res)
		}
	}
	for _, t := range det.Targets {
		var rps, full, res, share []float64
		for i := range t.KeepAlive {
			rps, full, res = append(rps, t.KeepAlive[i].RPS), append(full, t.Full[i].RPS), append(res, t.Resumed[i].RPS)
			share = append(share, t.Resumed[i].Resumed)
			t.Errors += t.KeepAlive[i].Errors + t.Full[i].Errors + t.Resumed[i].Errors
		}
		t.RPS, t.FullHPS, t.ResHPS, t.ResShare = num(median(rps)), num(median(full)), num(median(res)), num(median(share))
	}
	paired := func(a, b *tlsTarget, of func(t *tlsTarget, i int) float64) []float64 {
		var out []float64
		for i := range min(len(a.KeepAlive), len(b.KeepAlive)) {
			out = append(out, of(a, i)/of(b, i))
		}
		return out
	}
	kaOf := func(t *tlsTarget, i int) float64 { return t.KeepAlive[i].RPS }
	fullOf := func(t *tlsTarget, i int) float64 { return t.Full[i].RPS }
	resOf := func(t *tlsTarget, i int) float64 { return t.Resumed[i].RPS }
	det.RPSRatios, det.FullRatios, det.ResRatios = paired(shoalT, hapT, kaOf), paired(shoalT, hapT, fullOf), paired(shoalT, hapT, resOf)
	det.NginxRatios = paired(shoalT, nginxT, fullOf)
	goal := func(v float64) bool { return v >= tlsRatioGoal }
	figure := func(name, unit string, value, base *float64, ratios []float64) Figure {
		ratio := num(median(ratios))
		return Figure{
			Name: name, Unit: unit, Value: value,
			Baseline: hapT.Label, BaselineValue: base, Ratio: ratio,
			Goal: fmt.Sprintf(">= %.1f", tlsRatioGoal), Verdict: verdict(ratio, goal),
			Note: "median of the per-round ratios: " + joinFloats(ratios, "%.3f"),
		}
	}
	rep.Figures = []Figure{
		figure("(c) shoal TLS req/s, keep-alive", "req/s", shoalT.RPS, hapT.RPS, det.RPSRatios),
		figure("(c) shoal full TLS handshakes/s, a connection per request", "handshakes/s", shoalT.FullHPS, hapT.FullHPS, det.FullRatios),
		figure("(c) shoal resumed TLS handshakes/s, a connection per request", "handshakes/s", shoalT.ResHPS, hapT.ResHPS, det.ResRatios),
		{
			Name: "(c) shoal full handshakes/s vs nginx", Unit: "handshakes/s", Value: shoalT.FullHPS,
			Baseline: nginxT.Label, BaselineValue: nginxT.FullHPS, Ratio: num(median(det.NginxRatios)),
		}, {
			Name: "(d) nginx TLS req/s, keep-alive", Unit: "req/s", Value: nginxT.RPS,
			Baseline: hapT.Label, BaselineValue: hapT.RPS, Ratio: ratioOf(nginxT.RPS, hapT.RPS),
		},
	}
	rep.Settings = []Setting{
		{"load", fmt.Sprintf("keep-alive: wrk -t1 -c%d -d%v --latency https://127.0.0.1:PORT/; handshakes: %d Go TLS 1.3 clients, a connection and one GET (Connection: close) each, full (no session cache) then resumed (each client offers the newest ticket it got); %d rounds, alternating order", *conns, *seconds, *conns, *rounds)},
		{"certificate", "one self-signed ECDSA P-256 certificate for all three; TLS 1.3 and its default suites (each server's OpenSSL defaults; none sets ciphers)"},
		{"(b)", "bind ssl crt FILE alpn h2,http/1.1; HAProxy's defaults otherwise (nbthread = CPUs, session cache 20000, tickets with a key per process)"},
		{"(c)", "frontends: [{tls: {certificates: [...]}}]: bind ssl crt-list alpn h2,http/1.1 ssl-min-ver TLSv1.2 tls-ticket-keys (rotated hourly)" + extraNote(*extra+" "+*extraTLS)},
		{"(d)", "worker_processes auto; listen ssl http2; ssl_protocols TLSv1.2 TLSv1.3; upstream keepalive 32; access_log off"},
	}
	var md strings.Builder
	md.WriteString("| target | req/s keep-alive | full handshakes/s | resumed handshakes/s | resumed | errors | req/s per round | full per round | resumed per round |\n|---|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, t := range det.Targets {
		if t.Status != "ok" {
			fmt.Fprintf(&md, "| %s | %s | | | | | | | |\n", t.Label, t.Status)
			continue
		}
		var ka, full, res []float64
		for i := range t.KeepAlive {
			ka, full, res = append(ka, t.KeepAlive[i].RPS), append(full, t.Full[i].RPS), append(res, t.Resumed[i].RPS)
		}
		share := "-"
		if t.ResShare != nil {
			share = fmt.Sprintf("%.0f %%", 100**t.ResShare)
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s | %d | %s | %s | %s |\n", t.Label, fmtNum(t.RPS), fmtNum(t.FullHPS), fmtNum(t.ResHPS), share, t.Errors,
			joinFloats(ka, "%.0f"), joinFloats(full, "%.0f"), joinFloats(res, "%.0f"))
	}
	rep.Markdown = md.String()
	return rep, nil
}

func extraNote(extra string) string {
	if strings.TrimSpace(extra) == "" {
		return ""
	}
	return "; with " + strings.Join(strings.Fields(extra), " ")
}

// writeBenchCert writes a self-signed ECDSA P-256 certificate for
// 127.0.0.1 and its key.
func writeBenchCert(dir string) (cert, key string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(0, 0, 30),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return "", "", err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", err
	}
	return cert, key, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
}

func startMinimalTLSHAProxy(ctx context.Context, env *Env, hap, cert, key string, ports []int, t *tlsTarget) error {
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	pemFile := filepath.Join(env.Work, "tls.pem")
	var both bytes.Buffer
	for _, f := range []string{cert, key} {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		both.Write(b)
	}
	if err := os.WriteFile(pemFile, both.Bytes(), 0o600); err != nil {
		return err
	}
	sock := filepath.Join(env.Work, "haproxy-tls.sock")
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend fe
    bind 127.0.0.1:%d ssl crt %s alpn h2,http/1.1
    default_backend be

backend be
    balance roundrobin
    server s1 127.0.0.1:%d
    server s2 127.0.0.1:%d
`, sock, port, pemFile, ports[0], ports[1])
	t.URL = fmt.Sprintf("https://127.0.0.1:%d/", port)
	if err := startHAProxyConfig(ctx, env, hap, "haproxy-tls", cfg, t.URL); err != nil {
		return err
	}
	t.Status = "ok"
	return nil
}

// instancePorts returns the ports of group's instances in shoal.
func instancePorts(ctx context.Context, sh *Shoal, group string) ([]int, error) {
	st, err := sh.API.Group(ctx, group)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, in := range st.Instances {
		_, p, err := net.SplitHostPort(in.Addr)
		if err != nil {
			return nil, fmt.Errorf("instance %s address %q: %w", in.Name, in.Addr, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("instance %s address %q: %w", in.Name, in.Addr, err)
		}
		ports = append(ports, port)
	}
	if len(ports) != 2 {
		return nil, fmt.Errorf("shoal runs %d instances of %s, want 2", len(ports), group)
	}
	return ports, nil
}

func startShoalTLS(ctx context.Context, env *Env, bin, backend, cert, key, extra, extraTLS string, t *tlsTarget) (*Shoal, error) {
	if extraTLS != "" {
		extraTLS = ", " + extraTLS
	}
	stateDir := filepath.Join(env.Work, "state")
	render := func(port int) string {
		return fmt.Sprintf(`frontends:
  - name: edge
    bind: [127.0.0.1:%d]
    tls: {certificates: [{cert: %s, key: %s}]%s}
    routes: [{group: web}]
state_dir: %s
groups:
  - name: web
    min_size: 2
    max_size: 2
    health:
      path: /healthz
    template:
      command: [%q, "--listen", "127.0.0.1:{{.Port}}", "--name", "{{.Name}}"]
%s
`, port, cert, key, extraTLS, stateDir, backend, extra)
	}
	env.Log.Info("starting shoal")
	sh, err := env.StartShoalOn(bin, render)
	if err != nil {
		return nil, err
	}
	t.URL = "https://" + sh.Cfg.Frontends[0].Bind[0] + "/"
	if err := sh.WaitInService(ctx, "web", 2, 60*time.Second, pollEvery); err != nil {
		return nil, fmt.Errorf("shoal did not get 2 instances in service: %w", err)
	}
	if err := WaitHTTP(ctx, t.URL, sh.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	t.Status = "ok"
	return sh, nil
}

func startNginx(ctx context.Context, env *Env, cert, key string, ports []int, t *tlsTarget) error {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			return errors.New("nginx not installed (scripts/install-deps.sh nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(env.Work, "nginx")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`daemon off;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream be {
        server 127.0.0.1:%[2]d;
        server 127.0.0.1:%[3]d;
        keepalive 32;
    }
    server {
        listen 127.0.0.1:%[4]d ssl http2;
        ssl_certificate %[5]s;
        ssl_certificate_key %[6]s;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`, dir, ports[0], ports[1], port, cert, key)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", path).CombinedOutput(); err != nil {
		return fmt.Errorf("nginx -t: %v: %s", err, strings.TrimSpace(string(out)))
	}
	p, err := env.Start("nginx", bin, "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", path)
	if err != nil {
		return err
	}
	t.URL = fmt.Sprintf("https://127.0.0.1:%d/", port)
	if err := WaitHTTP(ctx, t.URL, p, 10*time.Second); err != nil {
		return fmt.Errorf("nginx did not start: %v: %s", err, env.LogTail("nginx", 3))
	}
	t.Status = "ok"
	return nil
}
