package accesslog

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Reader.
type Options struct {
	// Socket is the unix datagram socket HAProxy sends to. Its directory is
	// created with mode 0700 if missing; the socket gets mode 0600.
	Socket string
	// File is the access log; it is rotated to File.1 ... File.(MaxFiles-1)
	// when it would grow past MaxSize bytes.
	File     string
	MaxSize  int64
	MaxFiles int
	// SampleRate is set in every Entry whose line has no rate of its own:
	// HAProxy logs one request in N.
	SampleRate int
	Log        *slog.Logger
}

// Stats count what the Reader has seen since it started.
type Stats struct {
	// Lines is every datagram received. Requests are those Parse read as
	// a request; Notices are HAProxy's own messages (ErrNotRequest):
	// connections that failed before their first request, such as abandoned
	// TLS handshakes, and proxies stopping; Malformed are the others Parse
	// rejected. Notices and malformed lines are still written to the file.
	Lines, Requests, Notices, Malformed uint64
	// Dropped counts entries a subscriber missed because its buffer was full.
	Dropped uint64
	// WriteErrors counts lines that could not be written to the file.
	WriteErrors uint64
}

// flushAfter is how long written lines may wait in memory when no more
// arrive: lines reach the file in batches under load and promptly otherwise.
const flushAfter = 100 * time.Millisecond

// Reader receives HAProxy's log datagrams. Open it, then call Run in a
// goroutine that owns it; Run returns once ctx ends.
type Reader struct {
	opts Options
	log  *slog.Logger
	conn *net.UnixConn
	out  *rotatingFile

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	closed bool

	lines, requests, notices, malformed, dropped, writeErrors atomic.Uint64
}

type subscriber struct{ ch chan Entry }

// Open binds the socket (replacing a stale one) and opens the log file.
func Open(opts Options) (*Reader, error) {
	if opts.MaxFiles < 1 {
		opts.MaxFiles = 1
	}
	if opts.SampleRate < 1 {
		opts.SampleRate = 1
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Dir(opts.Socket), 0o700); err != nil {
		return nil, fmt.Errorf("access log socket directory: %w", err)
	}
	if fi, err := os.Lstat(opts.Socket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("access log socket %s: exists and is not a socket", opts.Socket)
		}
		if err := os.Remove(opts.Socket); err != nil {
			return nil, fmt.Errorf("remove stale access log socket: %w", err)
		}
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: opts.Socket, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("access log socket: %w", err)
	}
	// The directory is 0700 until this chmod: no one else can reach the socket meanwhile.
	if err := os.Chmod(opts.Socket, 0o600); err != nil {
		conn.Close()
		os.Remove(opts.Socket)
		return nil, fmt.Errorf("access log socket: %w", err)
	}
	// Room for bursts: HAProxy drops (and counts) what does not fit.
	_ = conn.SetReadBuffer(4 << 20)
	out, err := openRotating(opts.File, opts.MaxSize, opts.MaxFiles)
	if err != nil {
		conn.Close()
		os.Remove(opts.Socket)
		return nil, err
	}
	return &Reader{opts: opts, log: log.With("component", "accesslog"), conn: conn, out: out, subs: make(map[*subscriber]struct{})}, nil
}

// Subscribe returns a channel of parsed entries with room for buf of them
// and a function that ends the subscription. Entries that do not fit are
// dropped and counted, never waited for. The channel is closed when the
// subscription ends or the Reader stops.
func (r *Reader) Subscribe(buf int) (<-chan Entry, func()) {
	s := &subscriber{ch: make(chan Entry, max(buf, 0))}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	r.subs[s] = struct{}{}
	return s.ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if _, ok := r.subs[s]; ok {
			delete(r.subs, s)
			close(s.ch)
		}
	}
}

// Stats returns the counters.
func (r *Reader) Stats() Stats {
	return Stats{Lines: r.lines.Load(), Requests: r.requests.Load(), Notices: r.notices.Load(), Malformed: r.malformed.Load(), Dropped: r.dropped.Load(), WriteErrors: r.writeErrors.Load()}
}

// Run receives lines until ctx ends, then flushes and closes the file,
// removes the socket and closes every subscription. It returns an error only
// if the socket fails.
func (r *Reader) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { r.conn.Close() })
	defer stop()
	defer r.close()

	buf := make([]byte, maxLine)
	pending := false
	var lastErr time.Time
	for {
		deadline := time.Time{}
		if pending {
			deadline = time.Now().Add(flushAfter)
		}
		_ = r.conn.SetReadDeadline(deadline)
		n, _, err := r.conn.ReadFromUnix(buf)
		if err != nil {
			var ne net.Error
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.As(err, &ne) && ne.Timeout():
				if err := r.out.Flush(); err != nil && time.Since(lastErr) > time.Minute {
					lastErr = time.Now()
					r.log.Error("cannot write access log", "file", r.opts.File, "err", err)
				}
				pending = false
				continue
			}
			return fmt.Errorf("access log socket %s: %w", r.opts.Socket, err)
		}
		line := trimLine(buf[:n])
		if err := r.out.WriteLine(line); err != nil {
			r.writeErrors.Add(1)
			if time.Since(lastErr) > time.Minute {
				lastErr = time.Now()
				r.log.Error("cannot write access log", "file", r.opts.File, "err", err)
			}
		}
		pending = true
		// A line counts once it is handled: Stats never shows one that is
		// neither published nor counted as a notice or malformed.
		e, err := Parse(string(line))
		switch {
		case errors.Is(err, ErrNotRequest):
			r.notices.Add(1)
		case err != nil:
			r.malformed.Add(1)
		default:
			r.requests.Add(1)
			if e.SampleRate == 0 {
				e.SampleRate = r.opts.SampleRate
			}
			r.publish(e)
		}
		r.lines.Add(1)
	}
}

func trimLine(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == 0) {
		b = b[:len(b)-1]
	}
	return b
}

func (r *Reader) publish(e Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.subs {
		select {
		case s.ch <- e:
		default:
			r.dropped.Add(1)
		}
	}
}

func (r *Reader) close() {
	r.conn.Close()
	if err := r.out.Close(); err != nil {
		r.log.Error("cannot write access log", "file", r.opts.File, "err", err)
	}
	_ = os.Remove(r.opts.Socket)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for s := range r.subs {
		close(s.ch)
	}
	clear(r.subs)
}

// rotatingFile appends lines to path, renaming it to path.1 (and path.1 to
// path.2, ...) before it would grow past maxSize, keeping files in all.
type rotatingFile struct {
	path    string
	maxSize int64
	files   int
	f       *os.File
	w       *bufio.Writer
	size    int64
}

func openRotating(path string, maxSize int64, files int) (*rotatingFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("access log directory: %w", err)
	}
	rf := &rotatingFile{path: path, maxSize: maxSize, files: files}
	if err := rf.open(); err != nil {
		return nil, err
	}
	return rf, nil
}

func (rf *rotatingFile) open() error {
	f, err := os.OpenFile(rf.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open access log: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open access log: %w", err)
	}
	rf.f, rf.size = f, fi.Size()
	if rf.w == nil {
		rf.w = bufio.NewWriterSize(f, 32<<10)
	} else {
		rf.w.Reset(f)
	}
	return nil
}

// WriteLine appends line and a newline, rotating first if needed.
func (rf *rotatingFile) WriteLine(line []byte) error {
	if rf.f == nil {
		// A failed rotation left no file: try again.
		if err := rf.open(); err != nil {
			return err
		}
	}
	n := int64(len(line)) + 1
	if rf.maxSize > 0 && rf.size > 0 && rf.size+n > rf.maxSize {
		if err := rf.rotate(); err != nil {
			return err
		}
	}
	rf.size += n
	if _, err := rf.w.Write(line); err != nil {
		return err
	}
	return rf.w.WriteByte('\n')
}

func (rf *rotatingFile) rotate() error {
	err := rf.w.Flush()
	if cerr := rf.f.Close(); err == nil {
		err = cerr
	}
	rf.f = nil
	if err != nil {
		return fmt.Errorf("rotate access log: %w", err)
	}
	if rf.files <= 1 {
		if err := os.Truncate(rf.path, 0); err != nil {
			return fmt.Errorf("rotate access log: %w", err)
		}
		return rf.open()
	}
	for i := rf.files - 1; i >= 1; i-- {
		from := rf.path
		if i > 1 {
			from += "." + strconv.Itoa(i-1)
		}
		if err := os.Rename(from, rf.path+"."+strconv.Itoa(i)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate access log: %w", err)
		}
	}
	return rf.open()
}

func (rf *rotatingFile) Flush() error {
	if rf.f == nil {
		return nil
	}
	return rf.w.Flush()
}

func (rf *rotatingFile) Close() error {
	if rf.f == nil {
		return nil
	}
	err := rf.w.Flush()
	if cerr := rf.f.Close(); err == nil {
		err = cerr
	}
	rf.f = nil
	return err
}
