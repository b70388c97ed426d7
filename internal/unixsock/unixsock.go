// Package unixsock creates unix sockets the way an operator expects: with a
// given mode and group, replacing a stale socket file left by a crash but never
// one that a live process still serves.
package unixsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Listen listens on path with the socket file set to mode and, if grp is not
// empty, owned by that group (a name or a numeric gid).
func Listen(path string, mode os.FileMode, grp string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory for socket %s: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// Until the chmod below, the socket must not be reachable by others.
	old := syscall.Umask(0o177)
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	if err := setOwnership(path, mode, grp); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket path %s exists and is not a socket; remove it or choose another path", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s is served by another running process; stop it or choose another path", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

func setOwnership(path string, mode os.FileMode, grp string) error {
	if grp != "" {
		gid, err := strconv.Atoi(grp)
		if err != nil {
			g, lerr := user.LookupGroup(grp)
			if lerr != nil {
				return fmt.Errorf("socket %s: group %q: %w", path, grp, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
		if err := os.Chown(path, -1, gid); err != nil {
			return fmt.Errorf("socket %s: set group %s: %w", path, grp, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("socket %s: set mode %o: %w", path, mode, err)
	}
	return nil
}
