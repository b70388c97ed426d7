package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Client talks to an HAProxy runtime API socket (a worker's stats socket or
// the master socket), one connection per command line.
type Client struct {
	Socket string
	// Process, on the master socket, sends every command to that process
	// ("@!PID"), such as an old worker a reload replaced.
	Process int
}

// APIError is an answer from HAProxy that means a command failed, such as
// "No such server." or "Unknown command".
type APIError struct {
	Command string
	// Message is HAProxy's answer without surrounding blank lines.
	Message string
}

func (e *APIError) Error() string {
	msg, _, more := strings.Cut(e.Message, "\n")
	if more {
		msg += " …"
	}
	return fmt.Sprintf("haproxy %q: %s", e.Command, msg)
}

// Messages HAProxy 2.6 answers that shoal acts on.
const (
	msgServerAdded   = "New server registered."
	msgServerDeleted = "Server deleted."
	msgNoSuchServer  = "No such server."
	msgAlreadyExists = "Already exists a server with the same name"
	msgIDUsed        = "already used at"
	msgStillInUse    = "still has connections attached"
	msgNoSuchProxy   = "No such proxy."
	// msgNoProcess is the master's answer for a Process that has exited.
	msgNoProcess = "Can't find the target PID"
)

// refusedFor bounds how long dial tries again a socket nothing listens on:
// the master re-executes itself (to free its configuration's memory) just
// after it starts workers, and its CLI is not listening while it does.
const refusedFor = time.Second

// dial connects to a unix socket, waiting while its accept queue is full. A
// unix socket refuses with EAGAIN rather than queueing, and HAProxy's CLI
// queue overflows when dozens of commands arrive at once (a scale-out of many
// servers): such a refusal is not HAProxy being down. Nor is a refusal for
// less than refusedFor.
func dial(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	delay := 2 * time.Millisecond
	var refusedSince time.Time
	for {
		conn, err := d.DialContext(ctx, "unix", socket)
		switch {
		case err == nil:
			return conn, nil
		case errors.Is(err, syscall.ECONNREFUSED):
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) >= refusedFor {
				return nil, err
			}
		case !errors.Is(err, syscall.EAGAIN):
			return nil, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

func isAPIError(err error, substr string) bool {
	var e *APIError
	return errors.As(err, &e) && strings.Contains(e.Message, substr)
}

// Exec sends one command line (several commands may be joined with ";") and
// returns HAProxy's whole answer. Only failing to talk to the socket is an
// error; see Client's other methods for answers that mean failure.
func (c *Client) Exec(ctx context.Context, cmd string) (string, error) {
	return c.exec(ctx, cmd, "")
}

// ExecPayload sends cmd with a payload of several lines, as "set ssl cert"
// takes a PEM: HAProxy reads "cmd <<" and then lines up to the first empty
// one, so the payload must hold none. It must also fit HAProxy's
// tune.bufsize (16 KiB by default) with the command.
func (c *Client) ExecPayload(ctx context.Context, cmd, payload string) (string, error) {
	payload = strings.TrimRight(payload, "\n")
	if payload == "" || strings.Contains(payload, "\n\n") || strings.Contains(payload, "\r") {
		return "", fmt.Errorf("haproxy command %q: the payload must be lines without an empty one", cmd)
	}
	return c.exec(ctx, cmd, payload)
}

func (c *Client) exec(ctx context.Context, cmd, payload string) (string, error) {
	if strings.ContainsAny(cmd, "\r\n") {
		return "", fmt.Errorf("haproxy command %q: must be one line", cmd)
	}
	if c.Process != 0 {
		cmd = "@!" + strconv.Itoa(c.Process) + " " + cmd
	}
	line := cmd + "\n"
	if payload != "" {
		line = cmd + " <<\n" + payload + "\n\n"
	}
	conn, err := dial(ctx, c.Socket)
	if err != nil {
		return "", fmt.Errorf("haproxy runtime API %s: %w", c.Socket, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	// Cancellation without a deadline must still unblock the read.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	fail := func(err error) (string, error) {
		switch {
		case ctx.Err() != nil:
			err = ctx.Err()
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Only ctx sets deadlines, and its timer may not have fired yet.
			err = context.DeadlineExceeded
		}
		return "", fmt.Errorf("haproxy runtime API %s: %q: %w", c.Socket, cmd, err)
	}
	if _, err := io.WriteString(conn, line); err != nil {
		return fail(err)
	}
	// The master socket answers but keeps the connection open until our side
	// is closed; a worker's socket closes by itself.
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return fail(err)
		}
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return fail(err)
	}
	return string(out), nil
}

// expect runs cmd and turns any answer other than want into an *APIError.
// Commands that succeed silently have want "", also when several are joined.
func (c *Client) expect(ctx context.Context, cmd, want string) error {
	out, err := c.Exec(ctx, cmd)
	if err != nil {
		return err
	}
	if got := strings.TrimSpace(out); got != want {
		return &APIError{Command: cmd, Message: got}
	}
	return nil
}

// StreamsOn counts the streams that still reference server in backend,
// including those that "show stat" no longer counts in scur (a stream waiting
// to retry a connection). Deleting a server that streams reference crashes
// HAProxy 2.6.
func (c *Client) StreamsOn(ctx context.Context, backend, server string) (int, error) {
	return c.streams(ctx, onServer(backend, server))
}

// streams counts the "show sess" lines that match.
func (c *Client) streams(ctx context.Context, match func(line string) bool) (int, error) {
	out, err := c.Exec(ctx, "show sess")
	if err != nil {
		return 0, err
	}
	n, err := countStreams(out, match)
	if err != nil {
		return 0, fmt.Errorf(`haproxy "show sess": %w`, err)
	}
	return n, nil
}

// onServer matches the streams whose be= and srv= fields are exactly
// backend and server.
func onServer(backend, server string) func(line string) bool {
	wantBE, wantSrv := "be="+backend, "srv="+server
	return func(line string) bool {
		var be, srv bool
		for f := range strings.FieldsSeq(line) {
			be = be || f == wantBE
			srv = srv || f == wantSrv
		}
		return be && srv
	}
}

// countStreams counts the "show sess" lines in out that match.
func countStreams(out string, match func(line string) bool) (int, error) {
	n := 0
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		// Every stream line starts with its address, "0x...:".
		if !strings.HasPrefix(line, "0x") {
			return 0, answerError(out)
		}
		if match(line) {
			n++
		}
	}
	return n, nil
}

// errEmptyAnswer is a command's answer of nothing where lines were due.
var errEmptyAnswer = errors.New("empty answer")

// answerError is the error of an answer that is not what a command gives:
// errEmptyAnswer, or its first line.
func answerError(out string) error {
	if strings.TrimSpace(out) == "" {
		return errEmptyAnswer
	}
	return errors.New(firstLine(out))
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if line == "" {
		return "empty answer"
	}
	return line
}

// closingVar is the process-wide variable that makes an HTTP frontend of an
// HA node close each connection after its answer (see frontendLines). A
// reload starts a worker without it.
const closingVar = "proc.shoal_closing"

// Closing sets or clears closingVar (set var is an experimental command in
// HAProxy 2.6).
func (c *Client) Closing(ctx context.Context, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	return c.expect(ctx, "experimental-mode on; set var "+closingVar+" int("+v+")", "")
}

// Requests counts the requests in progress: the streams of every frontend
// but the Runtime API's own. A connection between two requests has none.
func (c *Client) Requests(ctx context.Context) (int, error) {
	return c.streams(ctx, func(line string) bool { return !strings.Contains(line, " fe=GLOBAL ") })
}
