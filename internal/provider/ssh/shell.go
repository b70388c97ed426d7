package ssh

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// shell is one long-lived `sh` on a host that runs shoal's frequent short
// commands (the poll, port and marker reads, launches) one after another.
// Every SSH session starts the login's shell with its rc files, which on a
// real host (and on this project's test machine, whose root .bashrc runs
// `pyenv init`) costs ~100 ms of CPU and can wait on locks: once per
// connection instead of once per poll.
//
// Each command's output ends with a line holding a token unknown to the
// command and its exit status; stderr is merged into stdout.
type shell struct {
	mu     sync.Mutex
	sess   *gossh.Session
	stdin  io.Writer
	stdout *bufio.Reader
	token  string
	broken error
}

// openSession opens a session on c within open, closing c if the server
// does not answer (a hung host).
func openSession(ctx context.Context, c *gossh.Client, open time.Duration) (*gossh.Session, error) {
	type opened struct {
		s   *gossh.Session
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := c.NewSession()
		ch <- opened{s, err}
	}()
	t := time.NewTimer(open)
	defer t.Stop()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, fmt.Errorf("open session: %w", o.err)
		}
		return o.s, nil
	case <-t.C:
		c.Close() // unblocks NewSession; the host gets a new connection
		return nil, fmt.Errorf("open session: %w within %s", errHung, open)
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("open session: %w", context.Cause(ctx))
	}
}

// startShell starts the shell on c.
func startShell(ctx context.Context, c *gossh.Client, open time.Duration) (*shell, error) {
	sess, err := openSession(ctx, c, open)
	if err != nil {
		return nil, err
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("shell: %w", err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("shell: %w", err)
	}
	sess.Stderr = io.Discard
	if err := sess.Start("exec sh"); err != nil {
		sess.Close()
		return nil, fmt.Errorf("shell: %w", err)
	}
	var tok [12]byte
	rand.Read(tok[:])
	return &shell{sess: sess, stdin: stdin, stdout: bufio.NewReaderSize(stdout, 64<<10), token: "shoal-end-" + hex.EncodeToString(tok[:])}, nil
}

func (s *shell) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken == nil {
		s.broken = errors.New("shell closed")
	}
	s.sess.Close()
}

// run runs argv in the shell (stdin /dev/null) and returns its output. A
// command that does not end within timeout, or ctx, breaks the shell: its
// session is closed, and so is the connection, since a host that does not
// finish a short command in time is taken as hung.
func (s *shell) run(ctx context.Context, c *gossh.Client, timeout time.Duration, argv []string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, fmt.Errorf("shell: %w", s.broken)
	}
	type result struct {
		out    []byte
		status int
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		line := commandLine(argv) + " </dev/null 2>&1; printf '\\n%s %d\\n' " + s.token + " $?\n"
		if _, err := io.WriteString(s.stdin, line); err != nil {
			ch <- result{err: err}
			return
		}
		var out []byte
		for {
			l, err := s.stdout.ReadSlice('\n')
			if rest, ok := bytes.CutPrefix(l, []byte(s.token+" ")); ok && err == nil {
				status, err := strconv.Atoi(string(bytes.TrimSpace(rest)))
				ch <- result{out: bytes.TrimSuffix(out, []byte("\n")), status: status, err: err}
				return
			}
			if len(out)+len(l) <= maxStdout {
				out = append(out, l...)
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				ch <- result{err: err}
				return
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var r result
	select {
	case r = <-ch:
	case <-t.C:
		r.err = fmt.Errorf("%w after %s", errHung, timeout)
		c.Close()
	case <-ctx.Done():
		r.err = context.Cause(ctx)
		c.Close()
	}
	if r.err != nil {
		s.broken = r.err
		s.sess.Close()
		return nil, fmt.Errorf("shell: %w", r.err)
	}
	if r.status != 0 {
		tail := &tailBuffer{max: maxStderrTail}
		tail.Write(r.out)
		return r.out, &exitError{status: r.status, stderr: tail.String()}
	}
	return r.out, nil
}
