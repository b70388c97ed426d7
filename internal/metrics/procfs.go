package metrics

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/shoal-lb/shoal/internal/proc"
)

// clockTick is the unit of /proc/PID/stat's CPU times: USER_HZ, which Linux
// fixes at 100 for every userspace interface.
const clockTick = 10 * time.Millisecond

// foreignRefresh is how many scans the cache of processes outside every
// tracked group is trusted before all of them are read again. A process can
// only join another group by setpgid, which is rare; the refresh bounds how
// long such a process goes unseen.
const foreignRefresh = 30

// usage is what a scan found for one process group or cgroup: the CPU time
// of its live members plus what they reaped from exited children, and their
// resident memory.
type usage struct {
	cpu   time.Duration
	rss   int64
	procs int
}

// procScanner reads /proc once per interval for all process groups at once.
// Reading every process's stat file is what costs; processes found to belong
// to none of the groups are remembered by pid and skipped until they exit
// (their pid leaves the listing) or the cache is refreshed.
type procScanner struct {
	root     string
	pageSize int64
	buf      []byte
	path     []byte
	foreign  map[int]uint32 // pid -> scan generation it was last listed in
	known    map[int]bool   // pgids the foreign cache was built against
	gen      uint32
	sinceAll int
}

func newProcScanner(root string) *procScanner {
	return &procScanner{
		root:     root,
		pageSize: int64(os.Getpagesize()),
		buf:      make([]byte, 1024),
		foreign:  make(map[int]uint32),
		known:    make(map[int]bool),
	}
}

// scan fills groups (keyed by pgid) with the usage of their members.
func (s *procScanner) scan(groups map[int]*usage) error {
	for pgid := range groups {
		if !s.known[pgid] {
			// A group we did not look for before may have members cached
			// as foreign.
			clear(s.foreign)
			clear(s.known)
			for g := range groups {
				s.known[g] = true
			}
			s.sinceAll = 0
			break
		}
	}
	if s.sinceAll++; s.sinceAll > foreignRefresh {
		clear(s.foreign)
		s.sinceAll = 0
	}
	s.gen++

	d, err := os.Open(s.root)
	if err != nil {
		return fmt.Errorf("scan processes: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("scan processes: %w", err)
	}
	for _, name := range names {
		pid, ok := atoi(name)
		if !ok {
			continue
		}
		if _, ok := s.foreign[pid]; ok {
			s.foreign[pid] = s.gen
			continue
		}
		st, ok := s.readStat(name)
		if !ok {
			continue // exited meanwhile
		}
		u := groups[st.Pgid]
		if u == nil {
			s.foreign[pid] = s.gen
			continue
		}
		u.cpu += time.Duration(st.Ticks) * clockTick
		u.rss += st.RSSPages * s.pageSize
		// A zombie's CPU time still counts (its parent may reap it into
		// cutime), but it is no live process.
		if !st.Zombie {
			u.procs++
		}
	}
	for pid, g := range s.foreign {
		if g != s.gen {
			delete(s.foreign, pid)
		}
	}
	return nil
}

func (s *procScanner) readStat(pid string) (proc.Stat, bool) {
	s.path = append(s.path[:0], s.root...)
	s.path = append(s.path, '/')
	s.path = append(s.path, pid...)
	s.path = append(s.path, "/stat"...)
	fd, err := syscall.Open(string(s.path), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return proc.Stat{}, false
	}
	n, err := syscall.Read(fd, s.buf)
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return proc.Stat{}, false
	}
	st, err := proc.ParseStat(s.buf[:n])
	return st, err == nil
}

// atoi parses a non-negative decimal without allocating.
func atoi(s string) (int, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// readCgroup reads a cgroup v2 directory's cumulative CPU time (cpu.stat
// usage_usec) and its memory (memory.current, which includes page cache).
func readCgroup(dir string) (usage, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return usage{}, fmt.Errorf("read cgroup cpu: %w", err)
	}
	var u usage
	found := false
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("usage_usec ")); ok {
			n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return usage{}, fmt.Errorf("read cgroup cpu: %s: bad usage_usec %q", dir, bytes.TrimSpace(v))
			}
			u.cpu, found = time.Duration(n)*time.Microsecond, true
		}
	}
	if !found {
		return usage{}, fmt.Errorf("read cgroup cpu: %s/cpu.stat has no usage_usec", dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "memory.current")); err == nil {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil {
			u.rss = n
		}
	}
	return u, nil
}
