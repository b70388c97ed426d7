// Package scalefaults is `shoal-bench scalefaults`: bad input and faults at
// scale (issue 45), each against a baseline measured in the same run.
//
//   - backoff: a group of 500 whose template cannot start (its program
//     exits at once) beside other groups at rest. Measured over a window
//     after the first pass of 500 failed: shoal's CPU while the group backs
//     off, the time of a scale request on another group, and how often the
//     failure is reported (instance.launch_failed events, "instance failed"
//     warnings in shoal's log) and how many launches the back-off makes.
//     Baseline: the same harness with the group's template working and its
//     500 instances at rest.
//   - host: an SSH host (internal/testhost: a network namespace with sshd)
//     running 100 instances dies (its processes killed and its link cut:
//     packets dropped, no RST). Measured: until its instances are out of
//     HAProxy's rotation, until the host is marked down, until the
//     replacements that fit serve on the other hosts; the most instances
//     any host held against its capacity; and, the other hosts having room
//     for 80 only, how the group reports the 20 it cannot place. Baseline:
//     the same with a host of 4, in the same run.
//
// What is real: shoal serve, HAProxy checking every instance, the local and
// ssh providers, sshd in network namespaces. What is stood in: instances are
// internal/testbin/standin (4 MB, answers 200), as in `shoal-bench scale`.
package scalefaults

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shoal-lb/shoal/internal/bench"
)

var Command = &bench.Command{
	Name:    "scalefaults",
	Summary: "faults at scale: a group of 500 whose template cannot start (back-off CPU, reports, other groups' scaling) and an SSH host with 100 instances dying (rotation, capacity)",
	Run:     run,
}

// details is the report's raw data.
type details struct {
	Backoff *backoffRun `json:"backoff,omitempty"`
	Host    *hostRun    `json:"host,omitempty"`
}

func run(ctx context.Context, env *bench.Env, fs *flag.FlagSet, args []string) (*bench.Report, error) {
	which := fs.String("scenarios", "backoff,host", "which to run: backoff, host or both")
	bad := fs.Int("bad", 500, "size of the group whose template cannot start")
	others := fs.Int("others", 10, "other groups, 20 instances at most each (10 at rest)")
	window := fs.Duration("window", 90*time.Second, "how long the back-off (and its baseline's rest) is measured: past at least one 60 s back-off")
	big := fs.Int("host-instances", 100, "instances on the SSH host that dies")
	small := fs.Int("host-baseline", 4, "instances on the SSH host that dies in the baseline")
	room := fs.Int("room", 80, "room on the other hosts for the dead host's instances (50 + the rest): fewer than -host-instances tests the shortage's report")
	var bins bench.BinFlags
	bins.RegisterShoal(fs)
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	runBackoff, runHost := false, false
	for s := range strings.SplitSeq(*which, ",") {
		switch strings.TrimSpace(s) {
		case "backoff":
			runBackoff = true
		case "host":
			runHost = true
		default:
			return nil, bench.BadUsage("-scenarios %q: backoff, host or both (comma-separated)", *which)
		}
	}
	if *bad < 1 || *bad > 1000 || *others < 1 || *others > 40 || *window < 30*time.Second || *small < 1 || *big <= *small || *big > 300 || *room <= 50 {
		return nil, bench.BadUsage("-bad 1..1000, -others 1..40, -window >= 30s, 1 <= -host-baseline < -host-instances <= 300 and -room > 50 please")
	}
	sbin, err := filepath.Abs(bins.Shoal)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(sbin); err != nil {
		return nil, fmt.Errorf("shoal binary: %w (run make build)", err)
	}
	standin := filepath.Join(env.Work, "standin")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", standin, "./internal/testbin/standin").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the stand-in instance (run from the repository root): %w: %s", err, out)
	}

	rep := &bench.Report{Date: time.Now(), Machine: bench.NewMachine()}
	det := &details{}
	rep.Details = det
	var md strings.Builder
	if runBackoff {
		b, err := measureBackoff(ctx, env, sbin, standin, *bad, *others, *window)
		if err != nil {
			return nil, fmt.Errorf("backoff: %w", err)
		}
		det.Backoff = b
		rep.Figures = append(rep.Figures, b.figures()...)
		md.WriteString(b.markdown())
	}
	if runHost {
		h, err := measureHost(ctx, env, sbin, standin, *small, *big, *room)
		if err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		det.Host = h
		rep.Figures = append(rep.Figures, h.figures()...)
		md.WriteString(h.markdown())
	}
	rep.Settings = []bench.Setting{
		{Name: "instances", Value: "internal/testbin/standin processes; HAProxy checks every instance"},
		{Name: "backoff", Value: fmt.Sprintf("group `bad` of %d (its program exits at once) beside %d groups of 10 at rest, local provider; window %v after the first pass failed; baseline: the same with bad's template working, its %d at rest", *bad, *others, *window, *bad)},
		{Name: "host", Value: fmt.Sprintf("ssh provider on network-namespace hosts, placement pack; the dying host holds all of the group (%d, baseline %d), the two others have room for %d; health every 500 ms, fall 2, timeout 500 ms; host_down_after %v, connect_timeout 15 s (the shared machine's load, 40 to 70, made live hosts' 5 s shell answers fail); the instances serve 35 s (past 30 s: steadily) before the host dies by SIGKILL of everything in it and its link set down", *big, *small, *room, hostDownAfter)},
	}
	rep.Markdown = md.String()
	return rep, nil
}

// wait sleeps d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// countLog counts the lines of the log at path, from byte offset on, that
// contain every one of words.
func countLog(path string, offset int64, words ...string) int {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return 0
	}
	n := 0
	for line := range strings.Lines(string(data[offset:])) {
		all := true
		for _, w := range words {
			if !strings.Contains(line, w) {
				all = false
				break
			}
		}
		if all {
			n++
		}
	}
	return n
}

// logSize is the log's length now: where a later count starts.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
