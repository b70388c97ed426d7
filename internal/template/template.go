// Package template compiles and expands the templates of an argv and an
// environment: an instance template's command and env, a hook's command,
// an exec provider's commands. Each element expands to exactly one argument
// (there is no shell), and every expansion is bounded in size and work, so
// that no template a config holds can loop, recurse or exhaust memory.
// config compiles and trial-runs them when it loads a file; the providers
// expand them for each instance.
package template

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

// MaxExpansion bounds what one template may produce. Arguments are passed
// to execve, whose per-string limit is 128 KiB on Linux; anything near that
// is a mistake, and the bound keeps a runaway template from exhausting
// memory. MaxTotal bounds all of one expansion's argv and env together.
const (
	MaxExpansion = 64 << 10
	MaxTotal     = 1 << 20
)

// The errors of an expansion past the bounds.
var (
	ErrTooLong      = fmt.Errorf("expands to more than %d bytes (64 KiB, the limit for one field)", MaxExpansion)
	ErrTotalTooLong = fmt.Errorf("expands past %d bytes (1 MiB, the limit for a template's command and env together)", MaxTotal)
)

// Arg is one compiled string, which expands to one argument.
type Arg struct{ t *template.Template }

// Compile parses text, rejects the constructs that could loop or recurse
// without bound, and trial-runs it with sample, returning its output, so
// that a misspelt field fails when the config loads rather than at the
// first scale-up.
func Compile(text string, sample any) (*Arg, string, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, "", errors.New("must not contain NUL bytes")
	}
	t, err := template.New("t").Option("missingkey=error").Funcs(boundedFuncs).Parse(text)
	if err != nil {
		return nil, "", templateError(err, sample)
	}
	if len(t.Templates()) > 1 {
		return nil, "", errors.New("template: {{define}} and {{block}} are not supported")
	}
	if t.Tree != nil {
		if err := checkNodes(t.Tree.Root); err != nil {
			return nil, "", err
		}
	}
	out, err := execute(t, sample, MaxExpansion)
	if err != nil {
		return nil, "", err
	}
	return &Arg{t}, out, nil
}

// Argv is a list of compiled arguments.
type Argv []*Arg

// Expand expands every argument with data, within MaxTotal together. An
// error names the argument: "[2]: ...".
func (a Argv) Expand(data any) ([]string, error) {
	left := MaxTotal
	return a.expand(data, &left)
}

// expand is Expand within what left says of the total, which it charges.
func (a Argv) expand(data any, left *int) ([]string, error) {
	argv := make([]string, len(a))
	for i, arg := range a {
		var err error
		if argv[i], err = execute(arg.t, data, *left); err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		*left -= len(argv[i])
	}
	return argv, nil
}

// Program is a command and its environment.
type Program struct {
	Command Argv
	Env     map[string]*Arg
}

// Expand expands the command and the environment with data, within
// MaxTotal together; env comes back as KEY=VALUE strings sorted by key. An
// error names the field: "command[1]: ..." or "env.KEY: ...".
func (p Program) Expand(data any) (argv, env []string, err error) {
	// Each field is bounded by itself and by what the fields before it left
	// of the total, so that no expansion passes MaxTotal.
	left := MaxTotal
	if argv, err = p.Command.expand(data, &left); err != nil {
		return nil, nil, fmt.Errorf("command%w", err)
	}
	env = make([]string, 0, len(p.Env))
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		v, err := execute(p.Env[k].t, data, left)
		if err != nil {
			return nil, nil, fmt.Errorf("env.%s: %w", k, err)
		}
		left -= len(v)
		env = append(env, k+"="+v)
	}
	return argv, env, nil
}

// Fields is what a template's data says of itself in an error about a field
// it lacks, such as ".Name, .Port" (text/template would name its Go type).
type Fields interface {
	TemplateFields() string
}

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
		if argsLen(args) > MaxExpansion {
			return "", ErrTooLong
		}
		out := f(args...)
		if len(out) > MaxExpansion {
			return "", ErrTooLong
		}
		return out, nil
	}
}

// boundedPrintf is printf whose widths and precisions cannot make it build a
// string longer than MaxExpansion: it adds them up before formatting.
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
					if v = v*10 + int(format[i]-'0'); v > MaxExpansion {
						return "", ErrTooLong
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
	if n > MaxExpansion {
		return "", ErrTooLong
	}
	out := fmt.Sprintf(format, args...)
	if len(out) > MaxExpansion {
		return "", ErrTooLong
	}
	return out, nil
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

// execute runs t, failing once the output passes MaxExpansion or left, the
// part of the total an expansion's fields may still use.
func execute(t *template.Template, d any, left int) (string, error) {
	w := &limitedBuffer{max: MaxExpansion, err: ErrTooLong}
	if left < MaxExpansion {
		w.max, w.err = max(left, 0), ErrTotalTooLong
	}
	if err := t.Execute(w, d); err != nil {
		return "", templateError(err, d)
	}
	return w.String(), nil
}

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

// templateError makes text/template's errors readable in a config error;
// data is what the template ran with.
func templateError(err error, data any) error {
	for _, e := range []error{ErrTooLong, ErrTotalTooLong} {
		if errors.Is(err, e) {
			return e
		}
	}
	msg := err.Error()
	if loc := templateLocation.FindStringIndex(msg); loc != nil {
		msg = "template: " + strings.TrimPrefix(msg[loc[1]:], "template: ")
	}
	if f, ok := data.(Fields); ok {
		msg = strings.Replace(msg, fmt.Sprintf(" in type %T", data), " (have "+f.TemplateFields()+")", 1)
	}
	return errors.New(msg)
}

// CheckEnvName rejects names that cannot round-trip through a KEY=VALUE string.
func CheckEnvName(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("invalid environment variable name %q", k)
	}
	return nil
}
