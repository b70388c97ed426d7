package proc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Stat is what shoal reads of one /proc/PID/stat line: here for this
// machine's processes (metrics), and for a remote host's, read in one batch
// over SSH (the ssh provider).
type Stat struct {
	PID    int
	Zombie bool // state Z or X: exited, not reaped
	Pgid   int
	// Ticks is utime + stime + cutime + cstime in clock ticks: the CPU
	// time of the process and of the children it reaped.
	Ticks uint64
	// StartTicks is the start time (field 22), what tells a live process
	// from a reused pid.
	StartTicks uint64
	RSSPages   int64
}

// ParseStat reads the fields shoal needs from a /proc/PID/stat line. The
// command name may hold spaces and parentheses, so fields are counted from
// the last ')'.
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	j := bytes.IndexByte(b, '(')
	if i < 0 || j < 1 {
		return Stat{}, errors.New("no command name")
	}
	var st Stat
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:j])))
	if err != nil || pid <= 0 {
		return Stat{}, fmt.Errorf("bad pid %q", bytes.TrimSpace(b[:j]))
	}
	st.PID = pid
	// Field 3 (state) is the first after the name; field N is at index N-3.
	const (
		fPgrp   = 5 - 3
		fUtime  = 14 - 3
		fCstime = 17 - 3
		fStart  = 22 - 3
		fRSS    = 24 - 3
	)
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
			st.Zombie = string(field) == "Z" || string(field) == "X"
		case idx == fPgrp:
			v, err := strconv.Atoi(string(field))
			if err != nil || v < 0 {
				return Stat{}, fmt.Errorf("bad pgrp %q", field)
			}
			st.Pgid = v
		case idx >= fUtime && idx <= fCstime:
			// cutime and cstime are signed in the kernel's format.
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil || v < 0 {
				return Stat{}, fmt.Errorf("bad cpu time %q", field)
			}
			st.Ticks += uint64(v)
		case idx == fStart:
			v, err := strconv.ParseUint(string(field), 10, 64)
			if err != nil {
				return Stat{}, fmt.Errorf("bad start time %q", field)
			}
			st.StartTicks = v
		case idx == fRSS:
			v, err := strconv.ParseInt(string(field), 10, 64)
			if err != nil {
				return Stat{}, fmt.Errorf("bad rss %q", field)
			}
			st.RSSPages = max(v, 0)
		}
		idx++
	}
	if idx <= fRSS {
		return Stat{}, errors.New("too few fields")
	}
	return st, nil
}
