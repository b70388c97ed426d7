package exec

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/shoal-lb/shoal/internal/template"
)

// Data is what an exec provider's command templates can refer to.
type Data struct {
	// ID is the server's cloud ID (stop only).
	ID    string
	Name  string
	Group string
	Index int
	Plan  string
	// Owner is the value of the shoal-owner tag, this shoal's.
	Owner string
	// Port is the provider's port.
	Port int
}

// TemplateFields names the fields a template may use, for errors.
func (Data) TemplateFields() string { return ".ID, .Name, .Group, .Index, .Plan, .Owner, .Port" }

// Command is an argv of templates over Data, as an exec provider's
// start, stop and list are: each element expands to one argument (there is
// no shell).
type Command struct {
	argv template.Argv
}

// CompileCommand compiles argv, trial-running each element with sample
// data so that a misspelt field fails at load.
func CompileCommand(argv []string) (Command, error) {
	if len(argv) == 0 {
		return Command{}, errors.New("must not be empty")
	}
	c := Command{argv: make(template.Argv, len(argv))}
	for i, s := range argv {
		t, out, err := template.Compile(s, sampleData)
		if err == nil && i == 0 && out == "" {
			err = errors.New("expands to an empty program name")
		}
		if err != nil {
			return Command{}, fmt.Errorf("[%d]: %w", i, err)
		}
		c.argv[i] = t
	}
	return c, nil
}

// CheckCommandArg trial-runs element i of an exec provider's command as
// the load does; without withPort (the provider sets no port) a use of
// {{.Port}} is an error.
func CheckCommandArg(s string, i int, withPort bool) error {
	_, out, err := template.Compile(s, sampleData)
	if err == nil && i == 0 && out == "" {
		err = fmt.Errorf("expands to an empty program name")
	}
	if err == nil && !withPort {
		if _, _, perr := template.Compile(s, sampleDataNoPort); perr != nil {
			err = fmt.Errorf("uses {{.Port}}, but the provider sets no port: set port (where every server serves), or leave {{.Port}} out")
		}
	}
	return err
}

// sampleData is what exec commands are trial-run with at load.
var sampleData = Data{ID: "id-1", Name: "web-001", Group: "web", Index: 1, Plan: "small", Owner: "shoal-0", Port: 8080}

// sampleDataNoPort is sampleData without Port, as a map: a command
// trial-run with it fails where it uses {{.Port}} (templates run with
// missingkey=error).
var sampleDataNoPort = func() map[string]any {
	m := map[string]any{}
	v := reflect.ValueOf(sampleData)
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; name != "Port" {
			m[name] = v.Field(i).Interface()
		}
	}
	return m
}()

// Expand returns the argv for d, bounded as instance templates are.
func (c Command) Expand(d Data) ([]string, error) {
	argv, err := c.argv.Expand(d)
	if err != nil {
		return nil, err
	}
	if argv[0] == "" {
		return nil, errors.New("[0]: expands to an empty program name")
	}
	return argv, nil
}
