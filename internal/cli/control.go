package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func reloadCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:     "reload",
		Short:   "re-read the config file in the running core (as SIGHUP does); exit 2 if it is invalid",
		Example: `  shoal reload -c /etc/shoal/shoal.yaml`,
		Long: `The core re-reads the file it was started with and runs every check of
shoal validate. An invalid file changes nothing (the core answers with every
error as FILE:LINE:COL: field: what was expected; exit status 2); the CLI
finds the core's socket in such a file as far as it can be read. Otherwise group
settings apply at once, removed groups are drained and stopped, added groups
start, and HAProxy is reloaded without dropping a connection — only when its
configuration changed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The core reads the file itself and reports its errors; the
			// CLI's own reading only finds the socket.
			c, local, err := o.coreClient()
			if err != nil {
				return err
			}
			resp, err := c.Reload(cmd.Context())
			if len(local) > 0 && errors.Is(err, api.ErrCoreNotRunning) {
				o.warnConfig(local)
			}
			var ae *api.Error
			if errors.As(err, &ae) && len(ae.Errors) > 0 {
				for _, e := range ae.Errors {
					fmt.Fprintln(o.stderr, e)
				}
				return &exitError{code: exitUsage, msg: ae.ErrorResponse.Error}
			}
			if err != nil {
				return apiExit(err)
			}
			haproxy := "HAProxy unchanged"
			if resp.HAProxyReloaded {
				haproxy = "HAProxy reloaded"
			}
			parts := []string{haproxy}
			for _, p := range []struct {
				what  string
				names []string
			}{{"added", resp.Added}, {"removed", resp.Removed}, {"changed", resp.Changed}} {
				if len(p.names) > 0 {
					parts = append(parts, p.what+" "+strings.Join(p.names, ", "))
				}
			}
			fmt.Fprintf(o.stdout, "config reloaded: %s\n", strings.Join(parts, "; "))
			return nil
		},
	}
}

func stopCmd(o *options) *cobra.Command {
	var (
		keep    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stop",
		Short: "stop the core and everything it runs, or with --keep-running the core alone",
		Example: `  shoal stop
  shoal stop --keep-running   # then upgrade shoal and start it again`,
		Long: `Without flags: HAProxy is soft-stopped and every instance is stopped, as
SIGINT does. With --keep-running (for a restart or an upgrade of shoal): HAProxy
and the instances keep serving, and the next shoal serve adopts them without
dropping a request. Waits until the core has exited.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if _, err := c.Shutdown(cmd.Context(), keep); err != nil {
				return apiExit(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for {
				_, err := c.Status(ctx)
				if errors.Is(err, api.ErrCoreNotRunning) {
					break
				}
				select {
				case <-ctx.Done():
					return &exitError{code: exitFailed, msg: fmt.Sprintf("the core still answers %s after the stop request", timeout)}
				case <-time.After(100 * time.Millisecond):
				}
			}
			// The API closes first: the core has exited when it lets go of
			// its state directory, and only then can the next one start.
			if o.core.StateDir != "" {
				if err := waitUnlocked(ctx, filepath.Join(o.core.StateDir, "shoal.lock")); err != nil {
					return &exitError{code: exitFailed, msg: fmt.Sprintf("the core has not exited %s after the stop request: %v", timeout, err)}
				}
			}
			if keep {
				fmt.Fprintln(o.stdout, "shoal stopped; HAProxy and the instances keep serving for the next shoal serve")
			} else {
				fmt.Fprintln(o.stdout, "shoal stopped, with HAProxy and every instance")
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&keep, "keep-running", false, "leave HAProxy and the instances serving (restart or upgrade of shoal)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait for the core to exit")
	return cmd
}

// waitUnlocked waits until no process holds the core's lock file.
func waitUnlocked(ctx context.Context, path string) error {
	for {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close() // also releases the lock if it was taken
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
