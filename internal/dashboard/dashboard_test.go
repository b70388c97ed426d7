package dashboard_test

import (
	"bufio"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/dashboard"
	"github.com/shoal-lb/shoal/internal/group"
)

const token = "s3cret-token"

// start serves the real API handler with the dashboard on a real listener.
func start(t *testing.T) *httptest.Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	h := api.NewHandler(nil, noGroups{}, log, token, api.WithUI(func(a http.Handler) api.UI {
		return dashboard.New(t.Context(), a, token, log)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// noGroups runs no group: the stream's status is empty.
type noGroups struct{}

func (noGroups) Group(string) (*group.Group, bool) { return nil, false }
func (noGroups) Names() []string                   { return nil }
func (noGroups) All() []*group.Group               { return nil }

type answer struct {
	code   int
	body   string
	header http.Header
}

// do sends one request without following redirects.
func do(t *testing.T, method, u, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}
}

func form(tok string) string { return url.Values{"token": {tok}}.Encode() }

const formType = "application/x-www-form-urlencoded"

func TestLoginSessionAndCSRF(t *testing.T) {
	srv := start(t)
	origin := srv.URL

	a := do(t, "GET", srv.URL+"/ui/", "")
	if a.code != http.StatusUnauthorized || !strings.Contains(a.body, `action="/ui/login"`) {
		t.Fatalf("GET /ui/ without a session: %d %q, want 401 with the login form", a.code, a.body)
	}
	if a := do(t, "GET", srv.URL+"/", ""); a.code != http.StatusSeeOther || a.header.Get("Location") != "/ui/" {
		t.Errorf("GET /: %d to %q, want 303 to /ui/", a.code, a.header.Get("Location"))
	}
	if a := do(t, "GET", srv.URL+"/healthz", ""); a.code != http.StatusUnauthorized || !strings.Contains(a.body, "bearer token") {
		t.Errorf("API without token or session: %d %q, want 401", a.code, a.body)
	}
	if a := do(t, "GET", srv.URL+"/ui/stream", ""); a.code != http.StatusUnauthorized {
		t.Errorf("stream without a session: %d, want 401", a.code)
	}
	if a := do(t, "GET", srv.URL+"/ui/assets/app.js", ""); a.code != http.StatusOK || !strings.Contains(a.body, "EventSource") {
		t.Errorf("asset without a session: %d, want 200 (the login page needs its stylesheet)", a.code)
	}

	a = do(t, "POST", srv.URL+"/ui/login", form("wrong"), "Content-Type", formType, "Origin", origin)
	if a.code != http.StatusUnauthorized || !strings.Contains(a.body, "wrong token") || a.header.Get("Set-Cookie") != "" {
		t.Fatalf("wrong token: %d %q cookie %q, want 401, the form again and no cookie", a.code, a.body, a.header.Get("Set-Cookie"))
	}
	a = do(t, "POST", srv.URL+"/ui/login", form(token), "Content-Type", formType, "Origin", "http://evil.example")
	if a.code != http.StatusForbidden || a.header.Get("Set-Cookie") != "" {
		t.Fatalf("cross-origin login: %d cookie %q, want 403 and no cookie", a.code, a.header.Get("Set-Cookie"))
	}
	a = do(t, "POST", srv.URL+"/ui/login", form(token), "Content-Type", formType, "Origin", origin)
	if a.code != http.StatusSeeOther || a.header.Get("Location") != "/ui/" {
		t.Fatalf("right token: %d to %q, want 303 to /ui/", a.code, a.header.Get("Location"))
	}
	resp := http.Response{Header: a.header}
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "shoal_session" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Value == "" {
		t.Fatalf("session cookie %q: want HttpOnly, SameSite=Strict", a.header.Get("Set-Cookie"))
	}
	cookie := session.Name + "=" + session.Value

	if a := do(t, "GET", srv.URL+"/ui/", "", "Cookie", cookie); a.code != http.StatusOK || !strings.Contains(a.body, `id="overview"`) {
		t.Errorf("GET /ui/ with the session: %d, want 200 and the dashboard", a.code)
	}
	if a := do(t, "GET", srv.URL+"/healthz", "", "Cookie", cookie); a.code != http.StatusOK {
		t.Errorf("API GET with the session: %d, want 200", a.code)
	}
	// A POST reaches the API (404: no such endpoint) only from the
	// dashboard's own origin.
	for _, c := range []struct {
		origin string
		want   int
	}{{"", http.StatusUnauthorized}, {"http://evil.example", http.StatusUnauthorized}, {origin, http.StatusNotFound}} {
		a := do(t, "POST", srv.URL+"/v1/nothing", "{}", "Cookie", cookie, "Origin", c.origin)
		if a.code != c.want {
			t.Errorf("POST with the session from origin %q: %d, want %d", c.origin, a.code, c.want)
		}
	}
	if a := do(t, "GET", srv.URL+"/healthz", "", "Cookie", "shoal_session=forged"); a.code != http.StatusUnauthorized {
		t.Errorf("forged session: %d, want 401", a.code)
	}

	if a := do(t, "POST", srv.URL+"/ui/logout", "", "Cookie", cookie, "Origin", origin); a.code != http.StatusSeeOther {
		t.Fatalf("logout: %d, want 303", a.code)
	}
	if a := do(t, "GET", srv.URL+"/healthz", "", "Cookie", cookie); a.code != http.StatusUnauthorized {
		t.Errorf("API with a logged-out session: %d, want 401", a.code)
	}
}

// Wrong tokens at the login form count with wrong bearer tokens: the
// eleventh in a minute is answered 429 without being checked. The
// favicon browsers fetch unbidden is no failure.
func TestLoginFailuresLimited(t *testing.T) {
	srv := start(t)
	for range 12 {
		if a := do(t, "GET", srv.URL+"/favicon.ico", ""); a.code != http.StatusNoContent {
			t.Fatalf("favicon: %d, want 204", a.code)
		}
	}
	for i := range 10 {
		if a := do(t, "POST", srv.URL+"/ui/login", form("guess"), "Content-Type", formType, "Origin", srv.URL); a.code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, a.code)
		}
	}
	if a := do(t, "POST", srv.URL+"/ui/login", form(token), "Content-Type", formType, "Origin", srv.URL); a.code != http.StatusTooManyRequests {
		t.Fatalf("login after 10 failures: %d, want 429", a.code)
	}
}

// The page loads nothing from elsewhere and stays light.
func TestAssetsEmbeddedAndSmall(t *testing.T) {
	srv := start(t)
	total := 0
	for _, name := range []string{"app.js", "chart.js", "app.css"} {
		a := do(t, "GET", srv.URL+"/ui/assets/"+name, "")
		if a.code != http.StatusOK {
			t.Fatalf("asset %s: %d", name, a.code)
		}
		total += len(a.body)
	}
	login := do(t, "GET", srv.URL+"/ui/", "")
	total += len(login.body)
	for _, page := range []string{login.body, do(t, "GET", srv.URL+"/ui/assets/app.js", "").body, do(t, "GET", srv.URL+"/ui/assets/chart.js", "").body} {
		// The chart's SVG namespace is a name, not a place loaded from.
		page = strings.ReplaceAll(page, `"http://www.w3.org/2000/svg"`, "")
		if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
			t.Errorf("an asset refers to another site:\n%s", page)
		}
	}
	if total > 100<<10 {
		t.Errorf("assets total %d bytes, want under 100 KB", total)
	}
	t.Logf("assets: %d bytes", total)
	if !strings.Contains(login.header.Get("Content-Security-Policy"), "default-src 'self'") {
		t.Errorf("CSP %q, want default-src 'self'", login.header.Get("Content-Security-Policy"))
	}
}

// An open stream ends within a tick of its session's end, not at the
// stream's hour: logging out stops what it sends.
func TestStreamEndsAtLogout(t *testing.T) {
	srv := start(t)
	a := do(t, "POST", srv.URL+"/ui/login", form(token), "Content-Type", formType, "Origin", srv.URL)
	cookie := ""
	for _, c := range (&http.Response{Header: a.header}).Cookies() {
		if c.Name == "shoal_session" {
			cookie = c.Name + "=" + c.Value
		}
	}
	if cookie == "" {
		t.Fatalf("login: %d, no session cookie", a.code)
	}
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/ui/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d, want 200", resp.StatusCode)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first message: %q, %v", line, err)
	}
	if a := do(t, "POST", srv.URL+"/ui/logout", "", "Cookie", cookie, "Origin", srv.URL); a.code != http.StatusSeeOther {
		t.Fatalf("logout: %d, want 303", a.code)
	}
	loggedOut := time.Now()
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, br)
		ended <- err
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("stream ended with %v, want its end", err)
		}
		t.Logf("stream ended %s after logout", time.Since(loggedOut).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		resp.Body.Close()
		t.Fatal("stream still open 5 s after logout")
	}
}
