// Package cli is shoal's command line: `shoal serve` runs the core, the other
// commands talk to it over its unix socket.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/core"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // a job failed, the core is unreachable, or an internal error
	exitUsage   = 2 // bad input: invalid config, unknown group or plan, bad flags
	exitIgnored = 3 // a job was ignored
)

// exitError carries an exit code to main; msg may be empty when the command
// already printed what went wrong.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

type options struct {
	configPath string
	socket     string
	logFormat  string
	logLevel   string
	pprof      bool
	output     string
	stdout     io.Writer
	stderr     io.Writer

	// core is where client found the core from the config file; empty with
	// --socket.
	core config.CoreAddress
}

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(&options{stdout: stdout, stderr: stderr})
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "shoal: "+ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "shoal: "+err.Error())
	if strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)") {
		return exitUsage
	}
	return exitFailed
}

// Root returns the command tree, for documentation (docgen's CLI reference);
// its commands write nowhere.
func Root() *cobra.Command {
	return newRoot(&options{stdout: io.Discard, stderr: io.Discard})
}

// newRoot returns the command tree, writing to o's stdout and stderr.
func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "shoal",
		Short: "shoal is a self-hosted autoscaling load balancer (HAProxy data plane)",
		Example: `  shoal serve -c /etc/shoal/shoal.yaml
  shoal status
  shoal scale web up --sync`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(o.stdout)
	root.SetErr(o.stderr)
	pf := root.PersistentFlags()
	pf.StringVarP(&o.configPath, "config", "c", "", "config file (default: shoal.yaml in the current directory)")
	pf.StringVar(&o.socket, "socket", "", "the core's unix socket (default: from the config)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: exitUsage, msg: err.Error()} })
	root.AddCommand(serveCmd(o), validateCmd(o), statusCmd(o), scaleCmd(o), jobsCmd(o))
	root.AddCommand(instancesCmd(o), providersCmd(o), hostsCmd(o), logsCmd(o))
	root.AddCommand(deployCmd(o))
	root.AddCommand(reloadCmd(o), stopCmd(o), certsCmd(o))
	root.AddCommand(metricsCmd(o), sourcesCmd(o), cpuUsageCmd(o), eventsCmd(o), policyCmd(o))
	root.AddCommand(topCmd(o), versionCmd(o), checkCmd(o), haCmd(o), manCmd(root))
	root.AddCommand(initCmd(o))
	// cobra's own help and completion commands, made now to have examples.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch c.Name() {
		case "help":
			c.Example = "  shoal help scale"
		case "completion":
			c.Example = "  source <(shoal completion bash)"
			for _, sh := range c.Commands() {
				sh.Example = "  shoal completion " + sh.Name() + " > shoal." + sh.Name()
			}
		}
	}
	return root
}

func (o *options) configFile() string {
	if o.configPath != "" {
		return o.configPath
	}
	return "shoal.yaml"
}

func (o *options) loadConfig() (*config.Config, error) {
	cfg, err := config.Load(o.configFile())
	if err != nil {
		var el config.ErrorList
		if errors.As(err, &el) {
			fmt.Fprintln(o.stderr, err)
			return nil, &exitError{code: exitUsage, msg: fmt.Sprintf("%s: %d error(s) in config", o.configFile(), len(el))}
		}
		return nil, &exitError{code: exitUsage, msg: err.Error()}
	}
	return cfg, nil
}

// preflight runs the checks serve and validate share beyond the file itself
// (programs found, haproxy -c); problems are bad input, exit status 2.
func (o *options) preflight(ctx context.Context, cfg *config.Config) (haproxyChecked bool, err error) {
	checked, err := core.Preflight(ctx, cfg)
	var el config.ErrorList
	if errors.As(err, &el) {
		fmt.Fprintln(o.stderr, err)
		return checked, &exitError{code: exitUsage, msg: fmt.Sprintf("%s: %d error(s) in config", o.configFile(), len(el))}
	}
	if err != nil {
		return checked, &exitError{code: exitFailed, msg: err.Error()}
	}
	return checked, nil
}

// client finds the socket from --socket or the config file. A config file
// with errors (a bad edit under a running core) is read leniently and its
// errors are a warning: the core runs its own config, and the operator must
// still be able to look at it, stop it or ask it to reload.
func (o *options) client() (*api.Client, error) {
	c, local, err := o.coreClient()
	if len(local) > 0 {
		o.warnConfig(local)
	}
	return c, err
}

// coreClient is client without the warning: the config's errors, if any, are
// returned for the caller to report.
func (o *options) coreClient() (*api.Client, config.ErrorList, error) {
	if o.socket != "" {
		return api.NewClient(o.socket), nil, nil
	}
	if o.configPath == "" {
		if _, err := os.Stat("shoal.yaml"); err != nil {
			return nil, nil, &exitError{code: exitUsage, msg: "cannot find the core's socket: pass -c CONFIG or --socket PATH"}
		}
	}
	addr, err := config.LocateCore(o.configFile())
	var el config.ErrorList
	if err != nil && !errors.As(err, &el) {
		return nil, nil, &exitError{code: exitUsage, msg: err.Error()}
	}
	o.core = addr
	return api.NewClient(addr.Socket), el, nil
}

// warnConfig prints the config file's errors as a warning.
func (o *options) warnConfig(el config.ErrorList) {
	fmt.Fprintf(o.stderr, "shoal: warning: %s: %d error(s) in config (the running core keeps its own; shoal reload would refuse this file); using socket %s\n%v\n",
		o.configFile(), len(el), o.core.Socket, el)
}

// apiExit turns a client error into the right exit code and message.
func apiExit(err error) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && len(ae.Valid) > 0:
		return &exitError{code: exitUsage, msg: fmt.Sprintf("%s; valid: %s", ae.ErrorResponse.Error, strings.Join(ae.Valid, ", "))}
	case errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500:
		return &exitError{code: exitUsage, msg: ae.ErrorResponse.Error}
	case errors.Is(err, api.ErrCoreNotRunning):
		return &exitError{code: exitFailed, msg: err.Error()}
	}
	return &exitError{code: exitFailed, msg: err.Error()}
}

func serveCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run the core: HAProxy, the groups' reconcilers and the control API",
		Example: `  shoal serve -c /etc/shoal/shoal.yaml
  shoal serve --log-format json --log-level debug`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(o.stderr, o.logFormat, o.logLevel)
			if err != nil {
				return &exitError{code: exitUsage, msg: err.Error()}
			}
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			if os.Getenv("GOGC") == "" {
				// Most of serve's heap is the metrics ring, live for an
				// hour: Go's default (a heap twice the live one) put
				// 1,000 instances at 515 MiB resident; 50 % keeps them
				// under 300 MB for little CPU at rest.
				debug.SetGCPercent(50)
			}
			// SIGTERM does what the config's shutdown says (keep: leave
			// HAProxy and the instances serving for the next shoal serve);
			// SIGINT stops everything; SIGHUP reloads the config.
			ctx, stop := context.WithCancelCause(context.Background())
			defer stop(nil)
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
			defer signal.Stop(sigs)
			reload := make(chan struct{}, 1)
			go func() {
				for {
					select {
					case <-ctx.Done():
						return
					case sig := <-sigs:
						switch sig {
						case syscall.SIGHUP:
							log.Info("SIGHUP: reloading the config", "config", cfg.Path)
							select {
							case reload <- struct{}{}:
							default: // one is pending already
							}
						case syscall.SIGTERM:
							stop(core.ErrTerminated)
						default:
							stop(nil)
						}
					}
				}
			}()
			if _, err := o.preflight(ctx, cfg); err != nil {
				return err
			}
			if err := core.ServeOptions(ctx, cfg, log, core.Options{Frontends: frontends(cfg, log), Reload: reload, Pprof: o.pprof}); err != nil {
				return &exitError{code: exitFailed, msg: err.Error()}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.logFormat, "log-format", "logfmt", "log format: logfmt or json")
	cmd.Flags().StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	cmd.Flags().BoolVar(&o.pprof, "pprof", false, "serve Go's profiles under /debug/pprof/ on the admin socket (never on TCP)")
	return cmd
}

func validateCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:     "validate",
		Short:   "check a config file and exit (status 2 on errors)",
		Example: `  shoal validate -c shoal.yaml && systemctl reload shoal`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.loadConfig()
			if err != nil {
				return err
			}
			checked, err := o.preflight(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			note := "haproxy -c passed"
			if !checked {
				note = "HAProxy not installed: haproxy -c skipped"
			}
			fmt.Fprintf(o.stdout, "%s: OK (%d group(s): %s; %s)\n", o.configFile(), len(cfg.Groups), strings.Join(cfg.GroupNames(), ", "), note)
			if remote := core.RemoteGroups(cfg); len(remote) > 0 {
				fmt.Fprintf(o.stdout, "not checked here: the programs of %s run on their providers' hosts; with shoal serve running, `shoal providers check` connects and checks them there\n", strings.Join(remote, ", "))
			}
			return nil
		},
	}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "logfmt", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be logfmt or json, got %q", format)
}
