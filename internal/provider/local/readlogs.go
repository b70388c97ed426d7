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
	defer func() { f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("read log of instance %s: %w", rec.Name, err)
	}
	off, err := writeTail(f, fi.Size(), path, opts.Lines, w)
	if err != nil || !opts.Follow {
		return err
	}
	t := time.NewTicker(followPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := os.Stat(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("follow log of instance %s: %w", rec.Name, err)
		}
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("follow log of instance %s: %w", rec.Name, err)
		}
		switch {
		case cur != nil && !os.SameFile(cur, fi):
			// Replaced (expired and started anew): the rest of the old
			// file, then the new one from its start.
			if _, err := copyRange(w, f, off, fi.Size()); err != nil {
				return err
			}
			nf, err := os.Open(path)
			if err != nil {
				return fmt.Errorf("follow log of instance %s: %w", rec.Name, err)
			}
			f.Close()
			f, off = nf, 0
			continue
		case fi.Size() < off:
			// Truncated by a rotation: what came after off is in the copy.
			if c, err := os.Open(path + ".1"); err == nil {
				if ci, err := c.Stat(); err == nil && ci.Size() >= off {
					_, err = copyRange(w, c, off, ci.Size())
					c.Close()
					if err != nil {
						return err
					}
				} else {
					c.Close()
				}
			}
			off = 0
		}
		n, err := copyRange(w, f, off, fi.Size())
		off += n
		if err != nil {
			return err
		}
	}
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

// writeTail writes the last lines lines (all with 0) of the log at path,
// whose current file f holds size bytes, reaching into its rotated copies
// path.1, path.2, ... when f has fewer; it returns the offset in f it got to.
func writeTail(f *os.File, size int64, path string, lines int, w io.Writer) (int64, error) {
	type part struct {
		f    *os.File
		from int64
		to   int64
	}
	parts := []part{}
	need := lines
	start, found, err := tailStart(f, size, need)
	if err != nil {
		return 0, err
	}
	parts = append(parts, part{f, start, size})
	for i := 1; lines == 0 || found < need; i++ {
		rf, err := os.Open(fmt.Sprintf("%s.%d", path, i))
		if err != nil {
			break // no older copy
		}
		defer rf.Close()
		ri, err := rf.Stat()
		if err != nil {
			break
		}
		need -= found
		start, found, err = tailStart(rf, ri.Size(), need)
		if err != nil {
			return 0, err
		}
		parts = append(parts, part{rf, start, ri.Size()})
	}
	for i := len(parts) - 1; i >= 0; i-- {
		if _, err := copyRange(w, parts[i].f, parts[i].from, parts[i].to); err != nil {
			return 0, err
		}
	}
	return size, nil
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
