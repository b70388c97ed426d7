package tlsbench

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

	"github.com/shoal-lb/shoal/internal/bench"
)

// tlsBench measures TLS termination in front of the same two demo-backends
// (shoal's instances), with the same ECDSA P-256 certificate:
//
//	(b) haproxy  a minimal hand-written haproxy.cfg: bind ... ssl crt FILE alpn h2,http/1.1;
//	(c) shoal    shoal's HAProxy: a TLS frontend from the config (crt-list,
//	             ssl-min-ver TLSv1.2, rotated session ticket keys);
//	(d) nginx    Debian's nginx: listen ... ssl http2, upstream keepalive;
//	(e)          (b) with shoal's layer-7 retry-on and its rule for
//	             non-idempotent methods, keep-alive only: what they cost
//	             (with -shoal-group-yaml 'retries: idempotent': a local
//	             group renders none by default).
//
// Each is loaded three ways per round: requests/s over keep-alive
// connections (wrk), and handshakes/s with a new connection per request,
// once with full handshakes and once resuming sessions (handshakeLoad,
// which says why not wrk). In a round, each mode runs over the targets in
// an order and then in the reverse order, half the time each, and a
// target's figure for the round is the mean of its two halves: on a shared
// machine the speed drifts by several % over seconds, and a drift that is
// steady through a round then weighs on every target alike. Rounds rotate
// the order, so that each target takes each place; the figures are the
// medians of the per-round ratios of (c) to (b).
//
// Keep-alive rounds also read each proxy's CPU time (/proc/PID/stat) per
// request: what a proxy costs, less swayed than requests/s by what else
// the machine runs.
var Command = &bench.Command{
	Name:    "tls",
	Summary: "TLS requests/s and handshakes/s (full and resumed) through shoal vs a minimal haproxy.cfg vs nginx, same certificate",
	Run:     runTLSBench,
}

const tlsRatioGoal = 1.0

// tlsTarget is one TLS terminator, measured in the three modes.
type tlsTarget struct {
	Key       string         `json:"key"`
	Label     string         `json:"label"`
	Status    string         `json:"status"`
	URL       string         `json:"-"`
	KeepAlive []bench.Sample `json:"keep_alive_rounds"`
	// CPU is the proxy's CPU time per keep-alive request, µs, per round;
	// Control is shoal's own (its HAProxy is in CPU).
	CPU     []float64         `json:"keep_alive_cpu_us_per_request_rounds"`
	Control []float64         `json:"keep_alive_control_cpu_us_per_request_rounds,omitempty"`
	Full    []HandshakeSample `json:"full_handshake_rounds"`
	Resumed []HandshakeSample `json:"resumed_handshake_rounds"`
	RPS     *float64          `json:"rps"`
	FullHPS *float64          `json:"full_handshakes_per_second"`
	ResHPS  *float64          `json:"resumed_handshakes_per_second"`
	// ResShare is the median share of the resuming client's handshakes
	// that did resume.
	ResShare *float64 `json:"resumed_share"`
	CPUus    *float64 `json:"keep_alive_cpu_us_per_request"`
	Errors   int64    `json:"errors"`
	// proxy and control list the processes CPU and Control are read from.
	proxy, control func() []int
	// keepAliveOnly targets sit out the handshake runs.
	keepAliveOnly bool
}

type tlsDetails struct {
	Targets     []*tlsTarget `json:"targets"`
	RPSRatios   []float64    `json:"round_ratios_rps_shoal_haproxy"`
	FullRatios  []float64    `json:"round_ratios_full_hps_shoal_haproxy"`
	ResRatios   []float64    `json:"round_ratios_resumed_hps_shoal_haproxy"`
	NginxRatios []float64    `json:"round_ratios_full_hps_shoal_nginx"`
	CPURatios   []float64    `json:"round_ratios_cpu_per_request_shoal_haproxy"`
	// The (e) target against (b): what shoal's retry-on costs.
	RetryRPSRatios  []float64 `json:"round_ratios_rps_retry_haproxy"`
	RetryCPURatios  []float64 `json:"round_ratios_cpu_per_request_haproxy_retry"`
	RetryCostMicros []float64 `json:"round_cpu_us_per_request_retry_minus_haproxy"`
}

func runTLSBench(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	rounds := fs.Int("rounds", 5, "rounds per target and mode")
	seconds := fs.Duration("seconds", 6*time.Second, "each target's time per mode and round, run in two halves")
	conns := fs.Int("conns", 32, "connections")
	extra := fs.String("shoal-yaml", "", "top-level YAML added to shoal's config, to measure a setting (e.g. 'access_log: {sample: 0}')")
	extraTLS := fs.String("shoal-tls", "", "keys added to shoal's tls mapping (e.g. 'ticket_keys: off')")
	extraGroup := fs.String("shoal-group-yaml", "", "keys added to shoal's group web, one line (e.g. 'retries: idempotent')")
	var bins bench.BinFlags
	bins.Register(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if *rounds < 1 || *seconds < 2*time.Second || *conns < 1 {
		return nil, bench.BadUsage("-rounds >= 1, -seconds >= 2s and -conns >= 1 please")
	}
	half := (*seconds / 2).Round(time.Second)
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		return nil, errors.New("wrk is not installed (scripts/install-deps.sh wrk): loadgen cannot drive TLS")
	}
	backend, sbin, err := bins.Resolve()
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

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	hapT := &tlsTarget{Key: "haproxy", Label: "(b) minimal haproxy.cfg, the same 2 instances"}
	shoalT := &tlsTarget{Key: "shoal", Label: "(c) shoal's HAProxy, 2 instances"}
	nginxT := &tlsTarget{Key: "nginx", Label: "(d) nginx, the same 2 instances"}
	// (e) is (b) with shoal's retry-on and its rule for non-idempotent
	// methods: what shoal's layer-7 retries cost, measured in keep-alive
	// runs only.
	retryT := &tlsTarget{Key: "haproxy-retry", Label: "(e) (b) with shoal's retry-on", keepAliveOnly: true}
	det := &tlsDetails{Targets: []*tlsTarget{hapT, shoalT, nginxT, retryT}}
	rep.Details = det

	hap := bench.HAProxyPath()
	if hap == "" {
		return nil, errors.New("haproxy not installed")
	}
	// All three proxy to the same two processes, shoal's instances: what
	// differs between them is the proxy alone.
	sh, err := startShoalTLS(ctx, env, sbin, backend, cert, key, *extra, *extraTLS, *extraGroup, shoalT)
	if err != nil {
		return nil, err
	}
	ports, err := instancePorts(ctx, sh, "web")
	if err != nil {
		return nil, err
	}
	if err := startMinimalTLSHAProxy(ctx, env, "haproxy-tls", hap, cert, key, ports, nil, nil, hapT); err != nil {
		hapT.Status = err.Error()
	}
	retryDefaults, retryFrontend, err := retryLines(filepath.Join(sh.Cfg.StateDir, "haproxy", "haproxy.cfg"))
	if err == nil {
		err = startMinimalTLSHAProxy(ctx, env, "haproxy-tls-retry", hap, cert, key, ports, retryDefaults, retryFrontend, retryT)
	}
	if err != nil {
		retryT.Status = err.Error()
	}
	if err := startNginx(ctx, env, cert, key, ports, nginxT); err != nil {
		nginxT.Status = err.Error()
	}

	for r := 1; r <= *rounds; r++ {
		// Each target takes each place in turn: the one after another's
		// handshake phase (thousands of connections in TIME_WAIT, a warm
		// client) is not always the same.
		n := len(det.Targets)
		var order []*tlsTarget
		for _, t := range append(slices.Clone(det.Targets[(r-1)%n:]), det.Targets[:(r-1)%n]...) {
			if t.Status == "ok" {
				order = append(order, t)
			}
		}
		seq := append(slices.Clone(order), order...)
		slices.Reverse(seq[len(order):])
		ka := map[*tlsTarget][]bench.Sample{}
		// cpu and control hold requests and CPU ticks, summed over halves.
		cpu, control := map[*tlsTarget][2]float64{}, map[*tlsTarget][2]float64{}
		for _, t := range seq {
			proxy0, control0 := cpuTicks(t.proxy), cpuTicks(t.control)
			s, err := bench.RunWrk(ctx, wrk, t.URL, *conns, half)
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				return nil, fmt.Errorf("round %d of %s: %w", r, t.Key, err)
			}
			reqs := s.RPS * half.Seconds()
			c, k := cpu[t], control[t]
			c[0], c[1] = c[0]+reqs, c[1]+cpuTicks(t.proxy)-proxy0
			k[0], k[1] = k[0]+reqs, k[1]+cpuTicks(t.control)-control0
			cpu[t], control[t] = c, k
			ka[t] = append(ka[t], s)
		}
		hsRun := func(resume bool) (map[*tlsTarget][]HandshakeSample, error) {
			out := map[*tlsTarget][]HandshakeSample{}
			for _, t := range seq {
				if t.keepAliveOnly {
					continue
				}
				addr, err := hostPort(t.URL)
				if err != nil {
					return nil, err
				}
				s, err := hs.run(ctx, addr, *conns, half, resume)
				if err == nil {
					err = ctx.Err()
				}
				if err != nil {
					return nil, fmt.Errorf("round %d of %s, handshakes (resumed %v): %w", r, t.Key, resume, err)
				}
				out[t] = append(out[t], s)
			}
			return out, nil
		}
		full, err := hsRun(false)
		if err != nil {
			return nil, err
		}
		res, err := hsRun(true)
		if err != nil {
			return nil, err
		}
		for _, t := range order {
			k, f, s := meanSample(ka[t]), meanHandshakes(full[t]), meanHandshakes(res[t])
			t.KeepAlive = append(t.KeepAlive, k)
			if !t.keepAliveOnly {
				t.Full, t.Resumed = append(t.Full, f), append(t.Resumed, s)
			}
			t.CPU = append(t.CPU, perRequestMicros(cpu[t]))
			if t.control != nil {
				t.Control = append(t.Control, perRequestMicros(control[t]))
			}
			attrs := []any{"n", r, "of", *rounds, "target", t.Key, "rps", math.Round(k.RPS), "cpu_us_per_request", bench.Round2(t.CPU[len(t.CPU)-1])}
			if !t.keepAliveOnly {
				attrs = append(attrs, "full_handshakes_per_s", math.Round(f.RPS), "resumed_handshakes_per_s", math.Round(s.RPS),
					"resumed_share", bench.Round2(s.Resumed))
			}
			env.Log.Info("round", append(attrs, "errors", k.Errors+f.Errors+s.Errors)...)
		}
	}
	for _, t := range det.Targets {
		var rps, full, res, share []float64
		for _, k := range t.KeepAlive {
			rps = append(rps, k.RPS)
			t.Errors += k.Errors
		}
		for i := range t.Full {
			full, res = append(full, t.Full[i].RPS), append(res, t.Resumed[i].RPS)
			share = append(share, t.Resumed[i].Resumed)
			t.Errors += t.Full[i].Errors + t.Resumed[i].Errors
		}
		t.RPS, t.FullHPS, t.ResHPS, t.ResShare = bench.Num(bench.Median(rps)), bench.Num(bench.Median(full)), bench.Num(bench.Median(res)), bench.Num(bench.Median(share))
		t.CPUus = bench.Num(bench.Median(finite(t.CPU)))
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
	// Less CPU per request is better: the ratio is (b)'s over (c)'s.
	cpuOf := func(t *tlsTarget, i int) float64 { return t.CPU[i] }
	det.CPURatios = finite(paired(hapT, shoalT, cpuOf))
	det.RetryRPSRatios, det.RetryCPURatios = paired(retryT, hapT, kaOf), finite(paired(hapT, retryT, cpuOf))
	for i := range min(len(retryT.CPU), len(hapT.CPU)) {
		det.RetryCostMicros = append(det.RetryCostMicros, retryT.CPU[i]-hapT.CPU[i])
	}
	det.RetryCostMicros = finite(det.RetryCostMicros)
	goal := func(v float64) bool { return v >= tlsRatioGoal }
	figure := func(name, unit string, value, base *float64, ratios []float64) bench.Figure {
		ratio := bench.Num(bench.Median(ratios))
		return bench.Figure{
			Name: name, Unit: unit, Value: value,
			Baseline: hapT.Label, BaselineValue: base, Ratio: ratio,
			Goal: fmt.Sprintf(">= %.1f", tlsRatioGoal), Verdict: bench.Verdict(ratio, goal),
			Note: "median of the per-round ratios: " + bench.JoinFloats(ratios, "%.3f"),
		}
	}
	rep.Figures = []bench.Figure{
		figure("(c) shoal TLS req/s, keep-alive", "req/s", shoalT.RPS, hapT.RPS, det.RPSRatios),
		figure("(c) shoal full TLS handshakes/s, a connection per request", "handshakes/s", shoalT.FullHPS, hapT.FullHPS, det.FullRatios),
		figure("(c) shoal resumed TLS handshakes/s, a connection per request", "handshakes/s", shoalT.ResHPS, hapT.ResHPS, det.ResRatios),
		{
			Name: "(c) shoal full handshakes/s vs nginx", Unit: "handshakes/s", Value: shoalT.FullHPS,
			Baseline: nginxT.Label, BaselineValue: nginxT.FullHPS, Ratio: bench.Num(bench.Median(det.NginxRatios)),
		}, {
			Name: "(d) nginx TLS req/s, keep-alive", Unit: "req/s", Value: nginxT.RPS,
			Baseline: hapT.Label, BaselineValue: hapT.RPS, Ratio: bench.RatioOf(nginxT.RPS, hapT.RPS),
		}, {
			Name: "(c) shoal's HAProxy CPU per keep-alive request (efficiency: (b)'s CPU over (c)'s)", Unit: "µs", Value: shoalT.CPUus,
			Baseline: hapT.Label, BaselineValue: hapT.CPUus, Ratio: bench.Num(bench.Median(det.CPURatios)),
			Note: "median of the per-round ratios: " + bench.JoinFloats(det.CPURatios, "%.3f") + "; shoal's own process: " + bench.FmtNum(bench.Num(bench.Median(finite(shoalT.Control)))) + " µs per request",
		}, {
			Name: "(e) minimal + shoal's retry-on: CPU per keep-alive request (efficiency: (b)'s CPU over (e)'s)", Unit: "µs", Value: retryT.CPUus,
			Baseline: hapT.Label, BaselineValue: hapT.CPUus, Ratio: bench.Num(bench.Median(det.RetryCPURatios)),
			Note: "per-round ratios: " + bench.JoinFloats(det.RetryCPURatios, "%.3f") + "; (e) - (b) per round, µs: " + bench.JoinFloats(det.RetryCostMicros, "%.1f") +
				" (median " + bench.FmtNum(bench.Num(bench.Median(det.RetryCostMicros))) + ")",
		}, {
			Name: "(e) minimal + shoal's retry-on: TLS req/s, keep-alive", Unit: "req/s", Value: retryT.RPS,
			Baseline: hapT.Label, BaselineValue: hapT.RPS, Ratio: bench.Num(bench.Median(det.RetryRPSRatios)),
			Note: "median of the per-round ratios: " + bench.JoinFloats(det.RetryRPSRatios, "%.3f"),
		}, {
			Name: "(d) nginx CPU per keep-alive request", Unit: "µs", Value: nginxT.CPUus,
			Baseline: hapT.Label, BaselineValue: hapT.CPUus, Ratio: bench.RatioOf(nginxT.CPUus, hapT.CPUus),
		},
	}
	rep.Settings = []bench.Setting{
		{Name: "load", Value: fmt.Sprintf("keep-alive: wrk -t1 -c%d -d%v --latency https://127.0.0.1:PORT/; handshakes: %d Go TLS 1.3 clients, a connection and one GET (Connection: close) each, full (no session cache) then resumed (each client offers the newest ticket it got); %d rounds; in a round each mode runs over the targets in an order and back (%v each way), the order rotating between rounds", *conns, half, *conns, *rounds, half)},
		{Name: "cpu", Value: "utime+stime of the proxy's processes (/proc/PID/stat) over the keep-alive runs, per request: HAProxy's one process for (b), the HAProxy worker and master shoal runs for (c), nginx's master and workers for (d)"},
		{Name: "certificate", Value: "one self-signed ECDSA P-256 certificate for all three; TLS 1.3 and its default suites (each server's OpenSSL defaults; none sets ciphers)"},
		{Name: "(b)", Value: "bind ssl crt FILE alpn h2,http/1.1; HAProxy's defaults otherwise (nbthread = CPUs, session cache 20000, tickets with a key per process)"},
		{Name: "(c)", Value: "frontends: [{tls: {certificates: [...]}}]: bind ssl crt-list alpn h2,http/1.1 ssl-min-ver TLSv1.2 tls-ticket-keys (rotated hourly)" + extraNote(*extra+" "+*extraTLS+" "+*extraGroup)},
		{Name: "(e)", Value: "(b) plus `" + strings.Join(retryDefaults, "; ") + "` in defaults and `" + strings.Join(retryFrontend, "; ") + "` in the frontend, as shoal wrote them; keep-alive runs only"},
		{Name: "(d)", Value: "worker_processes auto; listen ssl http2; ssl_protocols TLSv1.2 TLSv1.3; upstream keepalive 32; access_log off"},
	}
	var md strings.Builder
	md.WriteString("| target | req/s keep-alive | CPU µs/request | full handshakes/s | resumed handshakes/s | resumed | errors | req/s per round | CPU per round | full per round | resumed per round |\n|---|---:|---:|---:|---:|---:|---:|---|---|---|---|\n")
	for _, t := range det.Targets {
		if t.Status != "ok" {
			fmt.Fprintf(&md, "| %s | %s | | | | | | | | | |\n", t.Label, t.Status)
			continue
		}
		var ka, full, res []float64
		for _, k := range t.KeepAlive {
			ka = append(ka, k.RPS)
		}
		for i := range t.Full {
			full, res = append(full, t.Full[i].RPS), append(res, t.Resumed[i].RPS)
		}
		share := "-"
		if t.ResShare != nil {
			share = fmt.Sprintf("%.0f %%", 100**t.ResShare)
		}
		fmt.Fprintf(&md, "| %s | %s | %s | %s | %s | %s | %d | %s | %s | %s | %s |\n", t.Label, bench.FmtNum(t.RPS), bench.FmtNum(t.CPUus), bench.FmtNum(t.FullHPS), bench.FmtNum(t.ResHPS), share, t.Errors,
			bench.JoinFloats(ka, "%.0f"), bench.JoinFloats(t.CPU, "%.1f"), bench.JoinFloats(full, "%.0f"), bench.JoinFloats(res, "%.0f"))
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

// startMinimalTLSHAProxy runs the hand-written config as name, with more
// lines for the defaults and the frontend (none for (b)).
func startMinimalTLSHAProxy(ctx context.Context, env *bench.Env, name, hap, cert, key string, ports []int, defaults, frontend []string, t *tlsTarget) error {
	port, err := env.FreePort()
	if err != nil {
		return err
	}
	pemFile := filepath.Join(env.Work, name+".pem")
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
	sock := filepath.Join(env.Work, name+".sock")
	indent := func(lines []string) string {
		var b strings.Builder
		for _, l := range lines {
			b.WriteString("    " + l + "\n")
		}
		return b.String()
	}
	cfg := fmt.Sprintf(`global
    stats socket %s mode 600 level admin
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
%s
frontend fe
    bind 127.0.0.1:%d ssl crt %s alpn h2,http/1.1
%s    default_backend be

backend be
    balance roundrobin
    server s1 127.0.0.1:%d
    server s2 127.0.0.1:%d
`, sock, indent(defaults), port, pemFile, indent(frontend), ports[0], ports[1])
	t.URL = fmt.Sprintf("https://127.0.0.1:%d/", port)
	p, err := bench.StartHAProxyConfig(ctx, env, hap, name, cfg, t.URL)
	if err != nil {
		return err
	}
	t.proxy = func() []int { return []int{p.Pid()} }
	t.Status = "ok"
	return nil
}

// instancePorts returns the ports of group's instances in shoal.
func instancePorts(ctx context.Context, sh *bench.Shoal, group string) ([]int, error) {
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

func startShoalTLS(ctx context.Context, env *bench.Env, bin, backend, cert, key, extra, extraTLS, extraGroup string, t *tlsTarget) (*bench.Shoal, error) {
	if extraGroup != "" {
		extraGroup = "    " + extraGroup + "\n"
	}
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
%s%s
`, port, cert, key, extraTLS, stateDir, backend, extraGroup, extra)
	}
	env.Log.Info("starting shoal")
	sh, err := env.StartShoalOn(bin, render)
	if err != nil {
		return nil, err
	}
	t.URL = "https://" + sh.Cfg.Frontends[0].Bind[0] + "/"
	// HAProxy's master and worker are below shoal, beside its instances.
	t.proxy = func() []int { return processesNamed(sh.Proc.Pid(), "haproxy") }
	t.control = func() []int { return []int{sh.Proc.Pid()} }
	if err := sh.WaitInService(ctx, "web", 2, 60*time.Second, bench.PollEvery); err != nil {
		return nil, fmt.Errorf("shoal did not get 2 instances in service: %w", err)
	}
	if err := bench.WaitHTTP(ctx, t.URL, sh.Proc, 10*time.Second); err != nil {
		return nil, err
	}
	t.Status = "ok"
	return sh, nil
}

func startNginx(ctx context.Context, env *bench.Env, cert, key string, ports []int, t *tlsTarget) error {
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
	t.proxy = func() []int { return append([]int{p.Pid()}, bench.Descendants(p.Pid())...) }
	if err := bench.WaitHTTP(ctx, t.URL, p, 10*time.Second); err != nil {
		return fmt.Errorf("nginx did not start: %v: %s", err, env.LogTail("nginx", 3))
	}
	t.Status = "ok"
	return nil
}

// cpuTicks sums utime+stime of the processes pids lists: 0 when nothing is
// read (no list), NaN when a process cannot be read (it exited mid-run), so
// that such a run shows no figure rather than a wrong one.
func cpuTicks(pids func() []int) float64 {
	if pids == nil {
		return 0
	}
	ps := pids()
	if len(ps) == 0 {
		return math.NaN()
	}
	var sum int64
	for _, p := range ps {
		t, err := bench.CPUTicks(p)
		if err != nil {
			return math.NaN()
		}
		sum += t
	}
	return float64(sum)
}

// perRequestMicros turns {requests, CPU ticks} into µs per request.
func perRequestMicros(v [2]float64) float64 {
	if v[0] <= 0 {
		return math.NaN()
	}
	return v[1] / bench.ClockTicks / v[0] * 1e6
}

// processesNamed returns the processes below pid whose command is comm.
func processesNamed(pid int, comm string) []int {
	var out []int
	for _, p := range bench.Descendants(pid) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm")
		if err == nil && strings.TrimSpace(string(b)) == comm {
			out = append(out, p)
		}
	}
	return out
}

// meanSample merges the runs of one round: mean rates and latencies,
// summed errors.
func meanSample(ss []bench.Sample) bench.Sample {
	var m bench.Sample
	for _, s := range ss {
		m.RPS += s.RPS / float64(len(ss))
		m.P50ms += s.P50ms / float64(len(ss))
		m.P99ms += s.P99ms / float64(len(ss))
		m.Errors += s.Errors
	}
	return m
}

func meanHandshakes(ss []HandshakeSample) HandshakeSample {
	m := HandshakeSample{}
	plain := make([]bench.Sample, len(ss))
	for i, s := range ss {
		plain[i] = s.Sample
		m.Resumed += s.Resumed / float64(len(ss))
		if m.FirstError == "" {
			m.FirstError = s.FirstError
		}
	}
	m.Sample = meanSample(plain)
	return m
}

// finite drops the runs whose CPU could not be read.
func finite(vs []float64) []float64 {
	return slices.DeleteFunc(slices.Clone(vs), func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) })
}

// retryLines reads shoal's layer-7 retry-on line and its rule for
// non-idempotent methods from the haproxy.cfg shoal wrote: a group's backend
// has them with retries: idempotent, which is not a local group's default
// (shoal-bench throughput's (e) prices it on shoal itself).
func retryLines(cfg string) (defaults, frontend []string, err error) {
	b, err := os.ReadFile(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("shoal's HAProxy config: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "retry-on ") && line != "retry-on conn-failure" && defaults == nil:
			defaults = []string{line}
		case strings.HasPrefix(line, "http-request disable-l7-retry if !{ method") && frontend == nil:
			frontend = []string{line}
		}
	}
	if defaults == nil || frontend == nil {
		return nil, nil, fmt.Errorf("not measured: group web has retries: connect (a local group's default), so shoal renders no layer-7 retry-on; pass -shoal-group-yaml 'retries: idempotent' to measure them, or see shoal-bench throughput's (e)")
	}
	return defaults, frontend, nil
}
