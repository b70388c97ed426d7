package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/testbin"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider"
)

// numbers returns the N of every "line N" in out, and fails on any other
// line after the first numbered one.
func numbers(t *testing.T, out string) []int {
	t.Helper()
	var ns []int
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		v, ok := strings.CutPrefix(l, "line ")
		if !ok {
			if len(ns) > 0 {
				t.Fatalf("line %q after numbered lines", l)
			}
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("line %q", l)
		}
		ns = append(ns, n)
	}
	return ns
}

// TestLogsTail: the newest N lines of a running instance's log, reaching
// into the rotated copy when the current file has fewer.
func TestLogsTail(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := New(stateDir, nil)
	inst := start(t, p, "web-001", helperTemplate(t, "counter"))
	log := filepath.Join(stateDir, "logs", "web-001.log")
	waitSize(t, log, 500)

	var out bytes.Buffer
	if err := p.Logs(context.Background(), inst.Record(), provider.LogOptions{Lines: 3}, &out); err != nil {
		t.Fatal(err)
	}
	ns := numbers(t, out.String())
	if strings.Count(out.String(), "\n") != 3 || len(ns) != 3 || ns[1] != ns[0]+1 || ns[2] != ns[1]+1 {
		t.Fatalf("Lines 3 gave %q; want three consecutive numbered lines", out.String())
	}

	// Rotated: the current file is (nearly) empty, the lines are in .1.
	if err := p.maintainLogs(config.InstanceLogs{MaxSize: 100, Keep: 1, Retention: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := p.Logs(context.Background(), inst.Record(), provider.LogOptions{Lines: 50}, &out); err != nil {
		t.Fatal(err)
	}
	ns = numbers(t, out.String())
	if len(ns) != 50 {
		t.Fatalf("Lines 50 after a rotation gave %d numbered lines: %q", len(ns), out.String())
	}
	for i := 1; i < len(ns); i++ {
		// One rotation may lose what was written between its copy and
		// its truncation: a gap, never a line twice or out of order.
		if ns[i] <= ns[i-1] {
			t.Fatalf("lines out of order across the rotated copy: %v", ns)
		}
	}

	// Everything kept, from the instance's first line.
	out.Reset()
	if err := p.Logs(context.Background(), inst.Record(), provider.LogOptions{}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "helper counter starting") {
		t.Fatalf("Lines 0 starts with %q; want the whole log", out.String()[:min(40, out.Len())])
	}

	// An instance that never wrote a log.
	err := p.Logs(context.Background(), provider.Record{Name: "web-009"}, provider.LogOptions{}, &out)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("log of an unknown instance: %v, want not-exist", err)
	}
}

// TestLogsFollowSurvivesRotation: following a log while it is rotated
// (copied, then truncated) goes on with the lines written after, never
// repeating one, and ends when its context does.
func TestLogsFollowSurvivesRotation(t *testing.T) {
	t.Parallel()
	stateDir := t.TempDir()
	p := New(stateDir, nil)
	inst := start(t, p, "web-001", helperTemplate(t, "counter"))
	log := filepath.Join(stateDir, "logs", "web-001.log")
	waitSize(t, log, 100)

	ctx, cancel := context.WithCancel(context.Background())
	var out testbin.Buffer
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- p.Logs(ctx, inst.Record(), provider.LogOptions{Lines: 1, Follow: true}, &out)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})

	const rotations = 3
	for range rotations {
		time.Sleep(300 * time.Millisecond)
		if err := p.maintainLogs(config.InstanceLogs{MaxSize: 100, Keep: 1, Retention: time.Hour}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	// The newest line in the file now: the follower must have got there.
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	fileNs := numbers(t, string(b))
	if len(fileNs) == 0 {
		t.Fatalf("no numbered line in the log after the last rotation: %q", b)
	}
	newest := fileNs[len(fileNs)-1]
	waitFor := time.Now().Add(5 * time.Second)
	for {
		ns := numbers(t, out.String())
		if len(ns) > 0 && ns[len(ns)-1] >= newest {
			break
		}
		if time.Now().After(waitFor) {
			t.Fatalf("following stopped at line %v; the file has line %d", ns[len(ns)-1:], newest)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Logs ended with %v after its context", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Logs did not return within 5 s of its context's end")
	}
	ns := numbers(t, out.String())
	gaps, runs := 0, 0
	for i := 1; i < len(ns); i++ {
		if ns[i] <= ns[i-1] {
			t.Fatalf("line %d after line %d: repeated or out of order", ns[i], ns[i-1])
		}
		if d := ns[i] - ns[i-1] - 1; d > 0 {
			gaps += d
			runs++
		}
	}
	// Each rotation may lose the lines written during its copy: one run
	// of them, a few lines of 2 ms each, more on a busy machine (136 in
	// one run once); following itself must lose none, which would show as
	// a run more.
	if runs > rotations {
		t.Fatalf("%d lines missing from %d followed, in %d runs; the %d rotations lose one run each: %v", gaps, len(ns), runs, rotations, fmt.Sprint(ns))
	}
}

// TestFollowerSlowerThanARotation: a follower that looks again only after
// the log was rotated and written past its offset once more goes on with
// the rest of what it read, from the copy, then the new file from its
// start. It looked only at the size, took the file for untruncated and
// read on from its old offset in the new one: a line cut in two, or an
// empty one (TestLogsFollowSurvivesRotation on a loaded machine).
func TestFollowerSlowerThanARotation(t *testing.T) {
	stateDir := t.TempDir()
	p := New(stateDir, nil)
	dir := filepath.Join(stateDir, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "web-001.log")
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	n := 0
	write := func(lines int) {
		for range lines {
			n++
			fmt.Fprintf(out, "line %d\n", n)
		}
	}
	write(10)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fl := &follower{p: p, path: path, f: f, end: -1}
	defer func() { fl.f.Close() }()
	var got bytes.Buffer
	if err := fl.tail(0, false, &got); err != nil {
		t.Fatal(err)
	}
	step := func() {
		t.Helper()
		for more := true; more; {
			if more, err = fl.step(&got); err != nil {
				t.Fatal(err)
			}
		}
	}
	step()
	write(5) // read by nobody before the rotation
	if err := p.maintainLogs(config.InstanceLogs{MaxSize: 10, Keep: 2, Retention: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	write(100) // the new file, far past the follower's offset
	step()
	// Two rotations between looks: the first generation's rest is in .2.
	write(5)
	for range 2 {
		if err := p.maintainLogs(config.InstanceLogs{MaxSize: 10, Keep: 2, Retention: time.Hour}, time.Now()); err != nil {
			t.Fatal(err)
		}
		write(20)
	}
	step()
	ns := numbers(t, got.String())
	if len(ns) != n || ns[0] != 1 || ns[len(ns)-1] != n {
		t.Fatalf("followed %d lines (%v…%v), want lines 1 to %d", len(ns), ns[:min(3, len(ns))], ns[max(0, len(ns)-3):], n)
	}
	for i := 1; i < len(ns); i++ {
		if ns[i] != ns[i-1]+1 {
			t.Fatalf("line %d after line %d", ns[i], ns[i-1])
		}
	}
}
