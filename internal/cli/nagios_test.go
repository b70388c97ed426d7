package cli

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCheckCommand(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "all good") })
	mux.HandleFunc("/err", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "broken", http.StatusInternalServerError) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(300 * time.Millisecond)
		io.WriteString(w, "late")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ln6, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	srv6 := httptest.NewUnstartedServer(mux)
	srv6.Listener.Close()
	srv6.Listener = ln6
	srv6.Start()
	defer srv6.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "http://" + closed.Addr().String() + "/"
	closed.Close()

	tests := []struct {
		args []string
		code int
		line string // a regexp the status line matches
	}{
		{[]string{srv.URL + "/ok", "--expect", "200", "--warning", "200ms", "--critical", "1s"}, 0,
			`^HTTP OK: HTTP/1.1 200 OK - 8 bytes in \d+\.\d{3} s\|time=\d+\.\d{6}s;0.2;1;0 size=8B;;;0$`},
		{[]string{srv6.URL + "/ok", "--expect-body", "good"}, 0, `^HTTP OK: `},
		{[]string{srv.URL + "/missing"}, 1, `^HTTP WARNING: HTTP/1.1 404 Not Found`},
		{[]string{srv.URL + "/err"}, 2, `^HTTP CRITICAL: HTTP/1.1 500 `},
		{[]string{srv.URL + "/ok", "--expect", "201"}, 2, `^HTTP CRITICAL: HTTP/1.1 200 OK .*, expected 201\|`},
		{[]string{srv.URL + "/ok", "--expect-body", "nope"}, 2, `, body lacks "nope"\|`},
		{[]string{srv.URL + "/slow", "--warning", "100ms", "--critical", "1s"}, 1, `^HTTP WARNING: .*slower than 100ms\|time=0\.[3-9]\d*s;0.1;1;0`},
		{[]string{srv.URL + "/slow", "--warning", "100ms", "--critical", "200ms"}, 2, `^HTTP CRITICAL: .*slower than 200ms`},
		{[]string{srv.URL + "/slow", "--timeout", "100ms"}, 2, `^HTTP CRITICAL: .*deadline exceeded.*\|time=`},
		{[]string{closedURL}, 2, `^HTTP CRITICAL: .*connection refused`},
		{[]string{srv.URL, "--bogus"}, 3, `^HTTP UNKNOWN: unknown flag: --bogus$`},
		{[]string{}, 3, `^HTTP UNKNOWN: want one URL`},
		{[]string{"ftp://127.0.0.1/"}, 3, `^HTTP UNKNOWN: URL must be http`},
		{[]string{srv.URL, "--warning", "2s", "--critical", "1s"}, 3, `^HTTP UNKNOWN: --warning`},
		// check_http's forms: a list of statuses, thresholds in seconds.
		{[]string{srv.URL + "/missing", "--expect", "200,404"}, 0, `^HTTP OK: HTTP/1.1 404 Not Found`},
		{[]string{srv.URL + "/ok", "--expect", "301,302"}, 2, `, expected 301,302\|`},
		{[]string{srv.URL + "/slow", "--warning", "0.1", "--critical", "5"}, 1, `^HTTP WARNING: .*slower than 100ms\|time=0\.[3-9]\d*s;0.1;5;0`},
		{[]string{srv.URL, "--expect", "200,abc"}, 3, `^HTTP UNKNOWN: invalid argument "200,abc" for "--expect"`},
		{[]string{srv.URL, "--warning", "-1"}, 3, `^HTTP UNKNOWN: invalid argument "-1" for "--warning"`},
		// tcp://: a connect, over IPv4 and IPv6.
		{[]string{"tcp://" + srv.Listener.Addr().String(), "--warning", "1"}, 0, `^TCP OK: connected to 127\.0\.0\.1:\d+ in \d+\.\d{3} s\|time=\d+\.\d{6}s;1;;0$`},
		{[]string{"tcp://" + ln6.Addr().String()}, 0, `^TCP OK: connected to \[::1\]:\d+`},
		{[]string{"tcp://" + closed.Addr().String()}, 2, `^TCP CRITICAL: connect to .*connection refused`},
		{[]string{"tcp://127.0.0.1"}, 3, `^TCP UNKNOWN: a tcp URL is tcp://HOST:PORT`},
		{[]string{"tcp://127.0.0.1:80", "--expect", "200"}, 3, `^TCP UNKNOWN: --expect, --expect-body and --host are for http checks`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(append([]string{"check"}, tt.args...), &out, &errOut)
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			if code != tt.code || len(lines) != 1 || !regexp.MustCompile(tt.line).MatchString(lines[0]) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and one line matching %s", code, out.String(), errOut.String(), tt.code, tt.line)
			}
		})
	}
}
