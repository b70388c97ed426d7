package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/jobrun"
)

// terminal returns w's width in columns when w is a terminal, and false
// when it is not (a pipe, a file): then output is plain lines, for logs
// and scripts.
func terminal(w io.Writer) (width int, ok bool) {
	ws, ok := winsize(w)
	if !ok {
		return 0, false
	}
	if ws.Col == 0 {
		return 80, true // a terminal that does not say (a serial console)
	}
	return int(ws.Col), true
}

// winsize is the size of terminal w; false when w is not one.
func winsize(w io.Writer) (*unix.Winsize, bool) {
	f, isFile := w.(*os.File)
	if !isFile {
		return nil, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	return ws, err == nil
}

// progressLine shows how a long operation goes. Live, on a terminal, it is
// one line rewritten in place every poll, with the time elapsed; plain, it
// is a line with the time of day for each change.
type progressLine struct {
	w     io.Writer
	live  bool
	width int
	start time.Time
	last  string // what a plain line last said
	shown bool   // a live line is on the screen
}

func newProgressLine(w io.Writer, start time.Time) *progressLine {
	width, live := terminal(w)
	return &progressLine{w: w, live: live, width: width, start: start}
}

// update shows text at now: live, it replaces the line; plain, it is
// printed when it changed.
func (p *progressLine) update(now time.Time, text string) {
	if p.live {
		fmt.Fprint(p.w, liveLine(text, now.Sub(p.start), p.width))
		p.shown = true
		return
	}
	if text != p.last {
		p.line(now, text)
		p.last = text
	}
}

// line prints a plain line at now.
func (p *progressLine) line(now time.Time, text string) {
	fmt.Fprintf(p.w, "  %s  %s\n", now.Format(time.TimeOnly), text)
}

// end clears a live line, so that what follows starts on a clean line.
func (p *progressLine) end() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}

// liveLine is text after the elapsed time, cut to width columns, that
// returns to the start of the line and erases what was there.
func liveLine(text string, elapsed time.Duration, width int) string {
	s := fmt.Sprintf("[%s] %s", elapsed.Truncate(time.Second), text)
	if r := []rune(s); width > 1 && len(r) > width-1 {
		s = string(r[:width-2]) + "…" // the last column stays free: no wrap
	}
	return "\r\x1b[K" + s
}

// watchJob waits for job to end, showing the group's status after each
// poll (the core answers a poll when the job changes, or after a second).
func watchJob(ctx context.Context, c *api.Client, job jobrun.Job, show func(group.Status)) (jobrun.Job, error) {
	for {
		j, err := c.Job(ctx, job.ID, time.Second)
		if err != nil {
			return job, err
		}
		if g, err := c.Group(ctx, job.Group); err == nil {
			show(g)
		}
		if j.State.Terminal() {
			return j, nil
		}
	}
}

// follow waits for a scale job to end, showing the group's instances.
func follow(ctx context.Context, c *api.Client, w io.Writer, job jobrun.Job) (jobrun.Job, error) {
	p := newProgressLine(w, time.Now())
	j, err := watchJob(ctx, c, job, func(g group.Status) { p.update(time.Now(), progress(g)) })
	p.end()
	if err == nil {
		printJob(w, j)
	}
	return j, err
}

// progress is where a scale is: how many instances serve of those wanted,
// and the state of each.
func progress(g group.Status) string {
	var parts []string
	for _, in := range g.Instances {
		parts = append(parts, in.Name+" "+string(in.State))
	}
	return fmt.Sprintf("%d/%d in service: %s", g.InService, g.Desired, strings.Join(parts, ", "))
}

// followDeploy waits for a deploy job to end. Live, the line counts the
// instances in service on the new version; plain, each instance's change
// of state or version is a line.
func followDeploy(ctx context.Context, c *api.Client, w io.Writer, job jobrun.Job) (jobrun.Job, error) {
	p := newProgressLine(w, time.Now())
	seen := map[string]string{}
	j, err := watchJob(ctx, c, job, func(g group.Status) {
		now := time.Now()
		if p.live {
			p.update(now, deployProgress(g, job.Version))
			return
		}
		states := map[string]string{}
		for _, in := range g.Instances {
			states[in.Name] = fmt.Sprintf("%s (version %s)", in.State, in.Version)
		}
		for _, name := range slices.Sorted(maps.Keys(states)) {
			if seen[name] != states[name] {
				p.line(now, name+" "+states[name])
			}
		}
		for _, name := range slices.Sorted(maps.Keys(seen)) {
			if _, ok := states[name]; !ok {
				p.line(now, name+" gone")
			}
		}
		seen = states
	})
	p.end()
	if err == nil {
		printJob(w, j)
	}
	return j, err
}

// deployProgress is where a deploy of version is: the instances in
// service on it of those wanted, and the state and version of each.
func deployProgress(g group.Status, version string) string {
	done := 0
	var parts []string
	for _, in := range g.Instances {
		if in.State == group.InService && in.Version == version {
			done++
		}
		parts = append(parts, fmt.Sprintf("%s %s %s", in.Name, in.State, in.Version))
	}
	return fmt.Sprintf("%d/%d on version %s: %s", done, g.Desired, version, strings.Join(parts, ", "))
}
