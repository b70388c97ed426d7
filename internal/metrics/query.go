package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/itchyny/gojq"
)

// Query is a compiled jq program (gojq) run over a metrics document.
type Query struct {
	code *gojq.Code
}

// ParseQuery compiles src. Its error is one line, naming the column for a
// syntax error, fit to print as the CLI's whole complaint.
func ParseQuery(src string) (*Query, error) {
	q, err := gojq.Parse(src)
	if err != nil {
		msg := oneLine(err.Error())
		if pe, ok := err.(*gojq.ParseError); ok {
			return nil, fmt.Errorf("invalid query at column %d: %s", pe.Offset+1, msg)
		}
		return nil, fmt.Errorf("invalid query: %s", msg)
	}
	code, err := gojq.Compile(q)
	if err != nil {
		return nil, fmt.Errorf("invalid query: %s", oneLine(err.Error()))
	}
	return &Query{code: code}, nil
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Run runs the program over v (a Document, CPUUsage or anything JSON can
// encode) and returns every value it emits, or the first error.
func (q *Query) Run(ctx context.Context, v any) ([]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	var in any
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	var out []any
	iter := q.code.RunWithContext(ctx, in)
	for {
		v, ok := iter.Next()
		if !ok {
			return out, nil
		}
		if err, ok := v.(error); ok {
			return nil, fmt.Errorf("query: %s", oneLine(err.Error()))
		}
		out = append(out, v)
	}
}
