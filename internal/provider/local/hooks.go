package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/proc"
)

// envHook names the hook a process runs for, beside the instance marker: a
// hook left running by a crashed shoal is a stray like its instance.
const envHook = "SHOAL_HOOK"

// hookKillGrace is how long a hook gets between SIGTERM and SIGKILL once its
// timeout has passed or shoal gives up on it.
const hookKillGrace = time.Second

// runHook runs one lifecycle hook of an instance to completion: argv
// expanded like the instance's command (no shell), the instance's env and
// working directory, its own process group, output appended to the
// instance's log between two lines of shoal's. It fails on a non-zero exit,
// on its timeout (the group is killed) and when ctx ends.
func (p *Provider) runHook(ctx context.Context, hook string, h *config.Hook, tmpl config.Template, data config.TemplateData) error {
	argv, err := tmpl.ExpandHook(h, data)
	if err != nil {
		return fmt.Errorf("%s: expand: %w", hook, err)
	}
	if argv[0], err = resolveCommand(argv[0], tmpl.Dir); err != nil {
		return fmt.Errorf("%s: %w", hook, err)
	}
	_, tenv, err := tmpl.Expand(data)
	if err != nil {
		return fmt.Errorf("%s: expand env: %w", hook, err)
	}
	logDir := filepath.Join(p.stateDir, "logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return fmt.Errorf("%s: create log directory: %w", hook, err)
	}
	logPath := filepath.Join(logDir, data.Name+".log")
	env := slices.Concat(os.Environ(), tenv, []string{
		envStateDir + "=" + p.owner,
		envInstance + "=" + data.Name,
		envHook + "=" + hook,
	})
	note(logPath, "shoal: %s: running %q (timeout %s)", hook, argv, h.Timeout)
	start := time.Now()
	pr, err := proc.Start(proc.Spec{Argv: argv, Env: env, Dir: tmpl.Dir, Log: logPath})
	if err != nil {
		note(logPath, "shoal: %s: %v", hook, err)
		return fmt.Errorf("%s: %w", hook, err)
	}
	timer := time.NewTimer(h.Timeout)
	defer timer.Stop()
	var failure error
	select {
	case <-pr.Done():
		if r := pr.ExitReason(); r != "exit status 0" {
			failure = fmt.Errorf("%s: %s", hook, r)
		}
	case <-timer.C:
		failure = fmt.Errorf("%s: timed out after %s; killed", hook, h.Timeout)
	case <-ctx.Done():
		failure = fmt.Errorf("%s: %w; killed", hook, context.Cause(ctx))
	}
	if failure != nil {
		// Whatever the hook started in its group goes with it.
		sctx, cancel := context.WithTimeout(context.Background(), hookKillGrace+5*time.Second)
		_ = pr.Stop(sctx, hookKillGrace)
		cancel()
		note(logPath, "shoal: %s failed after %s: %v", hook, time.Since(start).Round(time.Millisecond), failure)
		p.log.Warn("hook failed", "hook", hook, "instance", data.Name, "err", failure)
		return failure
	}
	note(logPath, "shoal: %s done in %s", hook, time.Since(start).Round(time.Millisecond))
	return nil
}

// note appends one line of shoal's own to an instance's log; a log that
// cannot be written loses the line, not the hook.
func note(path, format string, args ...any) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, time.Now().UTC().Format(time.RFC3339)+" "+format+"\n", args...)
}
