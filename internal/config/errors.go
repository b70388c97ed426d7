package config

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is one problem in a configuration file.
type Error struct {
	// File is the path as given to Load or Parse.
	File string
	// Line and Col are 1-based; zero when unknown.
	Line, Col int
	// Field is the path of the offending key, such as "groups[0].max_size";
	// empty for problems with the document as a whole.
	Field string
	Msg   string
}

// Error formats e as FILE:LINE:COL: FIELD: MSG, leaving out the parts that are
// unknown so that editors and terminals can still jump to the location.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Col > 0 {
			b.WriteString(":" + strconv.Itoa(e.Col))
		}
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

// ErrorList is every problem found in a configuration file, in file order.
type ErrorList []*Error

// Error returns one line per problem.
func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Pos is where a field's value is in the config file.
type Pos struct{ Line, Col int }

// FieldError returns an Error about field located where the field (or, when
// it took a default, its closest enclosing field) is written in the file.
func (c *Config) FieldError(field, format string, args ...any) *Error {
	e := &Error{File: c.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	for f := field; f != ""; f = parentField(f) {
		if p, ok := c.pos[f]; ok {
			e.Line, e.Col = p.Line, p.Col
			break
		}
	}
	if e.File == "" {
		e.File = c.Path
	}
	return e
}

// parentField strips the last ".key" or "[i]" from a field path.
func parentField(f string) string {
	i := strings.LastIndexAny(f, ".[")
	if i < 0 {
		return ""
	}
	return f[:i]
}
