package testhost

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cgroup is a cgroup v2 group that a test starts a node's processes in
// (exec.Cmd's SysProcAttr.UseCgroupFD, with FD), so that it can kill them
// as a unit, as a machine's crash or the OOM killer of a service would:
// killed one by one, keepalived's VRRP child can see its parent die and
// give the VIP up gracefully before its own SIGKILL lands.
type Cgroup struct {
	Dir string
	fd  *os.File
}

// NewCgroup makes a group named after this process and name under the
// cgroup v2 hierarchy (/sys/fs/cgroup, or its unified part on a hybrid
// system). A machine without one returns ErrUnsupported.
func NewCgroup(name string) (*Cgroup, error) {
	root, err := cgroup2Root()
	if err != nil {
		return nil, err
	}
	sweepCgroups(root)
	dir := filepath.Join(root, fmt.Sprintf("%s%d-%s", prefix, os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("%w: cgroup %s: %w", ErrUnsupported, dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("%w: cgroup %s has no cgroup.kill (Linux 5.14 or later)", ErrUnsupported, dir)
	}
	fd, err := os.Open(dir)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return &Cgroup{Dir: dir, fd: fd}, nil
}

// FD is the group's directory, for SysProcAttr.CgroupFD.
func (c *Cgroup) FD() int { return int(c.fd.Fd()) }

// PIDs lists the processes in the group.
func (c *Cgroup) PIDs() ([]int, error) {
	b, err := os.ReadFile(filepath.Join(c.Dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", c.Dir, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Kill freezes every process in the group, so that none runs another
// instruction, then SIGKILLs them all, waits until the group is empty and
// thaws it. Start what comes next in a new group: Linux 6.18 kills at once
// a process cloned into a group (CLONE_INTO_CGROUP) that was killed before.
func (c *Cgroup) Kill(ctx context.Context) error {
	if err := c.write("cgroup.freeze", "1"); err != nil {
		return err
	}
	if err := c.wait(ctx, "frozen 1"); err != nil {
		return err
	}
	if err := c.write("cgroup.kill", "1"); err != nil {
		return err
	}
	if err := c.wait(ctx, "populated 0"); err != nil {
		return err
	}
	return c.write("cgroup.freeze", "0")
}

// Close kills what is left in the group and removes it.
func (c *Cgroup) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Kill(ctx)
	c.fd.Close()
	if rerr := os.Remove(c.Dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("cgroup %s: %w", c.Dir, rerr))
	}
	return err
}

func (c *Cgroup) write(file, v string) error {
	if err := os.WriteFile(filepath.Join(c.Dir, file), []byte(v), 0); err != nil {
		return fmt.Errorf("cgroup %s: write %s: %w", c.Dir, file, err)
	}
	return nil
}

// wait polls cgroup.events until it has the line want ("frozen 1").
func (c *Cgroup) wait(ctx context.Context, want string) error {
	for {
		b, err := os.ReadFile(filepath.Join(c.Dir, "cgroup.events"))
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", c.Dir, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line == want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cgroup %s: no %q in cgroup.events: %w", c.Dir, want, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// cgroup2Root finds where the cgroup v2 hierarchy is mounted.
func cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4], nil
		}
	}
	return "", fmt.Errorf("%w: no cgroup v2 hierarchy mounted", ErrUnsupported)
}

// sweepCgroups kills and removes the groups a killed test process left.
func sweepCgroups(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		fd, err := os.Open(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		_ = (&Cgroup{Dir: filepath.Join(root, e.Name()), fd: fd}).Close()
	}
}
