package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"text/template/parse"
)

// maxExpansion bounds what one template may produce. Arguments are passed to
// execve, whose per-string limit is 128 KiB on Linux; anything near that is a
// mistake, and the bound keeps a runaway template from exhausting memory.
// maxTotalExpansion bounds all of one instance's command and env together.
const (
	maxExpansion      = 64 << 10
	maxTotalExpansion = 1 << 20
)

// boundedFuncs replace the built-in functions that build a string in memory
// before it reaches the output writer: without them a 236-byte template
// ({{printf "%0700000000d" 0}}) allocated 662 MiB before the writer's limit
// could refuse it.
var boundedFuncs = template.FuncMap{
	"printf":   boundedPrintf,
	"print":    bounded(fmt.Sprint),
	"println":  bounded(fmt.Sprintln),
	"html":     bounded(template.HTMLEscaper),
	"js":       bounded(template.JSEscaper),
	"urlquery": bounded(template.URLQueryEscaper),
}

// argsLen is the length of args as fmt prints them; every string a template
// handles is already bounded, so this stays small.
func argsLen(args []any) int {
	n := 0
	for _, a := range args {
		switch a := a.(type) {
		case string:
			n += len(a)
		case []byte:
			n += len(a)
		default:
			n += len(fmt.Sprint(a))
		}
		n++ // a separator
	}
	return n
}

// bounded wraps a function whose output grows at most a few times its input:
// the input is checked before the call and the output after.
func bounded(f func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if argsLen(args) > maxExpansion {
			return "", errTooLong
		}
		out := f(args...)
		if len(out) > maxExpansion {
			return "", errTooLong
		}
		return out, nil
	}
}

// boundedPrintf is printf whose widths and precisions cannot make it build a
// string longer than maxExpansion: it adds them up before formatting.
func boundedPrintf(format string, args ...any) (string, error) {
	n := len(format) + argsLen(args)
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format) && strings.IndexByte("+-# 0[]123456789.*", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				return "", errors.New("printf: widths and precisions from arguments (*) are not supported")
			case c >= '1' && c <= '9' && format[i-1] != '[':
				// A width or precision: read the whole number.
				v := 0
				for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
					if v = v*10 + int(format[i]-'0'); v > maxExpansion {
						return "", errTooLong
					}
				}
				i--
				n += v
			case c == '[':
				// An argument index such as %[1]d: skip it.
				for i < len(format) && format[i] != ']' {
					i++
				}
			}
		}
	}
	if n > maxExpansion {
		return "", errTooLong
	}
	out := fmt.Sprintf(format, args...)
	if len(out) > maxExpansion {
		return "", errTooLong
	}
	return out, nil
}

// NewTemplate compiles command and env the way Load does, so that other
// packages can build a Template without a file. Dir and StopTimeout are left
// for the caller to set.
func NewTemplate(command []string, env map[string]string) (Template, error) {
	return compileTemplate(command, env, nil)
}

func compileTemplate(command []string, env, vars map[string]string) (Template, error) {
	if len(command) == 0 {
		return Template{}, errors.New("command: must not be empty")
	}
	// The group is not known here; any valid name serves for the trial run.
	data := sampleData("web", vars)
	t := Template{Command: command, Env: env, Vars: vars}
	t.command = make([]*template.Template, len(command))
	for i, s := range command {
		tt, out, err := compileArg(s, data)
		if err == nil && i == 0 && out == "" {
			err = errors.New("expands to an empty program name")
		}
		if err != nil {
			return Template{}, fmt.Errorf("command[%d]: %w", i, err)
		}
		t.command[i] = tt
	}
	t.env = make(map[string]*template.Template, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if err := checkEnvName(k); err != nil {
			return Template{}, fmt.Errorf("env.%s: %w", k, err)
		}
		tt, _, err := compileArg(env[k], data)
		if err != nil {
			return Template{}, fmt.Errorf("env.%s: %w", k, err)
		}
		t.env[k] = tt
	}
	return t, nil
}

// Expand runs the templates for one instance. Each command element expands to
// exactly one argument (there is no shell), and env comes back as sorted
// KEY=VALUE strings. A Template built as a literal rather than by Load or
// NewTemplate is compiled on each call.
func (t *Template) Expand(d TemplateData) (argv []string, env []string, err error) {
	compiled := t
	if len(t.command) != len(t.Command) || len(t.env) != len(t.Env) || len(t.Command) == 0 {
		c, err := compileTemplate(t.Command, t.Env, t.Vars)
		if err != nil {
			return nil, nil, err
		}
		compiled = &c
	}
	d.Vars = t.Vars
	// Each field is bounded by itself and by what the fields before it left
	// of the total, so that no instance expands past maxTotalExpansion.
	left := maxTotalExpansion
	argv = make([]string, len(compiled.command))
	for i, tt := range compiled.command {
		if argv[i], err = execute(tt, d, left); err != nil {
			return nil, nil, fmt.Errorf("command[%d]: %w", i, err)
		}
		left -= len(argv[i])
	}
	env = make([]string, 0, len(compiled.env))
	for _, k := range slices.Sorted(maps.Keys(compiled.env)) {
		v, err := execute(compiled.env[k], d, left)
		if err != nil {
			return nil, nil, fmt.Errorf("env.%s: %w", k, err)
		}
		left -= len(v)
		env = append(env, k+"="+v)
	}
	return argv, env, nil
}

// sampleData is what templates are trial-run with at load time, so that a
// misspelt field fails then rather than at the first scale-up.
func sampleData(group string, vars map[string]string) TemplateData {
	return TemplateData{Name: group + "-001", Host: "127.0.0.1", Port: 10001, Index: 1, Group: group, Vars: vars}
}

// compileArg parses one template, rejects the constructs that could loop or
// recurse without bound, and trial-runs it with data, returning its output.
func compileArg(text string, data any) (*template.Template, string, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, "", errors.New("must not contain NUL bytes")
	}
	t, err := template.New("t").Option("missingkey=error").Funcs(boundedFuncs).Parse(text)
	if err != nil {
		return nil, "", templateError(err)
	}
	if len(t.Templates()) > 1 {
		return nil, "", errors.New("template: {{define}} and {{block}} are not supported")
	}
	if t.Tree != nil {
		if err := checkNodes(t.Tree.Root); err != nil {
			return nil, "", err
		}
	}
	out, err := execute(t, data, maxExpansion)
	if err != nil {
		return nil, "", err
	}
	return t, out, nil
}

// checkNodes rejects {{range}} (which can count to any integer) and
// {{template}} (which can recurse); instance arguments need neither.
func checkNodes(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNodes(c); err != nil {
				return err
			}
		}
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode)
	case *parse.RangeNode:
		return errors.New("template: {{range}} is not supported")
	case *parse.TemplateNode:
		return errors.New("template: {{template}} is not supported")
	}
	return nil
}

func checkBranch(b *parse.BranchNode) error {
	if err := checkNodes(b.List); err != nil {
		return err
	}
	return checkNodes(b.ElseList)
}

// execute runs t, failing once the output passes maxExpansion or left, the
// part of the total an instance's fields may still use.
func execute(t *template.Template, d any, left int) (string, error) {
	w := &limitedBuffer{max: maxExpansion, err: errTooLong}
	if left < maxExpansion {
		w.max, w.err = max(left, 0), errTotalTooLong
	}
	if err := t.Execute(w, d); err != nil {
		return "", templateError(err)
	}
	return w.String(), nil
}

var (
	errTooLong      = fmt.Errorf("expands to more than %d bytes (64 KiB, the limit for one field)", maxExpansion)
	errTotalTooLong = fmt.Errorf("expands past %d bytes (1 MiB, the limit for a template's command and env together)", maxTotalExpansion)
)

// limitedBuffer fails writes past max with err, which stops template execution.
type limitedBuffer struct {
	bytes.Buffer
	max int
	err error
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > b.max {
		return 0, b.err
	}
	return b.Buffer.Write(p)
}

// templateLocation matches text/template's "t:LINE:COL: executing "t" at <...>: "
// prefix, which only repeats what the field path already says.
var templateLocation = regexp.MustCompile(`^template: t:\d+(?::\d+)?: (?:executing "t" at <.*?>: )?`)

// templateError makes text/template's errors readable in a config error.
func templateError(err error) error {
	for _, e := range []error{errTooLong, errTotalTooLong} {
		if errors.Is(err, e) {
			return e
		}
	}
	msg := err.Error()
	if loc := templateLocation.FindStringIndex(msg); loc != nil {
		msg = "template: " + strings.TrimPrefix(msg[loc[1]:], "template: ")
	}
	msg = strings.Replace(msg, fmt.Sprintf(" in type %T", TemplateData{}),
		" (have .Name, .Port, .Index, .Group, .Vars)", 1)
	msg = strings.Replace(msg, fmt.Sprintf(" in type %T", ExecData{}),
		" (have .ID, .Name, .Group, .Index, .Plan, .Owner, .Port)", 1)
	return errors.New(msg)
}

// checkEnvName rejects names that cannot round-trip through a KEY=VALUE string.
func checkEnvName(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("invalid environment variable name %q", k)
	}
	return nil
}
