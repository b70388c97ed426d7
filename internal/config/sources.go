package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"
	"github.com/itchyny/gojq"
	"gopkg.in/yaml.v3"
)

// Source is a metric read from outside shoal (metrics.sources): a
// Prometheus query, a command or an HTTP endpoint's JSON, read once per
// Interval by package source and usable by name, or in a formula, wherever
// a policy names a metric.
type Source struct {
	// Name is how policies and formulas refer to the source.
	Name string `yaml:"name" required:"true"`
	// Exactly one of Prometheus, Command and HTTP is set.
	Prometheus *PromSource `yaml:"prometheus"`
	// Command is an argv (no shell) printing a number, {"value": N}, or
	// {"instances": {"NAME": N, ...}} for one value per instance.
	Command []string    `yaml:"command"`
	HTTP    *HTTPSource `yaml:"http"`
	// Interval is how often the source is read; Timeout bounds one read.
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	// MaxAge is how old the newest value may be before a policy treats the
	// source as missing (default: three intervals).
	MaxAge time.Duration `yaml:"max_age"`
	// OnMissing is what a policy does while the source is missing or stale:
	// SourceHold, SourceUp or SourceDown.
	OnMissing string `yaml:"on_missing"`
}

// PromSource is an instant PromQL query against a Prometheus server.
type PromSource struct {
	// URL is the server's base URL (http://127.0.0.1:9090).
	URL string `yaml:"url" required:"true"`
	// Query is instant PromQL giving one sample, or one per instance (an
	// instance label naming shoal's instances by name, host:port or host).
	Query string    `yaml:"query" required:"true"`
	Auth  *PromAuth `yaml:"auth"`
	// CAFile verifies an https server's certificate.
	CAFile string `yaml:"ca_file"`
}

// PromAuth authenticates to Prometheus; the secrets are read from files at
// each read, never stored in the config or logged.
type PromAuth struct {
	// BearerFile holds a bearer token; BearerEnv names the environment
	// variable holding it instead.
	BearerFile string     `yaml:"bearer_file"`
	BearerEnv  string     `yaml:"bearer_env"`
	Basic      *PromBasic `yaml:"basic"`
}

// PromBasic is HTTP basic authentication with the password in a file.
type PromBasic struct {
	// Username logs in with the password read from PasswordFile, or from
	// the environment variable PasswordEnv names.
	Username     string `yaml:"username" required:"true"`
	PasswordFile string `yaml:"password_file"`
	PasswordEnv  string `yaml:"password_env"`
}

// HTTPSource reads a number from an endpoint's JSON.
type HTTPSource struct {
	// URL is GET for JSON at each read.
	URL string `yaml:"url" required:"true"`
	// JSONPath is a jq expression (gojq) giving a number, or an object of
	// instance → number.
	JSONPath string `yaml:"json_path" required:"true"`
}

// What a policy does while a source it reads is missing or stale.
const (
	SourceHold = "hold" // nothing: the size holds
	SourceUp   = "up"   // one step up
	SourceDown = "down" // one step down
)

// defaultSource holds the defaults of a source's keys.
var defaultSource = Source{Interval: 10 * time.Second, Timeout: 5 * time.Second, OnMissing: SourceHold}

// Bounds of a source's timings: a read more often than once a second would
// load a Prometheus server for nothing, a timeout beyond a minute hides a
// dead one.
const (
	minSourceInterval = time.Second
	maxSourceInterval = 10 * time.Minute
	maxSourceTimeout  = time.Minute
)

// MaxAgeOf is s's staleness bound: MaxAge, or three intervals.
func (s Source) MaxAgeOf() time.Duration {
	if s.MaxAge > 0 {
		return s.MaxAge
	}
	return 3 * s.Interval
}

// Kind names which reader s uses.
func (s Source) Kind() string {
	switch {
	case s.Prometheus != nil:
		return "prometheus"
	case s.HTTP != nil:
		return "http"
	}
	return "command"
}

func (d *decoder) sources(n *yaml.Node, path string, interval time.Duration) []Source {
	if n == nil {
		return nil
	}
	items, ok := d.sequence(n, path, "a list of sources")
	if !ok {
		return nil
	}
	var out []Source
	seen := map[string]*yaml.Node{}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		s, nn, ok := d.source(item, p, interval)
		if !ok {
			continue
		}
		if first, dup := seen[s.Name]; dup {
			d.errorf(nn, p+".name", "duplicate source %q (first at line %d)", s.Name, first.Line)
			continue
		}
		seen[s.Name] = nn
		out = append(out, s)
	}
	return out
}

func (d *decoder) source(item *yaml.Node, path string, interval time.Duration) (Source, *yaml.Node, bool) {
	f := section[Source](d, item, path)
	if f.node == nil {
		return Source{}, nil, false
	}
	s := defaultSource
	name, nn := f.str("name", "")
	switch {
	case nn == nil:
		return Source{}, nil, false
	case !bareMetric.MatchString(name) || strings.Contains(name, "."):
		d.errorf(nn, f.field("name"), "must be a letter followed by letters, digits and _ (a formula names it), got %q", name)
		return Source{}, nil, false
	case slices.Contains(MetricPaths, name) || slices.Contains(formulaRoots(), name):
		d.errorf(nn, f.field("name"), "%q is one of shoal's own metrics; choose another name", name)
		return Source{}, nil, false
	}
	s.Name = name
	kinds := 0
	for _, k := range []string{"prometheus", "command", "http"} {
		if f.has(k) {
			kinds++
		}
	}
	if kinds != 1 {
		d.errorf(f.node, path, "needs exactly one of prometheus, command and http, got %d", kinds)
	}
	if pn := f.get("prometheus"); pn != nil {
		s.Prometheus = d.promSource(pn, f.field("prometheus"))
	}
	if cn := f.get("command"); cn != nil {
		for _, it := range f.strings("command") {
			s.Command = append(s.Command, it.val)
		}
		if len(s.Command) == 0 || s.Command[0] == "" {
			d.errorf(cn, f.field("command"), "must be an argv such as [/usr/local/bin/queue-depth, --json]")
		}
	}
	if hn := f.get("http"); hn != nil {
		s.HTTP = d.httpSource(hn, f.field("http"))
	}
	s.Interval = d.within(f, "interval", s.Interval, max(minSourceInterval, interval), maxSourceInterval)
	s.Timeout = d.within(f, "timeout", s.Timeout, 100*time.Millisecond, maxSourceTimeout)
	if tn := f.get("timeout"); tn != nil && s.Timeout > s.Interval {
		d.errorf(tn, f.field("timeout"), "must be at most interval (%s), got %s", s.Interval, s.Timeout)
	}
	if v, vn := f.duration("max_age", 0); vn != nil {
		if v < s.Interval {
			d.errorf(vn, f.field("max_age"), "must be at least interval (%s), got %s", s.Interval, v)
		}
		s.MaxAge = v
	}
	if m, mn := f.str("on_missing", s.OnMissing); mn != nil {
		if m != SourceHold && m != SourceUp && m != SourceDown {
			d.errorf(mn, f.field("on_missing"), "must be %s, %s or %s, got %q", SourceHold, SourceUp, SourceDown, m)
		}
		s.OnMissing = m
	}
	return s, nn, true
}

func (d *decoder) promSource(n *yaml.Node, path string) *PromSource {
	f := section[PromSource](d, n, path)
	p := &PromSource{}
	var un *yaml.Node
	p.URL, un = f.str("url", "")
	if un != nil {
		d.checkSourceURL(un, f.field("url"), p.URL)
	}
	var qn *yaml.Node
	p.Query, qn = f.str("query", "")
	if qn != nil && strings.TrimSpace(p.Query) == "" {
		d.errorf(qn, f.field("query"), "must not be empty")
	}
	if an := f.get("auth"); an != nil {
		af := section[PromAuth](d, an, f.field("auth"))
		p.Auth = &PromAuth{}
		p.Auth.BearerFile = d.secretFile(af, "bearer_file")
		p.Auth.BearerEnv = d.envName(af, "bearer_env")
		if bn := af.get("basic"); bn != nil {
			bf := section[PromBasic](d, bn, af.field("basic"))
			b := &PromBasic{}
			b.Username, _ = bf.str("username", "")
			b.PasswordFile = d.secretFile(bf, "password_file")
			b.PasswordEnv = d.envName(bf, "password_env")
			if bf.node != nil && (bf.has("password_file") == bf.has("password_env")) {
				d.errorf(bn, af.field("basic"), "needs exactly one of password_file and password_env")
			}
			p.Auth.Basic = b
		}
		if n := btoi(af.has("bearer_file")) + btoi(af.has("bearer_env")) + btoi(af.has("basic")); n != 1 {
			d.errorf(an, f.field("auth"), "needs exactly one of bearer_file, bearer_env and basic")
		}
	}
	if c, cn := f.str("ca_file", ""); cn != nil {
		p.CAFile = abs(d.dir, c)
		if _, err := readRegular(p.CAFile, maxPEMFile); err != nil {
			d.errorf(cn, f.field("ca_file"), "must be a readable file: %v", err)
		}
	}
	return p
}

// secretFile reads the path of a file holding a secret: only the path is
// kept; the secret is read when used.
func (d *decoder) secretFile(f *fields, key string) string {
	p, pn := f.str(key, "")
	if pn == nil {
		return ""
	}
	p = abs(d.dir, p)
	if _, err := readRegular(p, maxSecretFile); err != nil {
		d.errorf(pn, f.field(key), "must be a readable file: %v", err)
	}
	return p
}

// envName reads the name of an environment variable holding a secret:
// only the name is kept; the secret is read when used.
func (d *decoder) envName(f *fields, key string) string {
	v, vn := f.str(key, "")
	if vn != nil && !envNameRE.MatchString(v) {
		d.errorf(vn, f.field(key), "must be an environment variable's name such as PROM_TOKEN, got %q", truncate(v))
	}
	return v
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (d *decoder) httpSource(n *yaml.Node, path string) *HTTPSource {
	f := section[HTTPSource](d, n, path)
	h := &HTTPSource{}
	var un, jn *yaml.Node
	h.URL, un = f.str("url", "")
	if un != nil {
		d.checkSourceURL(un, f.field("url"), h.URL)
	}
	h.JSONPath, jn = f.str("json_path", "")
	if jn != nil {
		if _, err := gojq.Parse(h.JSONPath); err != nil {
			d.errorf(jn, f.field("json_path"), "must be a jq expression: %v", err)
		}
	}
	return h
}

func (d *decoder) checkSourceURL(n *yaml.Node, field, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		d.errorf(n, field, "must be an http:// or https:// URL, got %q", truncate(s))
		return
	}
	if u.User != nil {
		// A password in the URL would be shown by config show and logged.
		d.errorf(n, field, "must not hold credentials; use auth with a file")
	}
}

// formulaRoots are the first words of shoal's dotted metrics ("cpu" of
// "cpu.avg"), which a formula reads as a record.
func formulaRoots() []string {
	var roots []string
	for _, m := range MetricPaths {
		if r, _, ok := strings.Cut(m, "."); ok && !slices.Contains(roots, r) {
			roots = append(roots, r)
		}
	}
	return roots
}

// Formula is a compiled metric formula (expr-lang): arithmetic and
// functions (max, min, abs, ...) over sources and shoal's own metrics, which
// it names as policies do (cpu.avg, queue, size).
type Formula struct {
	Src string
	// Inputs are the metrics it reads, as paths, in first-use order.
	Inputs []string
	prog   *vm.Program
}

// formulaTypes are the record types of dotted metrics, by root, each field
// tagged with the metric's last word.
var formulaTypes = func() map[string]reflect.Type {
	fields := map[string][]reflect.StructField{}
	for _, m := range MetricPaths {
		r, leaf, ok := strings.Cut(m, ".")
		if !ok {
			continue
		}
		fields[r] = append(fields[r], reflect.StructField{
			Name: fmt.Sprintf("F%d", len(fields[r])), Type: reflect.TypeFor[float64](), Tag: reflect.StructTag(`expr:"` + leaf + `"`)})
	}
	types := map[string]reflect.Type{}
	for r, fs := range fields {
		types[r] = reflect.StructOf(fs)
	}
	return types
}()

// formulaEnv is the environment a formula is checked and run in: every
// plain metric and source a float64, every dotted root a record.
func formulaEnv(sources []string, vals map[string]float64) map[string]any {
	env := map[string]any{}
	for _, m := range MetricPaths {
		if !strings.Contains(m, ".") {
			env[m] = vals[m]
		}
	}
	for _, s := range sources {
		env[s] = vals[s]
	}
	for r, t := range formulaTypes {
		v := reflect.New(t).Elem()
		for i := range t.NumField() {
			v.Field(i).SetFloat(vals[r+"."+t.Field(i).Tag.Get("expr")])
		}
		env[r] = v.Interface()
	}
	return env
}

// FormulaError is a formula's error at Offset bytes into its text.
type FormulaError struct {
	Offset int
	Msg    string
}

func (e *FormulaError) Error() string { return e.Msg }

// CompileFormula compiles src over shoal's metrics and the named sources; it
// must give a number.
func CompileFormula(src string, sources []string) (*Formula, error) {
	prog, err := expr.Compile(src, expr.Env(formulaEnv(sources, nil)), expr.AsFloat64())
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			msg := fe.Message
			if _, field, ok := strings.Cut(msg, " has no field "); ok {
				msg = "unknown metric field " + field
			}
			if strings.HasPrefix(msg, "unknown name ") {
				msg += "; known: the sources (" + strings.Join(sources, ", ") + ") and " + strings.Join(MetricPaths, ", ")
			}
			return nil, &FormulaError{Offset: fe.From, Msg: msg}
		}
		return nil, &FormulaError{Msg: err.Error()}
	}
	f := &Formula{Src: src, prog: prog}
	node := prog.Node()
	ast.Walk(&node, inputs{f: f, sources: sources})
	return f, nil
}

// inputs collects the metrics a formula reads.
type inputs struct {
	f       *Formula
	sources []string
}

func (v inputs) Visit(n *ast.Node) {
	var path string
	switch n := (*n).(type) {
	case *ast.IdentifierNode:
		if slices.Contains(v.sources, n.Value) || slices.Contains(MetricPaths, n.Value) {
			path = n.Value
		}
	case *ast.MemberNode:
		id, ok1 := n.Node.(*ast.IdentifierNode)
		prop, ok2 := n.Property.(*ast.StringNode)
		if ok1 && ok2 && slices.Contains(MetricPaths, id.Value+"."+prop.Value) {
			path = id.Value + "." + prop.Value
		}
	}
	if path != "" && !slices.Contains(v.f.Inputs, path) {
		v.f.Inputs = append(v.f.Inputs, path)
	}
}

// Eval runs f over vals, the values of its inputs by path.
func (f *Formula) Eval(sources []string, vals map[string]float64) (float64, error) {
	out, err := expr.Run(f.prog, formulaEnv(sources, vals))
	if err != nil {
		return 0, fmt.Errorf("formula %q: %w", f.Src, err)
	}
	v, _ := out.(float64)
	return v, nil
}

// IsFormula reports whether a policy's metric is a formula rather than one
// name.
func IsFormula(metric string) bool { return !bareMetric.MatchString(metric) }

// bareMetric is one metric's name: a source's, or one of shoal's (cpu.avg).
var bareMetric = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?$`)

// metricOrFormula checks a policy's metric m at node n: one of shoal's
// metrics, a source, or a formula over both; errors point into the formula.
func (d *decoder) metricOrFormula(n *yaml.Node, field, m string) bool {
	if slices.Contains(MetricPaths, m) || slices.ContainsFunc(d.sourceList, func(s Source) bool { return s.Name == m }) {
		return true
	}
	names := make([]string, len(d.sourceList))
	for i, s := range d.sourceList {
		names[i] = s.Name
	}
	if !IsFormula(m) {
		d.errorf(n, field, "unknown metric %q; known: %s", m, strings.Join(append(names, MetricPaths...), ", "))
		return false
	}
	if _, err := CompileFormula(m, names); err != nil {
		var fe *FormulaError
		col := n.Column
		if errors.As(err, &fe) {
			col += fe.Offset
			if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
				col++
			}
		}
		d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Col: col, Field: field,
			Msg: fmt.Sprintf("metric %q: %v", truncate(m), err)})
		return false
	}
	return true
}

// ReadSecretEnv reads a secret from the environment variable name; what
// failed names the variable, never a value.
func ReadSecretEnv(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("environment variable %s is empty or unset", name)
	}
	return v, nil
}

// ReadSecret reads a secret file for a request, trimming one trailing
// newline; what failed names the file, never its content.
func ReadSecret(path string) (string, error) {
	b, err := readRegular(path, maxSecretFile)
	if err != nil {
		return "", fmt.Errorf("reading secret file: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
