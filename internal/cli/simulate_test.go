package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTrace writes a small per-minute trace: three hours, busy in the middle.
func writeTrace(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("timestamp_utc,requests\n")
	for m := 0; m < 180; m++ {
		n := 600
		if m >= 60 && m < 120 {
			n = 6000
		}
		fmt.Fprintf(&b, "1998-06-30T%02d:%02d:00Z,%d\n", 8+m/60, m%60, n)
	}
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicySimulate(t *testing.T) {
	tr := writeTrace(t)
	svg := filepath.Join(t.TempDir(), "plot.svg")
	var out, errb bytes.Buffer
	code := Main([]string{"policy", "simulate", "--trace", tr, "--from", "1998-06-30T08:00", "--to", "1998-06-30T11:00",
		"--policy", "../../examples/recommended.yaml", "--static", "--slo", "200ms", "--svg", svg, "-o", "json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc struct {
		StaticAtPeak int `json:"static_at_peak"`
		Policies     []struct {
			Policy           string  `json:"policy"`
			InstanceSeconds  float64 `json:"instance_seconds"`
			ViolationSeconds float64 `json:"slo_violation_seconds"`
			ScaleEvents      int     `json:"scale_events"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if doc.StaticAtPeak != 5 || len(doc.Policies) != 2 || doc.Policies[0].Policy != "static-5" || doc.Policies[1].Policy != "recommended" {
		t.Fatalf("got %+v, want static-5 and recommended", doc)
	}
	static, rec := doc.Policies[0], doc.Policies[1]
	if static.InstanceSeconds != 5*3*3600 || rec.ScaleEvents < 2 || rec.InstanceSeconds >= static.InstanceSeconds {
		t.Errorf("static %+v, recommended %+v: want 54000 instance-seconds static, fewer and >= 2 scale events for the policy", static, rec)
	}
	if data, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(data, []byte("<svg")) {
		t.Errorf("plot: %v, %.40q", err, data)
	}
}

func TestPolicySimulateBadInput(t *testing.T) {
	tr := writeTrace(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("listen: 127.0.0.1:8080\ngroups:\n  - name: web\n    max_size: 3\n    template: {command: [app]}\n    autoscale:\n      predictive: {mode: sometimes}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--from", "yesterday"}, "--from:"},
		{[]string{"--from", "1998-06-30T08:00", "--to", "1998-07-30T08:00"}, "not inside the trace"},
		{[]string{"--capacity", "0"}, `--capacity "0": want requests/s > 0 or "measured"`},
		{[]string{"--capacity", "lots"}, `--capacity "lots": want requests/s > 0 or "measured"`},
		{[]string{"--slo", "0s"}, "--slo 0s: want > 0"},
		{[]string{"--start-delay", "-1s"}, "--start-delay -1s: want >= 0"},
		{[]string{"--scale", "-0.5"}, "--scale -0.5: want >= 0"},
		{[]string{"--scale", "+Inf"}, "--scale +Inf: want >= 0 and finite"},
		{[]string{"--scale", "1e308"}, "needs more than 10000 instances"},
		{[]string{"--saturated-cpu", "0"}, "--saturated-cpu 0: want a CPU % above 0, at most 100"},
		{[]string{"--saturated-cpu", "120"}, "--saturated-cpu 120: want a CPU % above 0, at most 100"},
		{[]string{"--service-cv", "-1"}, "service time CV -1: want >= 0"},
		{[]string{"--capacity", "measured", "--measure-window", "0s"}, "--measure-window must be > 0"},
		{[]string{"--provider", "rack=4"}, `--provider "rack=4": want NAME=CAPACITY/DELAY`},
		{[]string{"--provider", "rack=-1/5s"}, `--provider "rack=-1/5s": want NAME=CAPACITY/DELAY`},
		{[]string{"--policy", bad}, "bad.yaml:7:26: groups[0].autoscale.predictive.mode: must be forecast_only or forecast_and_scale"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		args := append([]string{"policy", "simulate", "--trace", tr, "--to", "1998-06-30T09:00", "--policy", "../../examples/recommended.yaml"}, tt.args...)
		if code := Main(args, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tt.args, code, errb.String(), tt.want)
		}
	}
}

// TestPolicySimulateProviders: with --provider the simulated group fills
// a provider of 2 that starts in 5 s, then one of no bound that takes
// 3m30s, and says where its instance-seconds ran.
func TestPolicySimulateProviders(t *testing.T) {
	tr := writeTrace(t)
	var out, errb bytes.Buffer
	code := Main([]string{"policy", "simulate", "--trace", tr, "--from", "1998-06-30T08:00", "--to", "1998-06-30T11:00",
		"--policy", "../../examples/recommended.yaml", "--provider", "rack=2/5s", "--provider", "sakura=0/3m30s", "-o", "json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var doc struct {
		Providers []struct{ Name string } `json:"providers"`
		Policies  []struct {
			InstanceSeconds float64            `json:"instance_seconds"`
			ProviderSeconds map[string]float64 `json:"provider_seconds"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(doc.Providers) != 2 || len(doc.Policies) != 1 {
		t.Fatalf("got %s", out.String())
	}
	p := doc.Policies[0]
	if p.ProviderSeconds["rack"] == 0 || p.ProviderSeconds["sakura"] == 0 || p.ProviderSeconds["rack"]+p.ProviderSeconds["sakura"] != p.InstanceSeconds {
		t.Errorf("instance-seconds %v by provider %v: want both, adding up", p.InstanceSeconds, p.ProviderSeconds)
	}
}
