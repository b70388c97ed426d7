package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"strings"
	"testing"
	"time"
)

// TestStickyAndRateLimit: through shoal's own groups and frontends, a
// client with the sticky cookie stays on one instance, and the clients of
// an instance that is scaled in move to another without a failed request;
// a frontend's rate limit answers 429 past the limit and `shoal status`
// names the client.
func TestStickyAndRateLimit(t *testing.T) {
	parallel(t)
	e := newEnv(t, "", groupSpec{Name: "web", Min: 1, Max: 2, Extra: "    sticky: {cookie: SHOALSRV}\n    scale_in: newest\n"})
	// The harness writes the listen shorthand; make it a frontend with a
	// rate limit.
	data, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	short := "listen: " + e.listen + "\n"
	edge := fmt.Sprintf("frontends:\n  - name: edge\n    bind: [%s]\n    rate_limit: {requests: 400, per: 1m}\n    routes: [{group: web}]\n", e.listen)
	if !strings.Contains(string(data), short) {
		t.Fatalf("no %q in the config", short)
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(data), short, edge, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitInService("web", 1)
	if out, stderr, code := e.cli("scale", "web", "--size", "2"); code != 0 {
		t.Fatalf("scale: %d\n%s%s", code, out, stderr)
	}
	e.waitInService("web", 2)

	url := "http://" + e.listen + "/"
	type client struct {
		*http.Client
		home string
	}
	clients := make([]*client, 4)
	for i := range clients {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = &client{Client: &http.Client{Jar: jar, Timeout: 10 * time.Second}}
	}
	sent := 0
	get := func(c *client) (instance string, status int, err error) {
		sent++
		resp, err := c.Get(url)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header.Get("X-Instance"), resp.StatusCode, nil
	}

	// The first client's 100 requests, the others' 20: one instance each;
	// round robin gives the new clients both instances.
	homes := map[string]int{}
	for i, c := range clients {
		n := 20
		if i == 0 {
			n = 100
		}
		for j := range n {
			inst, code, err := get(c)
			if err != nil || code != http.StatusOK {
				t.Fatalf("client %d request %d: %d, %v", i, j, code, err)
			}
			if c.home == "" {
				c.home = inst
			} else if inst != c.home {
				t.Fatalf("client %d request %d went to %s, not %s", i, j, inst, c.home)
			}
		}
		homes[c.home]++
	}
	t.Logf("clients per instance: %v", homes)
	if len(homes) != 2 {
		t.Fatalf("the clients stick to %v, want both instances", homes)
	}

	// Scale in (the newest instance retires) while every client keeps
	// sending: not one request fails.
	if out, stderr, code := e.cli("scale", "web", "--size", "1"); code != 0 {
		t.Fatalf("scale: %d\n%s%s", code, out, stderr)
	}
	served := map[string]int{}
	for round := range 50 {
		for i, c := range clients {
			inst, code, err := get(c)
			if err != nil || code != http.StatusOK {
				t.Fatalf("client %d, round %d of the scale-in: %d, %v (served so far: %v)", i, round, code, err, served)
			}
			served[inst]++
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.waitInService("web", 1)
	st := e.status()
	kept := st.Groups[0].Instances[0].Name
	t.Logf("during the scale-in: %v; %s is left", served, kept)
	// The retiring instance kept its sticky clients while it drained.
	for home := range homes {
		if home != kept && served[home] == 0 {
			t.Errorf("the draining %s served none of its sticky clients' requests: %v", home, served)
		}
	}
	for i, c := range clients {
		if inst, code, err := get(c); err != nil || code != http.StatusOK || inst != kept {
			t.Errorf("client %d (of %s) after the scale-in: %s, %d, %v", i, c.home, inst, code, err)
		}
	}

	// The rest of the limit passes, then 429.
	left := 400 - sent
	var codes []int
	for range left + 30 {
		_, code, err := get(clients[0])
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, code)
	}
	ok := 0
	for ok < len(codes) && codes[ok] == http.StatusOK {
		ok++
	}
	if ok != left || codes[len(codes)-1] != http.StatusTooManyRequests {
		t.Errorf("after %d requests, %d more passed, want %d (limit 400 a minute); statuses %v", 400-left, ok, left, codes)
	}

	st = e.status()
	if len(st.RateLimited) != 1 || st.RateLimited[0].Client != "127.0.0.1" || st.RateLimited[0].Frontend != "edge" || st.RateLimited[0].Refused != 30 {
		t.Errorf("status rate_limited = %+v, want 127.0.0.1 on edge with 30 refused", st.RateLimited)
	}
	out, stderr, code := e.cli("status")
	if code != 0 {
		t.Fatalf("shoal status: %d %s", code, stderr)
	}
	if !strings.Contains(out, "RATE-LIMITED CLIENT") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("shoal status does not show the limited client:\n%s", out)
	}
	t.Logf("shoal status:\n%s", out)
}

// TestRateLimitKeysNotShown: a rate limit keyed by an API key header
// refuses a client past its limit, and the status names that client by a
// digest of its key everywhere it is shown (`shoal status` over the unix
// socket, GET /v1/status and the status page over TCP, the dashboard's
// stream) and nowhere by the key itself, nor in shoal's log.
func TestRateLimitKeysNotShown(t *testing.T) {
	parallel(t)
	const token = "keys-s3cret"
	port := freePort(t)
	e := newEnv(t, fmt.Sprintf("admin:\n  listen: 127.0.0.1:%d\n  token: %s\n", port, token), groupSpec{Name: "web", Min: 1, Max: 1})
	data, err := os.ReadFile(e.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	short := "listen: " + e.listen + "\n"
	edge := fmt.Sprintf("frontends:\n  - name: edge\n    bind: [%s]\n    rate_limit: {requests: 5, per: 1m, by: \"header:X-Api-Key\"}\n    routes: [{group: web}]\n", e.listen)
	if !strings.Contains(string(data), short) {
		t.Fatalf("no %q in the config", short)
	}
	if err := os.WriteFile(e.cfgPath, []byte(strings.Replace(string(data), short, edge, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitInService("web", 1)

	const key = "sk-live-4f9a1c2e8b7d6a5f" // the secret a client sends
	sum := sha256.Sum256([]byte(key))
	digest := "sha256:" + hex.EncodeToString(sum[:])[:12]
	codes := map[int]int{}
	for range 8 {
		req, _ := http.NewRequest("GET", "http://"+e.listen+"/", nil)
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes[resp.StatusCode]++
	}
	if codes[200] != 5 || codes[429] != 3 {
		t.Fatalf("statuses %v, want 5 × 200 and 3 × 429", codes)
	}

	shown := map[string]string{} // where → what it shows
	st := e.status()
	if len(st.RateLimited) != 1 || st.RateLimited[0].Client != digest || st.RateLimited[0].Refused != 3 {
		t.Errorf("status rate_limited = %+v, want %s with 3 refused", st.RateLimited, digest)
	}
	out, stderr, code := e.cli("status")
	if code != 0 {
		t.Fatalf("shoal status: %d %s", code, stderr)
	}
	shown["shoal status"] = out
	jsonOut, _, _ := e.cli("status", "-o", "json")
	shown["shoal status -o json"] = jsonOut

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for _, path := range []string{"/v1/status", "/status", "/status?format=json"} {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		shown["GET "+path] = string(body)
	}
	shown["the dashboard's stream"] = dashboardMessage(t, base, token)
	for where, text := range shown {
		if strings.Contains(text, key) || strings.Contains(text, key[:12]) {
			t.Errorf("%s shows the API key:\n%s", where, text)
		}
		if where != "GET /status" && !strings.Contains(text, digest) {
			t.Errorf("%s does not name the client %s:\n%s", where, digest, text)
		}
	}
	if strings.Contains(e.log.String(), key) {
		t.Errorf("shoal's log holds the API key:\n%s", e.log)
	}
	t.Logf("shoal status:\n%s", out)
}

// dashboardMessage logs in to the dashboard with token and returns the
// first message of its stream.
func dashboardMessage(t *testing.T, base, token string) string {
	t.Helper()
	c, session := dashboardLogin(t, base, token)
	req, _ := http.NewRequest("GET", base+"/ui/stream?group=web", nil)
	req.AddCookie(session)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			return line
		}
	}
	t.Fatalf("dashboard stream: no message (%v)", sc.Err())
	return ""
}
