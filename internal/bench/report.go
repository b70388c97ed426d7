package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Report is one benchmark run: what ran where, and its figures.
type Report struct {
	Name    string    `json:"name"`
	Date    time.Time `json:"date"`
	Smoke   bool      `json:"smoke"` // a harness check with tiny settings, not a measurement
	Machine Machine   `json:"machine"`
	// Settings are the knobs of the run, as "name: value" lines in Markdown.
	Settings []Setting `json:"settings"`
	// Figures are the headline numbers, each with its same-run baseline.
	Figures []Figure `json:"figures"`
	// Details is the subcommand's raw data (rounds, samples, timelines).
	Details any `json:"details,omitempty"`
	// Markdown is extra sections for the .md report, after the figures.
	Markdown string `json:"-"`
}

// Setting is one knob of a run.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Figure is a measured number next to what it is compared with in the same
// run. Baseline is empty for an absolute figure (its goal is then absolute).
type Figure struct {
	Name          string   `json:"name"`
	Unit          string   `json:"unit"`
	Value         *float64 `json:"value"` // nil: not measured (Note says why)
	Baseline      string   `json:"baseline,omitempty"`
	BaselineValue *float64 `json:"baseline_value,omitempty"`
	// Ratio is Value/BaselineValue unless the benchmark computes it
	// otherwise (e.g. the median of paired per-round ratios); Note says how.
	Ratio   *float64 `json:"ratio,omitempty"`
	Goal    string   `json:"goal,omitempty"`
	Verdict string   `json:"verdict,omitempty"` // PASS, FAIL, or empty without a goal
	Note    string   `json:"note,omitempty"`
}

// Verdict returns PASS or FAIL for ok, or "" when v is nil.
func Verdict(v *float64, ok func(float64) bool) string {
	switch {
	case v == nil:
		return ""
	case ok(*v):
		return "PASS"
	default:
		return "FAIL"
	}
}

// markdown renders the report.
func (r *Report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# shoal bench: %s, %s\n\n", r.Name, r.Date.UTC().Format("2006-01-02 15:04:05 UTC"))
	if r.Smoke {
		b.WriteString("**SMOKE RUN: tiny settings to prove the harness works. These numbers are not a measurement.**\n\n")
	}
	m := r.Machine
	fmt.Fprintf(&b, "- machine: %d CPUs, %s, %s, %s, commit %s\n", m.NProc, m.Kernel, m.HAProxy, m.Go, m.Commit)
	fmt.Fprintf(&b, "- load average (1/5/15 min): %s before, %s after\n", m.LoadBefore, m.LoadAfter)
	for _, s := range r.Settings {
		fmt.Fprintf(&b, "- %s: %s\n", s.Name, s.Value)
	}
	b.WriteString("\n| figure | value | baseline (same run) | ratio | goal | verdict |\n|---|---:|---|---:|---|---|\n")
	for _, f := range r.Figures {
		val := FmtNum(f.Value)
		if f.Value != nil && f.Unit != "" {
			val += " " + f.Unit
		}
		base := "-"
		if f.Baseline != "" {
			base = f.Baseline + ": " + FmtNum(f.BaselineValue)
			if f.BaselineValue != nil && f.Unit != "" {
				base += " " + f.Unit
			}
		}
		ratio := "-"
		if f.Ratio != nil {
			ratio = fmt.Sprintf("%.3f", *f.Ratio)
		}
		verdict := f.Verdict
		if verdict != "" {
			verdict = "**" + verdict + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", f.Name, val, base, ratio, f.Goal, verdict)
	}
	var notes []string
	for _, f := range r.Figures {
		if f.Note != "" {
			notes = append(notes, fmt.Sprintf("- %s: %s", f.Name, f.Note))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	if r.Markdown != "" {
		b.WriteString("\n" + strings.TrimSpace(r.Markdown) + "\n")
	}
	return b.String()
}

// Write writes DIR/TIMESTAMP-NAME.json and .md (with "-smoke" before the
// extension for a smoke run) and returns their paths. Each file is written
// under a temporary name and renamed, so a failure leaves no half report.
// A measurement (not a smoke run) then removes the older reports of the
// same benchmark, with their plots: bench/results keeps the latest of
// each, and git history the others.
func (r *Report) Write(dir string) (mdPath, jsonPath string, err error) {
	if r.Date.IsZero() {
		r.Date = time.Now()
	}
	r.Machine.LoadAfter = loadavg()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("report: %w", err)
	}
	base := filepath.Join(dir, r.Date.UTC().Format("20060102-150405")+"-"+r.Name)
	if r.Smoke {
		base += "-smoke"
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("report: %w", err)
	}
	files := []struct {
		path string
		data []byte
	}{{base + ".json", append(js, '\n')}, {base + ".md", []byte(r.markdown())}}
	for _, f := range files {
		if err := os.WriteFile(f.path+".tmp", f.data, 0o644); err != nil {
			return "", "", fmt.Errorf("report: %w", err)
		}
	}
	for _, f := range files {
		if err := os.Rename(f.path+".tmp", f.path); err != nil {
			return "", "", fmt.Errorf("report: %w", err)
		}
	}
	if !r.Smoke {
		if err := pruneOlder(dir, r.Name, filepath.Base(base)); err != nil {
			return "", "", fmt.Errorf("report: %w", err)
		}
	}
	return base + ".md", base + ".json", nil
}

// pruneOlder removes DIR's reports of benchmark name other than latest
// (TIMESTAMP-NAME): TIMESTAMP-NAME.json, .md and TIMESTAMP-NAME-*.svg.
func pruneOlder(dir, name, latest string) error {
	report := regexp.MustCompile(`^(\d{8}-\d{6}-` + regexp.QuoteMeta(name) + `)(\.json|\.md|-[a-z0-9-]+\.svg)$`)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		m := report.FindStringSubmatch(e.Name())
		if m == nil || m[1] == latest {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Machine describes where a benchmark ran.
type Machine struct {
	NProc      int    `json:"nproc"`
	Kernel     string `json:"kernel"`
	HAProxy    string `json:"haproxy"`
	Go         string `json:"go"`
	Commit     string `json:"commit"`
	LoadBefore string `json:"loadavg_before"`
	LoadAfter  string `json:"loadavg_after,omitempty"`
}

// loadavg returns the 1, 5 and 15 minute load averages; other work on the
// machine skews every figure, so reports show how busy it was.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}

func NewMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), Go: runtime.Version(), LoadBefore: loadavg(), HAProxy: "not installed", Commit: "unknown"}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(data))
	}
	if p := HAProxyPath(); p != "" {
		if out, err := exec.Command(p, "-v").Output(); err == nil {
			m.HAProxy = strings.SplitN(string(out), "\n", 2)[0]
		}
	}
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
	}
	return m
}
