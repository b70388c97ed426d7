package metrics

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
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
		u := groups[st.pgid]
		if u == nil {
			s.foreign[pid] = s.gen
			continue
		}
		u.cpu += time.Duration(st.ticks) * clockTick
		u.rss += st.rssPages * s.pageSize
		// A zombie's CPU time still counts (its parent may reap it into
		// cutime), but it is no live process.
		if !st.zombie {
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

type procStat struct {
	zombie   bool
	pgid     int
	ticks    uint64 // utime + stime + cutime + cstime
	rssPages int64
}

func (s *procScanner) readStat(pid string) (procStat, bool) {
	s.path = append(s.path[:0], s.root...)
	s.path = append(s.path, '/')
	s.path = append(s.path, pid...)
	s.path = append(s.path, "/stat"...)
	fd, err := syscall.Open(string(s.path), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return procStat{}, false
	}
	n, err := syscall.Read(fd, s.buf)
	syscall.Close(fd)
	if err != nil || n <= 0 {
		return procStat{}, false
	}
	st, err := parseStat(s.buf[:n])
	return st, err == nil
}

// parseStat reads the fields shoal needs from a /proc/PID/stat line. The
// command name may hold spaces and parentheses, so fields are counted from
// the last ')'.
func parseStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New("no command name")
	}
	// Field 3 (state) is the first after the name; field N is at index N-3.
	const (
		fPgrp   = 5 - 3
		fUtime  = 14 - 3
		fCstime = 17 - 3
		fRSS    = 24 - 3
	)
	var st procStat
	idx := 0
	rest := b[i+1:]
	for len(rest) > 0 && idx <= fRSS {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		field := rest[:end]
		rest = rest[end:]
		switch {
		case idx == 0:
			st.zombie = string(field) == "Z"
		case idx == fPgrp:
			v, ok := atoi(string(field))
			if !ok {
				return procStat{}, fmt.Errorf("bad pgrp %q", field)
			}
			st.pgid = v
		case idx >= fUtime && idx <= fCstime:
			// cutime and cstime are signed in the kernel's format.
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil || v < 0 {
				return procStat{}, fmt.Errorf("bad cpu time %q", field)
			}
			st.ticks += uint64(v)
		case idx == fRSS:
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil {
				return procStat{}, fmt.Errorf("bad rss %q", field)
			}
			st.rssPages = max(v, 0)
		}
		idx++
	}
	if idx <= fRSS {
		return procStat{}, errors.New("too few fields")
	}
	return st, nil
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
