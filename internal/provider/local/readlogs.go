package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/shoal-lb/shoal/internal/provider"
)

// followPoll is how often a followed log is looked at for what was appended.
const followPoll = 200 * time.Millisecond

// tailChunk is how much of a log is read at a time looking for line starts
// from its end.
const tailChunk = 32 << 10

var _ provider.LogReader = (*Provider)(nil)

// Logs writes the instance's log to w: the newest opts.Lines lines, taken
// from NAME.log and, when it has fewer, its rotated copies, then, with
// opts.Follow, what is appended until ctx ends. A rotation (copy, then
// truncation; see maintainLogs) while following loses nothing: what was
// written after the last read is read from the copy.
func (p *Provider) Logs(ctx context.Context, rec provider.Record, opts provider.LogOptions, w io.Writer) error {
	if err := provider.CheckName(rec.Name); err != nil {
		return fmt.Errorf("read log of instance %q: %w", rec.Name, err)
	}
	if d, err := decode(rec.Data); err == nil && d.Container != "" {
		// A container's output is its runtime's.
		if err := p.containerLogs(ctx, d, opts, w); err != nil {
			return fmt.Errorf("read log of instance %s: %w", rec.Name, err)
		}
		return nil
	}
	path := filepath.Join(p.stateDir, "logs", rec.Name+".log")
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read log of instance %s: %w", rec.Name, err)
	}
	fl := &follower{p: p, path: path, f: f, end: -1}
	defer func() { fl.f.Close() }()
	if err := fl.tail(opts.Lines, !opts.Follow, w); err != nil {
		return fmt.Errorf("read log of instance %s: %w", rec.Name, err)
	}
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		more, err := fl.step(w)
		if err != nil {
			return fmt.Errorf("follow log of instance %s: %w", rec.Name, err)
		}
		if more {
			continue
		}
		if !opts.Follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// follower is a reader's place in an instance's log.
type follower struct {
	p    *Provider
	path string
	f    *os.File // the log as opened
	gen  int      // the log's rotations when off was taken
	off  int64    // how much of generation gen was written out
	end  int64    // where to stop in generation gen (-1: follow on)
}

// readChunk bounds how much of the log one step holds in memory.
const readChunk = 1 << 20

// tail writes the rotated copies' part of the newest lines lines (all with
// 0) and sets the follower at the current file's part, which step writes
// (up to the end seen now, with stop).
func (fl *follower) tail(lines int, stop bool, w io.Writer) error {
	fl.p.logMu.RLock()
	fl.gen = fl.p.rotations[fl.path]
	fi, err := fl.f.Stat()
	var older []part
	if err == nil {
		fl.off, older, err = tailParts(fl.f, fi.Size(), fl.path, lines)
		if stop {
			fl.end = fi.Size()
		}
	}
	fl.p.logMu.RUnlock()
	defer func() {
		for _, o := range older {
			o.f.Close()
		}
	}()
	if err != nil {
		return err
	}
	for i := len(older) - 1; i >= 0; i-- {
		if _, err := copyRange(w, older[i].f, older[i].from, older[i].to); err != nil {
			return err
		}
	}
	return nil
}

// step writes out what the log gained since the last step: the rest of
// the generation the follower read, from the rotated copy that holds it
// now, the generations since, then the current file (up to readChunk of
// it). The rotation count and the current file are read under the
// rotation lock, so no truncation falls between them. It says whether
// more of the current file waits.
func (fl *follower) step(w io.Writer) (more bool, err error) {
	p := fl.p
	p.logMu.RLock()
	gen := p.rotations[fl.path]
	cur, err := os.Stat(fl.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.logMu.RUnlock()
		return false, err
	}
	fi, err := fl.f.Stat()
	if err != nil {
		p.logMu.RUnlock()
		return false, err
	}
	if cur != nil && !os.SameFile(cur, fi) {
		// Replaced (expired and started anew): the rest of the old
		// file, then the new one from its start.
		p.logMu.RUnlock()
		if _, err := copyRange(w, fl.f, fl.off, fi.Size()); err != nil {
			return false, err
		}
		nf, err := os.Open(fl.path)
		if err != nil {
			return false, err
		}
		fl.f.Close()
		fl.f, fl.off, fl.gen = nf, 0, gen
		return true, nil
	}
	// Rotated d times since: generation fl.gen is path.d now (when kept),
	// the ones after it path.d-1 … path.1, oldest first here.
	var older []*os.File
	from := fl.off
	if d := gen - fl.gen; d > 0 {
		for k := d; k >= 1; k-- {
			c, _ := os.Open(fmt.Sprintf("%s.%d", fl.path, k)) // nil: not kept
			older = append(older, c)
		}
		from = 0
	}
	to := fi.Size()
	if fl.end >= 0 && gen == fl.gen {
		to = min(to, fl.end)
	}
	buf := make([]byte, min(max(to-from, 0), readChunk))
	n, err := fl.f.ReadAt(buf, from)
	p.logMu.RUnlock()
	defer func() {
		for _, c := range older {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read log: %w", err)
	}
	for i, c := range older {
		if c == nil {
			continue
		}
		start := int64(0)
		if i == 0 { // generation fl.gen: its rest
			start = fl.off
		}
		ci, err := c.Stat()
		if err != nil {
			return false, fmt.Errorf("read rotated log: %w", err)
		}
		if _, err := copyRange(w, c, start, ci.Size()); err != nil {
			return false, err
		}
	}
	if _, err := w.Write(buf[:n]); err != nil {
		return false, fmt.Errorf("copy log: %w", err)
	}
	fl.gen, fl.off = gen, from+int64(n)
	return fl.off < to, nil
}

// copyRange writes bytes [from, to) of f to w.
func copyRange(w io.Writer, f *os.File, from, to int64) (int64, error) {
	if to <= from {
		return 0, nil
	}
	n, err := io.Copy(w, io.NewSectionReader(f, from, to-from))
	if err != nil {
		return n, fmt.Errorf("copy log: %w", err)
	}
	return n, nil
}

// part is a byte range of a rotated copy of a log.
type part struct {
	f        *os.File
	from, to int64
}

// tailParts finds the last lines lines (all with 0) of the log at path,
// whose current file f holds size bytes: where they start in f, and the
// parts of its rotated copies path.1, path.2, ... (open; newest first)
// when f has fewer.
func tailParts(f *os.File, size int64, path string, lines int) (start int64, older []part, err error) {
	need := lines
	start, found, err := tailStart(f, size, need)
	if err != nil {
		return 0, nil, err
	}
	for i := 1; lines == 0 || found < need; i++ {
		rf, err := os.Open(fmt.Sprintf("%s.%d", path, i))
		if err != nil {
			break // no older copy
		}
		ri, err := rf.Stat()
		if err != nil {
			rf.Close()
			break
		}
		need -= found
		var from int64
		from, found, err = tailStart(rf, ri.Size(), need)
		if err != nil {
			rf.Close()
			for _, o := range older {
				o.f.Close()
			}
			return 0, nil, err
		}
		older = append(older, part{rf, from, ri.Size()})
	}
	return start, older, nil
}

// tailStart returns where the last n lines of f's first size bytes start,
// and how many lines that is (fewer than n when f has fewer; every line
// with n == 0). A last line without its newline counts as a line.
func tailStart(f *os.File, size int64, n int) (start int64, found int, err error) {
	if size == 0 {
		return 0, 0, nil
	}
	buf := make([]byte, tailChunk)
	end := size
	// A final newline ends the last line; it does not start another.
	var last [1]byte
	if _, err := f.ReadAt(last[:], size-1); err != nil {
		return 0, 0, fmt.Errorf("read log: %w", err)
	}
	if last[0] == '\n' {
		end--
	}
	for pos := end; pos > 0; {
		k := min(int64(len(buf)), pos)
		pos -= k
		if _, err := f.ReadAt(buf[:k], pos); err != nil {
			return 0, 0, fmt.Errorf("read log: %w", err)
		}
		for i := k - 1; i >= 0; i-- {
			if buf[i] != '\n' {
				continue
			}
			found++
			if n > 0 && found == n {
				return pos + i + 1, found, nil
			}
		}
	}
	// The first line has no newline before it.
	found++
	if n > 0 && found > n {
		found = n
	}
	return 0, found, nil
}
