// Package exec is the cloud driver of any cloud with a CLI: three argv
// templates (start, stop, list) that shoal runs without a shell, each
// bounded by a timeout, answering JSON on stdout. An operator drives
// usacloud, aws, gcloud or a Terraform wrapper with it, no plugin needed.
//
// start prints one server, list a JSON array of them:
//
//	{"id": "i-0abc", "name": "web-001", "address": "10.0.0.5" (or "host:port", or "ip": ...),
//	 "state": "running", "tags": {"shoal-owner": "...", "shoal-group": "web", "shoal-instance": "web-001"}}
//
// stop deletes {{.ID}} (deleting a server already gone must succeed).
// power_off and power_on (optional, together) shut {{.ID}} down and boot
// it again, for a warm pool that waits stopped; list then says "stopped"
// of a server shut down. The
// commands get the server's tags in the environment (SHOAL_OWNER,
// SHOAL_GROUP, SHOAL_INSTANCE, and all of them as a JSON object in
// SHOAL_TAGS); list must print them back, since only servers tagged with
// this shoal's owner are its. A command that exits with status 75
// (EX_TEMPFAIL) asks to be retried later (throttled, no capacity now).
package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
)

const (
	// maxOutput bounds what a command may print on stdout.
	maxOutput = 1 << 20
	// stderrTail is how much of a failing command's stderr its error
	// quotes: its end, where a CLI says what went wrong.
	stderrTail = 2 << 10
	// exitTempFail is EX_TEMPFAIL from sysexits.h: try again later.
	exitTempFail = 75
	// waitDelay bounds the wait for a command's output pipes after it has
	// exited (or been killed) while something it started still holds them.
	waitDelay = 2 * time.Second
)

// Driver runs an exec provider's commands. It is safe for concurrent use.
type Driver struct {
	start, stop, list Command
	// powerOff and powerOn are nil unless configured (power_off,
	// power_on): only then is the driver a cloud.PowerDriver.
	powerOff, powerOn *Command
	timeout           time.Duration
	port              int
}

var _ cloud.Driver = (*Driver)(nil)

// powered is a Driver with power_off and power_on: a cloud.PowerDriver.
type powered struct{ *Driver }

var _ cloud.PowerDriver = powered{}

// PowerOff runs power_off for id.
func (d powered) PowerOff(ctx context.Context, id string) error {
	return d.run(ctx, "power_off", *d.powerOff, Data{ID: id, Port: d.port}, nil, nil)
}

// PowerOn runs power_on for id.
func (d powered) PowerOn(ctx context.Context, id string) error {
	return d.run(ctx, "power_on", *d.powerOn, Data{ID: id, Port: d.port}, nil, nil)
}

// Cloud is d as the provider drives it: a cloud.PowerDriver when it has
// power_off and power_on.
func (d *Driver) Cloud() cloud.Driver {
	if d.powerOff != nil && d.powerOn != nil {
		return powered{d}
	}
	return d
}

// New compiles cfg's command templates; port is the provider's port
// ({{.Port}} in them).
func New(cfg Config, port int) (*Driver, error) {
	d := &Driver{timeout: cfg.Timeout, port: port}
	if d.timeout <= 0 {
		d.timeout = Defaults.Timeout
	}
	for _, c := range []struct {
		name string
		argv []string
		out  *Command
	}{{"start", cfg.Start, &d.start}, {"stop", cfg.Stop, &d.stop}, {"list", cfg.List, &d.list}} {
		cmd, err := CompileCommand(c.argv)
		if err != nil {
			return nil, fmt.Errorf("exec %s: %w", c.name, err)
		}
		*c.out = cmd
	}
	for _, c := range []struct {
		name string
		argv []string
		out  **Command
	}{{"power_off", cfg.PowerOff, &d.powerOff}, {"power_on", cfg.PowerOn, &d.powerOn}} {
		if len(c.argv) == 0 {
			continue
		}
		cmd, err := CompileCommand(c.argv)
		if err != nil {
			return nil, fmt.Errorf("exec %s: %w", c.name, err)
		}
		*c.out = &cmd
	}
	return d, nil
}

// Create runs start and reads the server it prints.
func (d *Driver) Create(ctx context.Context, req cloud.CreateRequest) (cloud.Server, error) {
	data := Data{Name: req.Name, Group: req.Group, Index: req.Index, Plan: req.Plan, Owner: req.Tags[cloud.TagOwner], Port: d.port}
	var s cloud.Server
	err := d.run(ctx, "start", d.start, data, req.Tags, func(out []byte) error {
		var e entry
		if err := decodeOne(out, &e); err != nil {
			return fmt.Errorf("%w; it printed %s", err, quote(out))
		}
		var err error
		if s, err = d.server(e); err != nil {
			return fmt.Errorf("%w; it printed %s", err, quote(out))
		}
		if s.IP == "" {
			return fmt.Errorf("no address in its answer (want \"address\" or \"ip\"); it printed %s", quote(out))
		}
		return nil
	})
	if err != nil {
		return cloud.Server{}, err
	}
	if s.Tags == nil {
		s.Tags = req.Tags
	}
	return s, nil
}

// Delete runs stop for id.
func (d *Driver) Delete(ctx context.Context, id string) error {
	return d.run(ctx, "stop", d.stop, Data{ID: id, Port: d.port}, nil, nil)
}

// List runs list and returns the servers tagged with owner. Output that
// does not parse is an error, never an empty listing.
func (d *Driver) List(ctx context.Context, owner string) ([]cloud.Server, error) {
	var servers []cloud.Server
	err := d.run(ctx, "list", d.list, Data{Owner: owner, Port: d.port}, map[string]string{cloud.TagOwner: owner}, func(out []byte) error {
		var es []entry
		if err := decodeOne(out, &es); err != nil {
			return fmt.Errorf("%w (want a JSON array of servers); it printed %s", err, quote(out))
		}
		for i, e := range es {
			if e.Tags[cloud.TagOwner] != owner {
				continue // not this shoal's: whatever it is, it is not ours to judge
			}
			s, err := d.server(e)
			if err != nil {
				return fmt.Errorf("server [%d]: %w", i, err)
			}
			servers = append(servers, s)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return servers, nil
}

// entry is a server as a command prints it.
type entry struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Address string            `json:"address"`
	IP      string            `json:"ip"`
	State   string            `json:"state"`
	Tags    map[string]string `json:"tags"`
	Created time.Time         `json:"created"`
}

// server is e as a server of this provider: an address without a port
// needs the provider's.
func (d *Driver) server(e entry) (cloud.Server, error) {
	s, err := e.server(d)
	if err == nil && s.IP != "" && s.Port == 0 && d.port == 0 {
		err = fmt.Errorf("address %q has no port, and the provider sets none: print \"host:port\", or set the provider's port", s.IP)
	}
	return s, err
}

func (e entry) server(d *Driver) (cloud.Server, error) {
	if e.ID == "" {
		return cloud.Server{}, errors.New(`no "id"`)
	}
	s := cloud.Server{ID: e.ID, Name: e.Name, State: e.State, Phase: phase(e.State), Tags: e.Tags, Created: e.Created}
	if s.Phase == cloud.Gone && d.powerOff != nil && strings.EqualFold(e.State, "stopped") {
		// With power_off, "stopped" is shut down, not deleted.
		s.Phase = cloud.Stopped
	}
	if s.Name == "" {
		s.Name = e.ID
	}
	addr := e.Address
	if addr == "" {
		addr = e.IP
	}
	if addr == "" {
		return s, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host = strings.Trim(addr, "[]")
	} else {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return s, fmt.Errorf("address %q: port must be from 1 to 65535", addr)
		}
		s.Port = n
	}
	if host == "" || strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == '/' || r == '@' }) {
		return s, fmt.Errorf("address %q is not an IP address or host name", addr)
	}
	s.IP = host
	return s, nil
}

// phase maps a CLI's state words to phases; no state means running, and
// an unknown word waits (pending) rather than deleting anything.
func phase(state string) cloud.Phase {
	switch strings.ToLower(strings.ReplaceAll(state, "_", "-")) {
	case "", "running", "up", "active", "ready", "available":
		return cloud.Running
	case "stopping", "shutting-down", "deleting", "terminating", "cleanup":
		return cloud.Stopping
	case "gone", "deleted", "terminated", "destroyed", "stopped", "down", "missing":
		return cloud.Gone
	}
	return cloud.Pending
}

// decodeOne decodes exactly one JSON value from out.
func decodeOne(out []byte, v any) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return errors.New("no output")
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// run expands and runs one command and hands its stdout to parse (nil:
// its output is not read). Every failure quotes the tail of its stderr,
// whatever it was: an exit status, a timeout, too much output, or output
// parse refuses. Status 75 and nothing else is ErrRetryable.
func (d *Driver) run(ctx context.Context, what string, c Command, data Data, tags map[string]string, parse func(out []byte) error) error {
	argv, err := c.Expand(data)
	if err != nil {
		return fmt.Errorf("%s: expand command: %w", what, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, d.timeout, fmt.Errorf("timed out after %s", d.timeout))
	defer cancel()
	cmd := osexec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), tagEnv(tags)...)
	// Its own process group, so that a timeout kills what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	stdout := &limited{max: maxOutput, over: cancel}
	stderr := &tail{max: stderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	switch {
	case stdout.overflow:
		return fmt.Errorf("%s: %s printed more than %d bytes (1 MiB); killed%s", what, argv[0], maxOutput, stderr.suffix())
	case ctx.Err() != nil && context.Cause(ctx) != nil && err != nil:
		return fmt.Errorf("%s: %s %v; killed%s", what, argv[0], context.Cause(ctx), stderr.suffix())
	case err != nil:
		var ee *osexec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == exitTempFail {
			return fmt.Errorf("%s: %s asks to retry later (exit status %d)%s: %w", what, argv[0], exitTempFail, stderr.suffix(), cloud.ErrRetryable)
		}
		return fmt.Errorf("%s: %s: %v%s", what, argv[0], err, stderr.suffix())
	}
	if parse != nil {
		if err := parse(stdout.buf.Bytes()); err != nil {
			return fmt.Errorf("%s: %w%s", what, err, stderr.suffix())
		}
	}
	return nil
}

// tagEnv passes tags to a command.
func tagEnv(tags map[string]string) []string {
	if len(tags) == 0 {
		return nil
	}
	js, _ := json.Marshal(tags) // strings only: it cannot fail
	env := []string{"SHOAL_TAGS=" + string(js)}
	for k, name := range map[string]string{cloud.TagOwner: "SHOAL_OWNER", cloud.TagGroup: "SHOAL_GROUP", cloud.TagInstance: "SHOAL_INSTANCE"} {
		if v, ok := tags[k]; ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// quote shows a command's output in an error, bounded.
func quote(out []byte) string {
	const max = 200
	s := string(out)
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.Quote(s)
}

// limited keeps up to max bytes and calls over (once) past them.
type limited struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	max      int
	over     func()
	overflow bool
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.overflow {
		return len(p), nil
	}
	if l.buf.Len()+len(p) > l.max {
		l.overflow = true
		l.over()
		return len(p), nil
	}
	return l.buf.Write(p)
}

// tail keeps the last max bytes written.
type tail struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

// suffix is ": stderr: ..." with the tail, or "" if it printed nothing.
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(t.b), "?"))
	if s == "" {
		return ""
	}
	return "; stderr: " + s
}
