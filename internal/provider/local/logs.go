package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// logCheckEvery is how often MaintainLogs looks at the log sizes.
const logCheckEvery = 5 * time.Second

// instanceLogRE matches what this package writes to the logs directory,
// NAME.log and its rotated NAME.log.N, with NAME an instance name
// (GROUP-NNN); other files there are not ours to touch.
var instanceLogRE = regexp.MustCompile(`^([a-z0-9][a-z0-9_-]*-[0-9]{3,})\.log(?:\.([0-9]+))?$`)

// MaintainLogs rotates and expires instance logs as cfg says until ctx ends.
func (p *Provider) MaintainLogs(ctx context.Context, cfg config.InstanceLogs) {
	t := time.NewTicker(logCheckEvery)
	defer t.Stop()
	for {
		if err := p.maintainLogs(cfg, time.Now()); err != nil {
			p.log.Warn("maintaining instance logs failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maintainLogs rotates every NAME.log larger than cfg.MaxSize and deletes the
// logs of instances that do not run and were last written more than
// cfg.Retention before now.
//
// Rotation copies the log, then truncates it: the instance keeps writing to
// the descriptor it was started with (shoal is not in the path of its output,
// so it survives restarts of shoal), and O_APPEND makes its next write land
// at the new end. What it writes between the copy and the truncation is lost;
// the window is one copy of MaxSize bytes.
func (p *Provider) maintainLogs(cfg config.InstanceLogs, now time.Time) error {
	dir := filepath.Join(p.stateDir, "logs")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read log directory: %w", err)
	}
	live := p.liveNames()
	var errs []error
	for _, e := range entries {
		m := instanceLogRE.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		name, rotated := m[1], m[2] != ""
		path := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if !live[name] && now.Sub(fi.ModTime()) > cfg.Retention {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			} else {
				p.log.Info("deleted the log of an instance gone for longer than its retention", "file", path)
			}
			p.logMu.Lock()
			delete(p.rotations, path)
			p.logMu.Unlock()
			continue
		}
		if rotated {
			// Left over from a larger keep.
			if n, _ := strconv.Atoi(m[2]); n > cfg.Keep {
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, err)
				}
			}
			continue
		}
		if fi.Size() > cfg.MaxSize {
			p.logMu.Lock()
			err := rotate(path, cfg.Keep)
			if err == nil {
				p.rotations[path]++
			}
			p.logMu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rotate shifts path.1 … path.keep-1 up by one, copies path to path.1 and
// truncates path. Each copy is a new file (written aside, then renamed):
// a follower holding one open reads what it held.
func rotate(path string, keep int) error {
	for i := keep - 1; i >= 1; i-- {
		err := os.Rename(fmt.Sprintf("%s.%d", path, i), fmt.Sprintf("%s.%d", path, i+1))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate log %s: %w", path, err)
		}
	}
	if keep > 0 {
		if err := copyFile(path, path+".1"); err != nil {
			return fmt.Errorf("rotate log %s: %w", path, err)
		}
	}
	if err := os.Truncate(path, 0); err != nil {
		return fmt.Errorf("rotate log %s: %w", path, err)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".new"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// liveNames returns the names of the instances this Provider runs.
func (p *Provider) liveNames() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := make(map[string]bool, len(p.names))
	for name, pr := range p.names {
		if !exited(pr) {
			live[name] = true
		}
	}
	return live
}
