package template

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

type data struct {
	Name string
	Port int
}

func (data) TemplateFields() string { return ".Name, .Port" }

func TestCompileAndExpand(t *testing.T) {
	sample := data{Name: "web-001", Port: 1}
	var p Program
	for _, s := range []string{"app", "--name={{.Name}}", "--port={{.Port}}"} {
		a, out, err := Compile(s, sample)
		if err != nil {
			t.Fatalf("Compile(%q): %v", s, err)
		}
		if s == "app" && out != "app" {
			t.Errorf("trial run of %q = %q", s, out)
		}
		p.Command = append(p.Command, a)
	}
	b, _, _ := Compile("{{.Port}}", sample)
	a, _, _ := Compile("x", sample)
	p.Env = map[string]*Arg{"B": b, "A": a}
	argv, env, err := p.Expand(data{Name: "web-007", Port: 8007})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"app", "--name=web-007", "--port=8007"}; !slices.Equal(argv, want) {
		t.Errorf("argv = %q, want %q", argv, want)
	}
	if want := []string{"A=x", "B=8007"}; !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q (sorted by key)", env, want)
	}
}

func TestCompileRefuses(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"{{.Prot}}", "template: can't evaluate field Prot (have .Name, .Port)"},
		{"{{range .Name}}x{{end}}", "template: {{range}} is not supported"},
		{`{{define "x"}}y{{end}}`, "template: {{define}} and {{block}} are not supported"},
		{"{{if 1}}{{template \"t\"}}{{end}}", "template: {{template}} is not supported"},
		{"a\x00b", "must not contain NUL bytes"},
		{`{{printf "%0700000000d" 0}}`, ErrTooLong.Error()},
		{`{{printf "%*d" 5 0}}`, "template: error calling printf: printf: widths and precisions from arguments (*) are not supported"},
		{`{{print (printf "%060000d" 0) (printf "%060000d" 0)}}`, ErrTooLong.Error()},
	} {
		if _, _, err := Compile(tt.text, data{}); err == nil || err.Error() != tt.want {
			t.Errorf("Compile(%q) error = %v, want %s", tt.text, err, tt.want)
		}
	}
}

// TestExpandTotal: fields that each fit expand past MaxTotal together.
func TestExpandTotal(t *testing.T) {
	big, _, err := Compile(`{{printf "%060000d" 0}}`, data{})
	if err != nil {
		t.Fatal(err)
	}
	argv := make(Argv, MaxTotal/60000+1)
	for i := range argv {
		argv[i] = big
	}
	_, err = argv.Expand(data{})
	if !errors.Is(err, ErrTotalTooLong) {
		t.Fatalf("Expand of %d fields of 60000 bytes: %v, want %v", len(argv), err, ErrTotalTooLong)
	}
	if !strings.HasPrefix(err.Error(), "[17]: ") {
		t.Errorf("error %q does not name the field that passed the total, [17]", err)
	}
	_, _, err = Program{Command: argv[:1], Env: map[string]*Arg{"K": big}}.Expand(data{})
	if err != nil {
		t.Errorf("two fields within the total: %v", err)
	}
}

func TestCheckEnvName(t *testing.T) {
	for name, ok := range map[string]bool{"PATH": true, "": false, "A=B": false, "A\x00": false} {
		if err := CheckEnvName(name); (err == nil) != ok {
			t.Errorf("CheckEnvName(%q) = %v", name, err)
		}
	}
}
