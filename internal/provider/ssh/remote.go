package ssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// Bounds of what a remote command's output is kept: stdout whole up to
// maxStdout (a batched /proc read of a busy host is a few hundred KiB),
// stderr's tail for the error message.
const (
	maxStdout     = 16 << 20
	maxStderrTail = 2 << 10
)

// quote makes s one word for a POSIX shell: single quotes keep everything
// literal but a single quote, which closes the quoting, is escaped and
// reopens it.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// commandLine is argv as one line for the remote login shell, every word
// quoted: what arrives is argv, whatever it holds.
func commandLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = quote(a)
	}
	return strings.Join(q, " ")
}

// script is the argv that runs a constant shell script with data only in
// its arguments ($1, $2, …), never in its text.
func script(text string, args ...string) []string {
	return append([]string{"sh", "-c", text, "sh"}, args...)
}

// exitError is a remote command that ran and exited non-zero.
type exitError struct {
	status int
	stderr string
}

func (e *exitError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("exit status %d", e.status)
	}
	return fmt.Sprintf("exit status %d: %s", e.status, e.stderr)
}

// exitStatus returns the exit status of a command that ran and failed, -1
// for any other error.
func exitStatus(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.status
	}
	return -1
}

// errHung reports a remote call that got no answer within its deadline: the
// connection is closed, so the host counts as unreachable until it answers
// again.
var errHung = errors.New("no answer")

// runOpts tune one remote command.
type runOpts struct {
	// Stdout, if set, receives stdout as it comes instead of the result.
	Stdout io.Writer
	// Timeout bounds the whole command; 0: only ctx does.
	Timeout time.Duration
}

// run runs argv on c and returns its stdout. It never blocks past ctx or
// opts.Timeout: a session that cannot be opened within open (the server
// does not answer) closes the connection, and a command past its deadline
// has its session closed, which ends it on the server's side.
func run(ctx context.Context, c *gossh.Client, open time.Duration, argv []string, opts runOpts) ([]byte, error) {
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("%w after %s", errHung, opts.Timeout))
		defer cancel()
	}
	sess, err := openSession(ctx, c, open)
	if err != nil {
		return nil, err
	}
	defer sess.Close()

	var stdout bytes.Buffer
	stderr := &tailBuffer{max: maxStderrTail}
	if opts.Stdout != nil {
		sess.Stdout = opts.Stdout
	} else {
		sess.Stdout = &limitWriter{w: &stdout, left: maxStdout}
	}
	sess.Stderr = stderr
	done := make(chan error, 1)
	if err := sess.Start(commandLine(argv)); err != nil {
		return nil, fmt.Errorf("start command: %w", err)
	}
	go func() { done <- sess.Wait() }()
	select {
	case err := <-done:
		var ee *gossh.ExitError
		switch {
		case errors.As(err, &ee):
			return stdout.Bytes(), &exitError{status: ee.ExitStatus(), stderr: stderr.String()}
		case err != nil:
			return stdout.Bytes(), fmt.Errorf("command: %w", err)
		}
		return stdout.Bytes(), nil
	case <-ctx.Done():
		// Closing the channel ends the command (its stdout is gone); a
		// signal would need the server's support. Wait (briefly) for the
		// output copies to end: nothing is written to opts.Stdout once run
		// has returned.
		_ = sess.Signal(gossh.SIGKILL)
		sess.Close()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		return stdout.Bytes(), fmt.Errorf("command: %w", context.Cause(ctx))
	}
}

// limitWriter drops what passes its limit (the command still runs to its end).
type limitWriter struct {
	w    io.Writer
	left int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > l.left {
		p = p[:l.left]
	}
	l.left -= len(p)
	if _, err := l.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return strings.TrimSpace(string(t.b)) }
