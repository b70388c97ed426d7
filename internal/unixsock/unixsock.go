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
	"sync"
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
	// The socket is bound inside a fresh 0700 directory, so nobody else can
	// reach it before its mode is set, then renamed into place. Setting the
	// umask instead would change it for the whole process, including
	// instances being forked at that moment.
	tmp, err := os.MkdirTemp(filepath.Dir(path), ".sock")
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	bound := filepath.Join(tmp, "s")
	if len(bound) >= maxPath && len(path) < maxPath {
		return nil, fmt.Errorf("listen on socket %s: its temporary path %s is %d bytes, over the %d a unix socket allows; use a shorter directory", path, bound, len(bound), maxPath-1)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	// The file is renamed; Close removes it under its final name instead.
	l.SetUnlinkOnClose(false)
	if err := setOwnership(bound, mode, grp); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Rename(bound, path); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on socket %s: %w", path, err)
	}
	return &listener{UnixListener: l, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// maxPath is the size of sun_path on Linux, including the terminating NUL.
const maxPath = 108

// listener reports the socket's final path and removes it on Close, as a
// listener bound to that path directly would.
type listener struct {
	*net.UnixListener
	addr *net.UnixAddr
	once sync.Once
}

func (l *listener) Addr() net.Addr { return l.addr }

func (l *listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { _ = os.Remove(l.addr.Name) })
	return err
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
				return fmt.Errorf("group %q: %w", grp, lerr)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
		if err := os.Chown(path, -1, gid); err != nil {
			return fmt.Errorf("set group %s: %w", grp, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		return fmt.Errorf("set mode %o: %w", mode, err)
	}
	return nil
}
