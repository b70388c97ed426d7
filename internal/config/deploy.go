package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shoal-lb/shoal/internal/template"
)

// Deploy paces a group's rolling deploy: MaxSurge new instances start at a
// time beyond the desired size, at most MaxUnavailable of the desired size
// may be out of service, every new instance must stay in service MinReady
// before an old one is retired, and FailureThreshold failed new instances
// roll the deploy back. Strategy canary first runs the new version beside
// the stable one on a share of the requests (Canary, see canary.go);
// blue_green starts a whole second set and switches every request to it at
// once (BlueGreen, see bluegreen.go).
type Deploy struct {
	// Strategy is rolling (the default), canary or blue_green.
	Strategy         string        `yaml:"strategy"`
	MaxSurge         int           `yaml:"max_surge"`
	MaxUnavailable   int           `yaml:"max_unavailable"`
	MinReady         time.Duration `yaml:"min_ready"`
	FailureThreshold int           `yaml:"failure_threshold"`
	// Canary is the canary's steps and analysis; set when Strategy is
	// canary, nil otherwise.
	Canary *Canary `yaml:"canary"`
	// BlueGreen is how long the old set is kept and the optional analysis
	// before the switch; set when Strategy is blue_green, nil otherwise.
	BlueGreen *BlueGreen `yaml:"blue_green"`
}

// DefaultDeploy is a group's deploy pacing when its config has none: one new
// instance at a time and never fewer than the desired size in service.
var DefaultDeploy = Deploy{Strategy: StrategyRolling, MaxSurge: 1, MaxUnavailable: 0, MinReady: 0, FailureThreshold: 1}

// Hook is a lifecycle command run for an instance: argv expanded like the
// instance's command, run in its own process group, killed after Timeout.
type Hook struct {
	Command []string      `yaml:"command" required:"true" json:"command"`
	Timeout time.Duration `yaml:"timeout" json:"timeout"`

	command template.Argv
}

// The hooks' defaults: the type serves both, with their own timeouts.
var (
	defaultPreStart = Hook{Timeout: 60 * time.Second}
	defaultPreStop  = Hook{Timeout: 30 * time.Second}
)

// Bounds of template variables: names are identifiers so that {{.Vars.KEY}}
// parses; values are bounded like any expanded field.
const (
	maxVars     = 100
	maxVarValue = 4 << 10
	maxLabel    = 64
)

var varNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// deploy decodes a group's deploy section.
func (d *decoder) deploy(n *yaml.Node, path string) Deploy {
	dep := DefaultDeploy
	if n == nil {
		return dep
	}
	f := section[Deploy](d, n, path)
	bound := func(key string, def, least int) int {
		v, vn := f.integer(key, def)
		if vn != nil && (v < least || v > maxGroupSize) {
			d.errorf(vn, f.field(key), "must be from %d to %d, got %d", least, maxGroupSize, v)
			return def
		}
		return v
	}
	dep.MaxSurge = bound("max_surge", dep.MaxSurge, 0)
	dep.MaxUnavailable = bound("max_unavailable", dep.MaxUnavailable, 0)
	dep.FailureThreshold = bound("failure_threshold", dep.FailureThreshold, 1)
	dep.MinReady = d.within(f, "min_ready", dep.MinReady, 0, maxTimeout)
	if dep.MaxSurge == 0 && dep.MaxUnavailable == 0 {
		field, at := f.field("max_surge"), f.get("max_surge")
		if at == nil {
			at = n
		}
		d.errorf(at, field, "max_surge and max_unavailable must not both be 0: a deploy could never replace an instance")
	}
	d.strategy(f, n, &dep)
	return dep
}

// vars decodes template.vars: a mapping of identifier to string.
func (d *decoder) vars(n *yaml.Node, path string) map[string]string {
	if n == nil {
		return nil
	}
	entries, _ := d.entries(n, path)
	if len(entries) > maxVars {
		d.errorf(n, path, "at most %d variables, got %d", maxVars, len(entries))
		return nil
	}
	vars := make(map[string]string, len(entries))
	for _, e := range entries {
		field := join(path, e.key)
		if !varNameRE.MatchString(e.key) {
			d.errorf(e.k, field, "a variable name must match %s (it is used as {{.Vars.NAME}}), got %q", varNameRE, e.key)
			continue
		}
		v, ok := d.value(e.v, field)
		if !ok {
			continue
		}
		if err := checkVarValue(v); err != nil {
			d.errorf(e.v, field, "%v", err)
			continue
		}
		vars[e.key] = v
	}
	return vars
}

func checkVarValue(v string) error {
	if len(v) > maxVarValue {
		return fmt.Errorf("must be at most %d bytes, got %d", maxVarValue, len(v))
	}
	if strings.IndexByte(v, 0) >= 0 {
		return errors.New("must not contain NUL bytes")
	}
	return nil
}

// checkLabel keeps an explicit version printable in one status column.
func checkLabel(s string) error {
	if s == "" || len(s) > maxLabel || strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return fmt.Errorf("must be 1 to %d printable characters without spaces, got %q", maxLabel, truncate(s))
	}
	return nil
}

// hook decodes pre_start or pre_stop, trial-running its command with data;
// def is the hook's table.
func (d *decoder) hook(n *yaml.Node, path string, data TemplateData, def Hook) *Hook {
	if n == nil {
		return nil
	}
	f := section[Hook](d, n, path)
	if f.node == nil {
		return nil
	}
	h := &Hook{}
	if cn := f.get("command"); cn != nil {
		h.Command, h.command = d.argv(cn, f.field("command"), data, nil)
	}
	h.Timeout = d.within(f, "timeout", def.Timeout, time.Millisecond, maxTimeout)
	return h
}

// UnknownVarError is a variable override naming a variable the template does
// not declare.
type UnknownVarError struct {
	Name  string
	Known []string
}

func (e *UnknownVarError) Error() string {
	known := "the template declares no vars"
	if len(e.Known) > 0 {
		known = "known: " + strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("unknown template variable %q (%s)", e.Name, known)
}

// VarNames returns the template's variable names, sorted.
func (t Template) VarNames() []string { return slices.Sorted(maps.Keys(t.Vars)) }

// Overrides returns the variables set by WithVars.
func (t Template) Overrides() map[string]string { return maps.Clone(t.overrides) }

// WithVars returns t with variables overridden (on top of earlier overrides).
// Every name must be declared in t.Vars; the result is trial-run like a
// loaded template, so a value that breaks an expansion is refused here.
func (t Template) WithVars(group string, set map[string]string) (Template, error) {
	if img, ok := set[SetImage]; ok {
		// Not a variable: the container image to roll out.
		if !t.IsContainer() {
			return Template{}, fmt.Errorf("%s: the template runs a command, not a container image", SetImage)
		}
		if err := CheckImage(img); err != nil {
			return Template{}, fmt.Errorf("%s: %w", SetImage, err)
		}
		set = maps.Clone(set)
		delete(set, SetImage)
		t.Image = img
		t.overrides = maps.Clone(t.overrides)
		if t.overrides == nil {
			t.overrides = map[string]string{}
		}
		t.overrides[SetImage] = img
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if _, ok := t.Vars[k]; !ok {
			return Template{}, &UnknownVarError{Name: k, Known: t.VarNames()}
		}
		if err := checkVarValue(set[k]); err != nil {
			return Template{}, fmt.Errorf("variable %s: %w", k, err)
		}
	}
	if len(set) == 0 {
		return t, nil
	}
	out := t
	out.Vars = maps.Clone(t.Vars)
	out.overrides = maps.Clone(t.overrides)
	if out.overrides == nil {
		out.overrides = map[string]string{}
	}
	for k, v := range set {
		out.Vars[k], out.overrides[k] = v, v
	}
	if _, _, err := out.Expand(sampleData(group, nil)); err != nil {
		return Template{}, err
	}
	for _, h := range []*Hook{out.PreStart, out.PreStop} {
		if h != nil {
			if _, err := out.ExpandHook(h, sampleData(group, nil)); err != nil {
				return Template{}, err
			}
		}
	}
	return out, nil
}

// ExpandHook expands a hook's command for one instance, with t's variables.
func (t *Template) ExpandHook(h *Hook, d TemplateData) ([]string, error) {
	d.Vars = t.Vars
	cmds := h.command
	if len(cmds) != len(h.Command) || len(cmds) == 0 {
		cmds = make(template.Argv, len(h.Command))
		for i, s := range h.Command {
			a, _, err := template.Compile(s, d)
			if err != nil {
				return nil, fmt.Errorf("command[%d]: %w", i, err)
			}
			cmds[i] = a
		}
	}
	if len(cmds) == 0 {
		return nil, errors.New("command: must not be empty")
	}
	argv, err := cmds.Expand(d)
	if err != nil {
		return nil, fmt.Errorf("command%w", err)
	}
	return argv, nil
}

// Version names what t runs: its explicit label, or a hash of the template
// rendered with fixed per-instance fields (name, port, index), so that every
// instance started from one template has the same version and any change to
// the command, env, directory, variables or hooks gives a new one. Overridden
// variables extend a label with their hash ("v2+1a2b3c4d").
func (t Template) Version(group string) string {
	if t.Label != "" && len(t.overrides) == 0 {
		return t.Label
	}
	sum := t.digest(group)
	if t.Label != "" {
		return t.Label + "+" + sum[:8]
	}
	return sum[:12]
}

// Hash names what t renders to, whatever its label: the digest Version
// uses. An instance started from a template whose hash is not the serving
// template's has drifted, even if an operator kept the label.
func (t Template) Hash(group string) string { return t.digest(group)[:12] }

// digest is the hex SHA-256 of t rendered with fixed per-instance fields.
func (t Template) digest(group string) string {
	h := sha256.New()
	write := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(strconv.Itoa(len(p))))
			h.Write([]byte{':'})
			h.Write([]byte(p))
		}
	}
	data := sampleData(group, nil)
	if argv, env, err := t.Expand(data); err == nil {
		write("argv")
		write(argv...)
		write("env")
		write(env...)
	} else {
		// Unreachable for a loaded template; hash the source instead.
		write("src")
		write(t.Command...)
	}
	write("dir", t.Dir)
	if t.IsContainer() {
		// Only a container's: the versions of process templates stay as
		// they were.
		write("image", t.Image, strconv.Itoa(t.Port), t.Runtime, t.RegistryAuth, strconv.FormatBool(t.InsecureRegistry))
		write(t.Volumes...)
	}
	for _, hk := range []*Hook{t.PreStart, t.PreStop} {
		write("hook")
		if hk == nil {
			continue
		}
		if argv, err := t.ExpandHook(hk, data); err == nil {
			write(argv...)
		}
		write(hk.Timeout.String())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SameSource reports whether t and u were loaded from the same template
// text and settings; each load compiles its own templates, so they are not
// comparable with ==.
func (t Template) SameSource(u Template) bool {
	sameHook := func(a, b *Hook) bool {
		if a == nil || b == nil {
			return a == b
		}
		return slices.Equal(a.Command, b.Command) && a.Timeout == b.Timeout
	}
	return slices.Equal(t.Command, u.Command) && maps.Equal(t.Env, u.Env) && t.Dir == u.Dir &&
		t.StopTimeout == u.StopTimeout && t.CPUs == u.CPUs && maps.Equal(t.Vars, u.Vars) && t.Label == u.Label &&
		maps.Equal(t.overrides, u.overrides) && sameHook(t.PreStart, u.PreStart) && sameHook(t.PreStop, u.PreStop) &&
		t.Image == u.Image && t.Port == u.Port && slices.Equal(t.Args, u.Args) && slices.Equal(t.Volumes, u.Volumes) &&
		t.Runtime == u.Runtime && t.RegistryAuth == u.RegistryAuth && t.InsecureRegistry == u.InsecureRegistry
}
