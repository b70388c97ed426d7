package initconfig

import (
	"errors"
	"fmt"
	"strings"
)

// Words splits a command line into its argv as a shell would split it,
// quotes and backslashes included, but runs nothing: there is no expansion,
// and the command is never given to a shell. An unquoted operator (| & ; <
// > $ `) is refused rather than passed on as an argument, since whoever
// typed it expected a shell to act on it.
func Words(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune // ' or " while inside quotes
	)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune("\"\\$`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\':
			if i+1 == len(rs) {
				return nil, errors.New("ends in a lone backslash")
			}
			i++
			cur.WriteRune(rs[i])
			in = true
		case r == ' ' || r == '\t' || r == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case r == '$':
			return nil, errors.New("$ expands nothing: the command runs without a shell (the instance's port is {{.Port}}, also in $PORT of its environment); quote it to pass it as text")
		case strings.ContainsRune("|&;<>`", r):
			return nil, fmt.Errorf("%q is a shell operator, and the command runs without a shell; quote it to pass it as text, or put the pipeline in a script", string(r))
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("is empty")
	}
	return words, nil
}
