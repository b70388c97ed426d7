// Package container runs instances as containers of an image with a
// container runtime (podman or docker): pull, run, stop, logs and listing by
// label, as argv for the runtime's command line. Where the command runs is a
// Runner's business: this machine (the local provider) or a host over SSH
// (the ssh provider); both build the same argv here, never a shell string.
//
// A container shoal runs carries labels: shoal.owner (the shoal that started
// it), shoal.host (the host it was placed on: hosts may share a runtime's
// storage, as network namespaces on one machine do), shoal.instance and
// shoal.group. Adoption after a restart checks them; a sweep stops and
// removes the containers of an owner that nobody keeps. Containers run with
// --rm, so that one whose process ended, or was killed by anyone, is
// removed by the runtime's monitor: none is left behind.
package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// Labels shoal puts on its containers.
const (
	LabelOwner    = "shoal.owner"
	LabelHost     = "shoal.host"
	LabelInstance = "shoal.instance"
	LabelGroup    = "shoal.group"
)

// Runner runs a runtime's argv where the containers live and returns its
// stdout; with w set, stdout and stderr go to w as they come instead
// (logs: a runtime writes a container's stderr to its own). An
// error of a command that ran carries its stderr: the runtime's own words.
type Runner interface {
	Run(ctx context.Context, argv []string, w io.Writer) ([]byte, error)
}

// Local runs argv on this machine.
type Local struct{}

// maxStderr bounds the stderr kept for an error message.
const maxStderr = 2 << 10

// Run runs argv here; its environment is shoal's (a runtime's own settings,
// CONTAINERS_CONF or DOCKER_HOST, pass through).
func (Local) Run(ctx context.Context, argv []string, w io.Writer) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if w != nil {
		// A runtime writes a container's stderr to its own; the two
		// streams are copied by two goroutines, one at a time into w.
		lw := &lockedWriter{w: w}
		cmd.Stdout, cmd.Stderr = lw, io.MultiWriter(lw, &stderr)
	}
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > maxStderr {
			msg = "…" + msg[len(msg)-maxStderr:]
		}
		if msg != "" {
			return out.Bytes(), fmt.Errorf("%s %s: %w: %s", argv[0], argv[1], err, msg)
		}
		return out.Bytes(), fmt.Errorf("%s %s: %w", argv[0], argv[1], err)
	}
	return out.Bytes(), nil
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Spec is one container to run for an instance.
type Spec struct {
	// Name is the container's name, unique on the host (see Name).
	Name string
	// Owner, Host, Instance and Group are its labels.
	Owner, Host, Instance, Group string
	// HostAddr and HostPort are where the instance serves (HAProxy
	// connects there); the template's Port inside is published on them.
	HostAddr string
	HostPort int
	// Args and Env are the template's, expanded for the instance; Env
	// is KEY=VALUE.
	Args, Env []string
}

// Name returns a container name for instance: the instance's name and a
// suffix of the start time, so that a container of an earlier start of the
// name that is still being removed is never in the way.
func Name(instance string, now time.Time) string {
	return "shoal-" + instance + "-" + strconv.FormatInt(now.UnixMilli()%1e9, 36)
}

// PullArgv pulls t's image: with its credentials file and, for a plain-HTTP
// registry, podman's --tls-verify=false (this pull only).
func PullArgv(t *config.Template) []string {
	argv := []string{t.Runtime}
	if t.Runtime == config.RuntimeDocker && t.RegistryAuth != "" {
		argv = append(argv, "--config", t.RegistryAuth)
	}
	argv = append(argv, "pull")
	if t.Runtime == config.RuntimePodman {
		argv = append(argv, "--quiet")
		if t.RegistryAuth != "" {
			argv = append(argv, "--authfile", t.RegistryAuth)
		}
		if t.InsecureRegistry {
			argv = append(argv, "--tls-verify=false")
		}
	}
	return append(argv, t.Image)
}

// HasImageArgv succeeds when t's image is on the host already.
func HasImageArgv(t *config.Template) []string {
	return []string{t.Runtime, "image", "inspect", "--format", "{{.Id}}", t.Image}
}

// RunArgv starts s from t's image, detached, removed when it exits: its
// labels, the instance's port published on the host address, t's volumes,
// s's env, the stop timeout, then the image and s's args (the entrypoint's).
// The image is pulled beforehand (Pull), never by run.
func RunArgv(t *config.Template, s Spec) []string {
	argv := []string{t.Runtime, "run", "--detach", "--rm", "--pull=never", "--name", s.Name,
		"--label", LabelOwner + "=" + s.Owner,
		"--label", LabelHost + "=" + s.Host,
		"--label", LabelInstance + "=" + s.Instance,
		"--label", LabelGroup + "=" + s.Group,
		"--publish", fmt.Sprintf("%s:%d:%d", s.HostAddr, s.HostPort, t.Port),
		"--stop-timeout", strconv.Itoa(seconds(t.StopTimeout)),
	}
	for _, v := range t.Volumes {
		argv = append(argv, "--volume", v)
	}
	for _, e := range s.Env {
		argv = append(argv, "--env", e)
	}
	argv = append(argv, t.Image)
	return append(argv, s.Args...)
}

// StopArgv stops container id: the runtime's SIGTERM (the image's stop
// signal), SIGKILL after grace.
func StopArgv(runtime, id string, grace time.Duration) []string {
	return []string{runtime, "stop", "--time", strconv.Itoa(seconds(grace)), id}
}

// RemoveArgv removes container id, killing it if it still runs.
func RemoveArgv(runtime, id string) []string {
	return []string{runtime, "rm", "--force", id}
}

// LogsArgv writes container id's output: the last lines (0: all), then
// what comes with follow.
func LogsArgv(runtime, id string, lines int, follow bool) []string {
	argv := []string{runtime, "logs"}
	if lines > 0 {
		argv = append(argv, "--tail", strconv.Itoa(lines))
	}
	if follow {
		argv = append(argv, "--follow")
	}
	return append(argv, id)
}

// ListArgv lists the IDs of every container (running or not) labelled
// with owner and host.
func ListArgv(runtime, owner, host string) []string {
	return []string{runtime, "ps", "--all", "--quiet", "--no-trunc",
		"--filter", "label=" + LabelOwner + "=" + owner, "--filter", "label=" + LabelHost + "=" + host}
}

// InspectArgv describes containers as JSON.
func InspectArgv(runtime string, ids ...string) []string {
	return append([]string{runtime, "container", "inspect"}, ids...)
}

// seconds rounds d up to whole seconds, at least 1 for a positive d.
func seconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// Info is what shoal reads of a container.
type Info struct {
	ID     string
	Name   string
	Labels map[string]string
	// Running: its process runs; PID is that process on the host (0 when
	// it does not run).
	Running  bool
	Status   string
	PID      int
	ExitCode int
}

// inspected is the part of `inspect`'s JSON shoal reads (podman's and
// docker's agree on it).
type inspected struct {
	ID    string `json:"Id"`
	Name  string `json:"Name"`
	State struct {
		Status   string `json:"Status"`
		Running  bool   `json:"Running"`
		Pid      int    `json:"Pid"`
		ExitCode int    `json:"ExitCode"`
	} `json:"State"`
	Config struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
}

// ParseInspect reads `inspect`'s JSON array.
func ParseInspect(b []byte) ([]Info, error) {
	var raw []inspected
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("parse container inspect: %w", err)
	}
	out := make([]Info, len(raw))
	for i, r := range raw {
		out[i] = Info{ID: r.ID, Name: strings.TrimPrefix(r.Name, "/"), Labels: r.Config.Labels,
			Running: r.State.Running, Status: r.State.Status, PID: r.State.Pid, ExitCode: r.State.ExitCode}
		if !r.State.Running {
			out[i].PID = 0
		}
	}
	return out, nil
}

// ErrNoContainer reports a container that does not exist (any more).
var ErrNoContainer = errors.New("no such container")

// Pull pulls t's image through r; the error is the runtime's message (no
// such tag, authentication refused, registry unreachable).
func Pull(ctx context.Context, r Runner, t *config.Template) error {
	if _, err := r.Run(ctx, PullArgv(t), nil); err != nil {
		return fmt.Errorf("pull image %s: %w", t.Image, err)
	}
	return nil
}

// Ensure pulls t's image unless it is on the host already.
func Ensure(ctx context.Context, r Runner, t *config.Template) error {
	if _, err := r.Run(ctx, HasImageArgv(t), nil); err == nil {
		return nil
	}
	return Pull(ctx, r, t)
}

// Run starts s and returns it once its process runs. A container that
// could not be inspected after its start is removed: nothing is left
// running that the caller does not know of.
func Run(ctx context.Context, r Runner, t *config.Template, s Spec) (Info, error) {
	out, err := r.Run(ctx, RunArgv(t, s), nil)
	if err != nil {
		// A run may fail after it created the container (a port taken
		// at start): remove what may be there by name.
		_, _ = r.Run(context.WithoutCancel(ctx), RemoveArgv(t.Runtime, s.Name), nil)
		return Info{}, fmt.Errorf("run container of %s: %w", t.Image, err)
	}
	id := strings.TrimSpace(lastLine(out))
	if id == "" {
		id = s.Name
	}
	info, err := Inspect(ctx, r, t.Runtime, id)
	if err == nil && !info.Running {
		err = fmt.Errorf("exited at once (%s, exit code %d)", info.Status, info.ExitCode)
	}
	if err != nil {
		_, _ = r.Run(context.WithoutCancel(ctx), RemoveArgv(t.Runtime, id), nil)
		return Info{}, fmt.Errorf("container %s of %s: %w", s.Name, t.Image, err)
	}
	return info, nil
}

// lastLine is the last non-empty line of out (docker may print pull
// progress before the ID).
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// Inspect describes container id, or returns ErrNoContainer.
func Inspect(ctx context.Context, r Runner, runtime, id string) (Info, error) {
	out, err := r.Run(ctx, InspectArgv(runtime, id), nil)
	if err != nil {
		if noSuch(err) {
			return Info{}, fmt.Errorf("container %s: %w", id, ErrNoContainer)
		}
		return Info{}, fmt.Errorf("inspect container %s: %w", id, err)
	}
	infos, err := ParseInspect(out)
	if err != nil {
		return Info{}, err
	}
	if len(infos) != 1 {
		return Info{}, fmt.Errorf("container %s: %w", id, ErrNoContainer)
	}
	return infos[0], nil
}

// noSuch reports an error of a runtime that says the container is not
// there: both runtimes word it "no such container", podman also "no
// container with name or ID".
func noSuch(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no such container") || strings.Contains(s, "no container with") || strings.Contains(s, "no such object")
}

// Stop stops container id (grace between the stop signal and SIGKILL) and
// removes it; one already gone is not an error.
func Stop(ctx context.Context, r Runner, runtime, id string, grace time.Duration) error {
	_, err := r.Run(ctx, StopArgv(runtime, id, grace), nil)
	if err != nil && !noSuch(err) {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	// --rm removes it once stopped; a runtime that has not yet, or a
	// container left created but never started, is removed here.
	if _, err := r.Run(ctx, RemoveArgv(runtime, id), nil); err != nil && !noSuch(err) {
		return fmt.Errorf("remove container %s: %w", id, err)
	}
	return nil
}

// List describes every container labelled with owner and host.
func List(ctx context.Context, r Runner, runtime, owner, host string) ([]Info, error) {
	out, err := r.Run(ctx, ListArgv(runtime, owner, host), nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	ids := strings.Fields(string(out))
	if len(ids) == 0 {
		return nil, nil
	}
	out, err = r.Run(ctx, InspectArgv(runtime, ids...), nil)
	if err != nil && len(out) == 0 {
		// One removed between the list and the inspect fails the whole
		// inspect on some runtimes: inspect one by one.
		var infos []Info
		for _, id := range ids {
			info, err := Inspect(ctx, r, runtime, id)
			if errors.Is(err, ErrNoContainer) {
				continue
			}
			if err != nil {
				return nil, err
			}
			infos = append(infos, info)
		}
		return infos, nil
	}
	return ParseInspect(out)
}
