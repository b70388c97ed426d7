// Package guide reads the tested blocks of a guide in docs/ (the
// getting-started guide) and checks a command's output against the lines a
// block shows. Two tests follow the same guide: test/e2e on the binaries it
// built, test/package on the installed .deb in a fresh Debian root; this is
// the one reader of the format both use.
//
// A tested block is a ```console block right after a line
// "<!-- guide-test -->", or "<!-- guide-test package -->" for a block that
// only the package test runs (installing the .deb). In it, a line "$ CMD"
// starts a command, a trailing backslash continues it, a heredoc (<<'EOF')
// takes the lines up to its terminator, and the lines after it up to the next
// "$ " are the output it shows (blank ones, and a line "…" marking output
// left out, ignored).
package guide

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Step is one command of a tested block and the output lines it shows.
type Step struct {
	Line    int    // the command's line in the guide
	Cmd     string // as shown, without the prompt; continuation lines and heredoc included
	Want    []string
	Package bool // in a "guide-test package" block: run only where the .deb is installed
}

// Title is the command's first line, to name it in a message.
func (s Step) Title() string {
	l, _, _ := strings.Cut(s.Cmd, "\n")
	return l
}

var heredoc = regexp.MustCompile(`<<-?\s*'?"?([A-Za-z_]+)'?"?`)

// Parse returns the commands of md's tested blocks, in order.
func Parse(md string) ([]Step, error) {
	lines := strings.Split(md, "\n")
	var steps []Step
	for i := 0; i < len(lines); i++ {
		var pkg bool
		switch strings.TrimSpace(lines[i]) {
		case "<!-- guide-test -->":
		case "<!-- guide-test package -->":
			pkg = true
		default:
			continue
		}
		i++
		if i >= len(lines) || lines[i] != "```console" {
			return nil, fmt.Errorf("line %d: a guide-test marker must come right before a ```console block", i)
		}
		var cur *Step
		for i++; ; i++ {
			if i >= len(lines) {
				return nil, errors.New("a ```console block does not end")
			}
			l := lines[i]
			if l == "```" {
				break
			}
			cmd, isCmd := strings.CutPrefix(l, "$ ")
			if !isCmd {
				if cur == nil {
					return nil, fmt.Errorf("line %d: output before the block's first command", i+1)
				}
				// "…" stands for output the guide leaves out.
				if t := strings.TrimSpace(l); t != "" && t != "…" {
					cur.Want = append(cur.Want, l)
				}
				continue
			}
			steps = append(steps, Step{Line: i + 1, Package: pkg})
			cur = &steps[len(steps)-1]
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			if m := heredoc.FindStringSubmatch(cmd); m != nil {
				for {
					i++
					if i >= len(lines) || lines[i] == "```" {
						return nil, fmt.Errorf("line %d: heredoc %s does not end", cur.Line, m[1])
					}
					cmd += "\n" + lines[i]
					if lines[i] == m[1] {
						break
					}
				}
			}
			cur.Cmd = cmd
		}
	}
	return steps, nil
}

// Missing is the first of want's lines that out does not print, in order
// after the ones before it, and true; or false when out prints them all (it
// may print more). Lines shown with the same time (their first two words)
// may print in either order: shoal's parts record the events of one moment
// each on its own (a policy's decision, and the launch of the job it
// started, a few ms apart). subst rewrites each shown line first (the
// guide's port by the test's).
func Missing(want []string, out string, subst func(string) string) (string, bool) {
	got := strings.Split(out, "\n")
	for k := 0; k < len(want); {
		n := 1 // the run of lines shown at one time
		for k+n < len(want) && sameTime(want[k], want[k+n]) {
			n++
		}
		last := -1
		used := map[int]bool{}
		for _, w := range want[k : k+n] {
			w = subst(w)
			i := slices.IndexFunc(got, func(g string) bool { return LineMatches(w, g) })
			for i >= 0 && used[i] {
				j := slices.IndexFunc(got[i+1:], func(g string) bool { return LineMatches(w, g) })
				if j < 0 {
					i = -1
					break
				}
				i += 1 + j
			}
			if i < 0 {
				return w, true
			}
			used[i] = true
			last = max(last, i)
		}
		got = got[last+1:]
		k += n
	}
	return "", false
}

// sameTime says whether two shown lines begin with the same date and time.
func sameTime(a, b string) bool {
	fa, fb := strings.Fields(a), strings.Fields(b)
	return len(fa) > 2 && len(fb) > 2 && fa[0] == fb[0] && fa[1] == fb[1] &&
		strings.Count(fa[0], "-") == 2 && strings.Count(fa[1], ":") == 2
}

// LineMatches says whether got is the line want shows: the same words in
// order (runs of spaces count as one), where a word of want that holds a
// digit stands for one or more words, since times, pids, ports, versions and
// counts vary from run to run (a check's "L7OK 200" may read "L7OK 200 19ms").
func LineMatches(want, got string) bool {
	var re strings.Builder
	re.WriteString(`^\s*`)
	for i, w := range strings.Fields(want) {
		if i > 0 {
			re.WriteString(`\s+`)
		}
		if strings.ContainsAny(w, "0123456789") {
			re.WriteString(`\S+(?:\s+\S+)*?`)
		} else {
			re.WriteString(regexp.QuoteMeta(w))
		}
	}
	re.WriteString(`\s*$`)
	return regexp.MustCompile(re.String()).MatchString(got)
}
