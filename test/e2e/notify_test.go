package e2e

import (
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/notify"
)

// hookReceiver is a webhook receiver on 127.0.0.1 that checks signatures
// and refuses every post while down, and its first fail posts with 500.
type hookReceiver struct {
	secret []byte
	fail   int

	mu       sync.Mutex
	down     bool
	refused  int
	badSigs  int
	received []event.Event
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !hmac.Equal([]byte(r.Header.Get(notify.SignatureHeader)), []byte(notify.Sign(h.secret, body))) {
		h.badSigs++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	if h.down {
		h.refused++
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if h.fail > 0 {
		h.fail--
		h.refused++
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	var ev event.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.received = append(h.received, ev)
}

func (h *hookReceiver) setDown(down bool) {
	h.mu.Lock()
	h.down = down
	h.mu.Unlock()
}

// has reports whether an event of type t about subject was received.
func (h *hookReceiver) has(t event.Type, subject string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.received {
		if ev.Type == t && (subject == "" || ev.Subject == subject) {
			return true
		}
	}
	return false
}

// TestNotifyWebhook runs a real core with a webhook target: the group's
// first launch and a scale-up reach the receiver signed; while the
// receiver refuses, the core's failures show in /metrics; events queued
// then survive a kill -9 of the core and are delivered by the next run.
func TestNotifyWebhook(t *testing.T) {
	parallel(t) // waits for events, no load
	rcv := &hookReceiver{secret: []byte("e2e-hook-secret")}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	secret := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(secret, rcv.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	e := newEnv(t, fmt.Sprintf(`metrics:
  listen: %s
notify:
  retry_min: 200ms
  retry_max: 1s
  targets:
    - {name: ops, type: webhook, url: "%s/hook", secret_file: %s, events: ["instance.*", "scale.*"]}
`, metricsAddr, srv.URL, secret), groupSpec{Name: "web", Min: 1, Max: 3})
	e.start()
	e.waitInService("web", 1)
	e.eventually("web-001's launch notified", 20*time.Second, func() error {
		if !rcv.has(event.InstanceLaunched, "web-001") {
			return fmt.Errorf("received %d events, no instance.launched of web-1", len(rcv.received))
		}
		return nil
	})
	if out, stderr, code := e.cli("scale", "web", "up", "--sync"); code != 0 {
		t.Fatalf("scale up: %d %s %s", code, out, stderr)
	}
	e.eventually("the scale-up notified", 20*time.Second, func() error {
		if !rcv.has(event.ScaleStarted, "") || !rcv.has(event.ScaleFinished, "") || !rcv.has(event.InstanceLaunched, "web-002") {
			return fmt.Errorf("not yet: %d events", len(rcv.received))
		}
		return nil
	})

	// The receiver goes down: the next launch is queued and retried.
	rcv.setDown(true)
	if out, stderr, code := e.cli("scale", "web", "up", "--sync"); code != 0 {
		t.Fatalf("scale up: %d %s %s", code, out, stderr)
	}
	failures := regexp.MustCompile(`(?m)^shoal_notification_failures_total\{target="ops"\} (\d+)$`)
	e.eventually("failures in /metrics", 20*time.Second, func() error {
		_, body := httpGet(t, "http://"+metricsAddr+"/metrics", "")
		m := failures.FindStringSubmatch(body)
		if m == nil {
			return fmt.Errorf("no failure counter in /metrics")
		}
		if n, _ := strconv.Atoi(m[1]); n < 2 {
			return fmt.Errorf("%d failures so far", n)
		}
		return nil
	})
	e.kill9()
	if rcv.has(event.InstanceLaunched, "web-003") {
		t.Fatal("web-003's launch was delivered while the receiver was down")
	}
	rcv.setDown(false)
	e.start()
	e.eventually("web-003's launch delivered by the next run", 30*time.Second, func() error {
		if !rcv.has(event.InstanceLaunched, "web-003") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	rcv.mu.Lock()
	bad, refused := rcv.badSigs, rcv.refused
	rcv.mu.Unlock()
	if bad != 0 || refused < 2 {
		t.Errorf("bad signatures %d, refused %d; want 0, ≥2", bad, refused)
	}
	if strings.Contains(e.log.String(), "e2e-hook-secret") {
		t.Error("the webhook secret is in the core's log")
	}
	e.stop()
}

// TestNotifyOrderAfterFailure: the receiver refuses the first post (web-001's
// launch) with 500; the events of a scale-up that follows reach it after
// that launch is retried, all in the order they happened.
func TestNotifyOrderAfterFailure(t *testing.T) {
	parallel(t) // waits for events, no load
	rcv := &hookReceiver{secret: []byte("e2e-hook-secret"), fail: 1}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	secret := filepath.Join(t.TempDir(), "hook.secret")
	if err := os.WriteFile(secret, rcv.secret, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, fmt.Sprintf(`notify:
  retry_min: 3s
  retry_max: 5s
  targets:
    - {name: ops, type: webhook, url: "%s/hook", secret_file: %s, events: ["instance.launched", "scale.*"]}
`, srv.URL, secret), groupSpec{Name: "web", Min: 1, Max: 2})
	e.start()
	e.waitInService("web", 1)
	e.eventually("the first post refused", 20*time.Second, func() error {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		if rcv.refused == 0 {
			return fmt.Errorf("nothing posted yet")
		}
		return nil
	})
	if out, stderr, code := e.cli("scale", "web", "up", "--sync"); code != 0 {
		t.Fatalf("scale up: %d %s %s", code, out, stderr)
	}
	var got []string
	e.eventually("every event delivered", 30*time.Second, func() error {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		got = got[:0]
		for _, ev := range rcv.received {
			got = append(got, string(ev.Type)+" "+ev.Subject)
		}
		if len(got) < 4 {
			return fmt.Errorf("received %q", got)
		}
		return nil
	})
	want := []string{"instance.launched web-001", "scale.started", "instance.launched web-002", "scale.finished"}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Fatalf("received %q, want in the order %q", got, want)
		}
	}
}
