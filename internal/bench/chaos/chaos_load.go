package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// chaosLoadOptions configure the chaos load.
type chaosLoadOptions struct {
	url     string
	rate    float64
	conns   int
	budget  int64
	postPct int
	runID   int
}

// reqRec is one request's life, in nanoseconds since the load started.
type reqRec struct {
	start, end int64
	post       bool
	status     int
	// attempts is how many connections Go's client used: above 1 when it
	// resent an idempotent request whose kept-alive connection had been
	// closed before any answer (RFC 9112 §9.3.1 lets clients do that).
	attempts int
	fail     string // "" for a 2xx
	id       string // POSTs only
}

// chaosLoad is paced keep-alive load recording every request.
type chaosLoad struct {
	start   time.Time
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    atomic.Int64
	mu      sync.Mutex
	recs    []reqRec
	once    sync.Once
	stopped []reqRec
}

func startChaosLoad(ctx context.Context, o chaosLoadOptions) *chaosLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &chaosLoad{start: time.Now(), cancel: cancel}
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        o.conns,
		MaxIdleConnsPerHost: o.conns,
		MaxConnsPerHost:     o.conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	// The pacer hands out one token per request due; a token not taken
	// because every worker is busy waits in the buffer (up to a second's
	// worth), so a stall is followed by a catch-up burst, as real clients do.
	tokens := make(chan struct{}, max(1, int(o.rate)))
	l.wg.Go(func() {
		defer close(tokens)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var sent int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int64(time.Since(l.start).Seconds() * o.rate)
			for ; sent < due; sent++ {
				select {
				case tokens <- struct{}{}:
				default:
				}
			}
		}
	})
	var seq atomic.Int64
	for range o.conns {
		l.wg.Go(func() {
			var mine []reqRec
			defer func() {
				l.mu.Lock()
				l.recs = append(l.recs, mine...)
				l.mu.Unlock()
			}()
			for range tokens {
				post := o.postPct > 0 && rand.IntN(100) < o.postPct
				id := ""
				if post {
					id = fmt.Sprintf("r%d-%d", o.runID, seq.Add(1))
				}
				r, ok := l.do(ctx, tr, o.url, post, id)
				if !ok {
					continue // cut short by the end of the load: no outcome
				}
				mine = append(mine, r)
				l.done.Add(1)
			}
		})
	}
	go func() {
		<-ctx.Done()
		tr.CloseIdleConnections()
	}()
	return l
}

// do sends one request; ok is false when the load ended under it.
func (l *chaosLoad) do(ctx context.Context, tr *http.Transport, base string, post bool, id string) (reqRec, bool) {
	rec := reqRec{post: post, id: id}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	rctx = httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { rec.attempts++ }})
	var req *http.Request
	if post {
		req, _ = http.NewRequestWithContext(rctx, http.MethodPost, base+"/echo", strings.NewReader("chaos"))
		req.Header.Set("X-Request-Id", id)
	} else {
		req, _ = http.NewRequestWithContext(rctx, http.MethodGet, base+"/", nil)
	}
	rec.start = int64(time.Since(l.start))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		rec.status = resp.StatusCode
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	rec.end = int64(time.Since(l.start))
	if ctx.Err() != nil {
		return rec, false
	}
	switch {
	case err != nil:
		rec.fail = classify(err)
	case rec.status < 200 || rec.status > 299:
		rec.fail = "HTTP " + strconv.Itoa(rec.status)
	}
	return rec, true
}

// classify names a transport error by its kind, so that a report says
// resets, EOFs and timeouts apart.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF (body cut short)"
	case errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF"):
		return "EOF before the answer"
	}
	return "error: " + err.Error()
}

func (l *chaosLoad) completed() int64 { return l.done.Load() }

// stop ends the load and returns every completed request; later calls
// return the same.
func (l *chaosLoad) stop() []reqRec {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
		l.stopped = l.recs
	})
	return l.stopped
}

// countSeen counts the "seen ID" lines of every instance log (rotated ones
// included) whose id starts with prefix.
func countSeen(dir, prefix string) (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log*"))
	if err != nil {
		return nil, err
	}
	seen := map[string]int{}
	for _, f := range files {
		if strings.HasPrefix(filepath.Base(f), "access.log") {
			continue
		}
		if err := scanSeen(f, prefix, seen); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

func scanSeen(path, prefix string, seen map[string]int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "seen "); ok && strings.HasPrefix(id, prefix) {
			seen[id]++
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
