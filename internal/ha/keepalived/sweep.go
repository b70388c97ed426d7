package keepalived

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"

	"github.com/shoal-lb/shoal/internal/proc"
)

// sweep stops the keepalived (and whatever it forked) that an earlier run
// of shoal with this Dir left behind: the processes whose environment holds
// SHOAL_KEEPALIVED=dir. A marked group leader is stopped with its group; a
// marked process whose group leader is gone (an orphaned track script) alone;
// one in a live group of another leader is left, as it is not a keepalived
// of ours.
func sweep(ctx context.Context, dir string, log *slog.Logger) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("find stray keepalived: %w", err)
	}
	self := os.Getpid()
	want := markerEnv + "=" + dir
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := proc.Environ(pid)
		if err != nil || !slices.Contains(env, want) {
			continue
		}
		pgid, err := proc.Pgid(pid)
		if err != nil {
			continue
		}
		adopt := proc.Adopt
		if pgid != pid {
			if _, err := proc.Pgid(pgid); !errors.Is(err, proc.ErrGone) {
				continue
			}
			adopt = proc.AdoptMember
		}
		start, err := proc.StartTicks(pid)
		if err != nil {
			continue
		}
		p, err := adopt(pid, start)
		if err != nil {
			continue // exited meanwhile
		}
		log.Warn("stopping a keepalived left by an earlier run", "pid", pid)
		if err := p.Stop(ctx, stopGrace); err != nil {
			errs = append(errs, fmt.Errorf("stop stray keepalived %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}
