package haproxy

import (
	"strings"
	"testing"
	"time"
)

// testdata/show_stat.txt was captured from HAProxy 2.6.12 with s1 serving
// three slow requests, s2 draining one, s3 gated on a closed port and s4
// never enabled.
func TestParseStats(t *testing.T) {
	got, err := parseStats(readTestdata(t, "show_stat.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []ServerStat{
		{Type: TypeServer, Backend: "web", Name: "s1", Addr: "127.0.0.1:19011", Status: "UP", CheckStatus: "L7OK", CheckCode: 200, CheckDesc: "Layer7 check passed", LastChange: 4 * time.Second, Weight: 100, Sessions: 3, Total: 3, Rate: 2, MaxSessions: 3},
		{Type: TypeServer, Backend: "web", Name: "s2", Addr: "127.0.0.1:19012", Status: "DRAIN", CheckStatus: "L7OK", CheckCode: 200, CheckDuration: 53 * time.Millisecond, CheckDesc: "Layer7 check passed", LastChange: time.Second, Weight: 50, Sessions: 1, Total: 1, Rate: 1, MaxSessions: 1},
		{Type: TypeServer, Backend: "web", Name: "s3", Addr: "127.0.0.1:19013", Status: "DOWN", CheckStatus: "L4CON", CheckDesc: "Layer4 connection problem", CheckInfo: "Connection refused", LastChange: 4 * time.Second, Downs: 1, Weight: 100},
		{Type: TypeServer, Backend: "web", Name: "s4", Addr: "127.0.0.1:19013", Status: "MAINT", LastChange: 4 * time.Second, Weight: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d servers, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("server %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// testdata/show_stat_all.txt is a whole "show stat" of HAProxy 2.6.12: an
// HTTP frontend and backend "web" with a server in every status, a backend
// whose one server is down, and a TCP frontend and backend, after 40 HTTP
// requests (4 of them answered 500) and 3 TCP connections. Checks ran every
// 100ms; going-down (fall 3) and going-up (rise 3) had fastinter 60s and
// their checks had just started failing and passing; via tracks maint; nolb
// answered its check 404 under http-check disable-on-404; drain was set by
// "set server web/drain state drain"; nocheck has no check; down and dead's
// one server are on a closed port.
func TestParseStatsEveryStatus(t *testing.T) {
	got, err := parseStats(readTestdata(t, "show_stat_all.txt"))
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		typ                                             StatType
		backend, name                                   string
		status                                          Status
		up, down, maint, draining, checkedUp, goingDown bool
	}
	want := []line{
		{TypeFrontend, "web", "FRONTEND", "OPEN", false, false, false, false, false, false},
		{TypeServer, "web", "up", "UP", true, false, false, false, true, false},
		{TypeServer, "web", "going-down", "UP 1/3", true, false, false, false, true, true},
		{TypeServer, "web", "going-up", "DOWN 1/3", false, true, false, false, false, false},
		{TypeServer, "web", "down", "DOWN", false, true, false, false, false, false},
		{TypeServer, "web", "maint", "MAINT", false, false, true, false, false, false},
		{TypeServer, "web", "via", "MAINT (via web/maint)", false, false, true, false, false, false},
		{TypeServer, "web", "drain", "DRAIN", false, false, false, true, true, false},
		{TypeServer, "web", "nolb", "NOLB", false, false, false, false, true, false},
		{TypeServer, "web", "nocheck", "no check", false, false, false, false, false, false},
		{TypeBackend, "web", "BACKEND", "UP", true, false, false, false, true, false},
		{TypeServer, "dead", "gone", "DOWN", false, true, false, false, false, false},
		{TypeBackend, "dead", "BACKEND", "DOWN", false, true, false, false, false, false},
		{TypeFrontend, "tcp", "FRONTEND", "OPEN", false, false, false, false, false, false},
		{TypeServer, "tcp", "t1", "UP", true, false, false, false, true, false},
		{TypeBackend, "tcp", "BACKEND", "UP", true, false, false, false, true, false},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		s := got[i]
		st := s.Status
		l := line{s.Type, s.Backend, s.Name, st, st.IsUp(), st.IsDown(), st.InMaint(), st.Draining(), st.CheckedUp(), st.GoingDown()}
		if l != w {
			t.Errorf("line %d:\n got %+v\nwant %+v", i+2, l, w)
		}
	}

	// Counters of an HTTP server, a backend, a frontend and a TCP server,
	// whose req_tot HAProxy leaves empty.
	type key struct {
		typ           StatType
		backend, name string
	}
	byKey := map[key]ServerStat{}
	for _, s := range got {
		byKey[key{s.Type, s.Backend, s.Name}] = s
	}
	for k, w := range map[key]ServerStat{
		{TypeServer, "web", "up"}: {Type: TypeServer, Backend: "web", Name: "up", Addr: "127.0.0.1:44687", Status: "UP", CheckStatus: "L7OK", CheckCode: 200,
			CheckDesc: "Layer7 check passed", LastChange: 4 * time.Second, Weight: 1, Total: 8, Requests: 8, Rate: 7,
			Responses: [6]int64{2: 7, 5: 1}, ResponseTime: 5 * time.Millisecond, TotalTime: 5 * time.Millisecond, MaxSessions: 1},
		{TypeServer, "web", "down"}: {Type: TypeServer, Backend: "web", Name: "down", Addr: "127.0.0.1:38423", Status: "DOWN", CheckStatus: "L4CON",
			CheckDesc: "Layer4 connection problem", CheckInfo: "Connection refused", LastChange: 3 * time.Second, Downs: 1, Weight: 1,
			Total: 3, Rate: 1, Retries: 3, MaxSessions: 1},
		{TypeBackend, "web", "BACKEND"}: {Type: TypeBackend, Backend: "web", Name: "BACKEND", Status: "UP", LastChange: 4 * time.Second, Weight: 3,
			Sessions: 1, Total: 40, Requests: 39, Rate: 37, Responses: [6]int64{2: 35, 5: 4}, Retries: 3,
			ResponseTime: 5 * time.Millisecond, TotalTime: 5 * time.Millisecond, MaxSessions: 2, SessionLimit: 999},
		{TypeFrontend, "web", "FRONTEND"}: {Type: TypeFrontend, Backend: "web", Name: "FRONTEND", Status: "OPEN", Sessions: 2, Total: 2, Requests: 40,
			Rate: 1, Responses: [6]int64{2: 35, 5: 4}, MaxSessions: 2, SessionLimit: 9982},
		{TypeServer, "tcp", "t1"}: {Type: TypeServer, Backend: "tcp", Name: "t1", Addr: "127.0.0.1:35655", Status: "UP", CheckStatus: "L4OK",
			CheckDesc: "Layer4 check passed", LastChange: 4 * time.Second, Weight: 1, Total: 3, Requests: 3, Rate: 3, TotalTime: 5 * time.Millisecond, MaxSessions: 2},
	} {
		if g := byKey[k]; g != w {
			t.Errorf("%s/%s:\n got %+v\nwant %+v", k.backend, k.name, g, w)
		}
	}
}

func TestStatusWords(t *testing.T) {
	// Statuses HAProxy 2.6 writes besides those in show_stat_all.txt, and
	// what shoal shows where HAProxy lists no server.
	for _, tc := range []struct {
		status                                          Status
		up, down, maint, draining, checkedUp, goingDown bool
	}{
		{"DOWN (agent)", false, true, false, false, false, false},
		{"MAINT (resolution)", false, false, true, false, false, false},
		{"DRAIN 1/2", false, false, false, true, true, true},
		{"DRAIN (agent)", false, false, false, true, true, false},
		{"NOLB 2/3", false, false, false, false, true, true},
		{"UPPER", false, false, false, false, false, false},
		{"-", false, false, false, false, false, false},
		{"", false, false, false, false, false, false},
	} {
		s := tc.status
		got := [6]bool{s.IsUp(), s.IsDown(), s.InMaint(), s.Draining(), s.CheckedUp(), s.GoingDown()}
		if want := [6]bool{tc.up, tc.down, tc.maint, tc.draining, tc.checkedUp, tc.goingDown}; got != want {
			t.Errorf("%q: IsUp, IsDown, InMaint, Draining, CheckedUp, GoingDown = %v, want %v", s, got, want)
		}
	}
}

func TestCheckResults(t *testing.T) {
	for _, tc := range []struct {
		check           string
		code            int
		badly, timedOut bool
		refused         int
	}{
		{"L7OK", 200, false, false, 0},
		{"L7OKC", 404, false, false, 0},
		{"L7STS", 500, true, false, 500},
		{"L7RSP", 0, true, false, 0},
		{"L6RSP", 0, true, false, 0},
		{"L7TOUT", 0, true, true, 0},
		{"L4TOUT", 0, false, true, 0},
		{"L4CON", 0, false, false, 0},
		{"INI", 0, false, false, 0},
		{"", 0, false, false, 0},
	} {
		s := ServerStat{CheckStatus: tc.check, CheckCode: tc.code}
		if s.AnsweredBadly() != tc.badly || s.CheckTimedOut() != tc.timedOut || s.RefusedStatus() != tc.refused {
			t.Errorf("%s %d: AnsweredBadly %v, CheckTimedOut %v, RefusedStatus %d; want %v, %v, %d", tc.check, tc.code,
				s.AnsweredBadly(), s.CheckTimedOut(), s.RefusedStatus(), tc.badly, tc.timedOut, tc.refused)
		}
	}
}

func TestParseStatsByHeaderName(t *testing.T) {
	// Columns in another order, a quoted field with a comma, a check in
	// progress, and the BACKEND line that "show stat" without a filter adds.
	out := "# svname,status,pxname,addr,weight,stot,scur,check_status,check_desc,type,qcur,hrsp_5xx,econ,req_tot,wretr,wredis\n" +
		"s1,UP 1/2,be,10.0.0.1:80,7,12345678901,4,* L7OK,\"OK, fine\",2,,,,,,\n" +
		"BACKEND,UP,be,,7,1,0,,,1,,,,,,\n\n"
	got, err := parseStats(out)
	if err != nil {
		t.Fatal(err)
	}
	want := ServerStat{Type: TypeServer, Backend: "be", Name: "s1", Addr: "10.0.0.1:80", Status: "UP 1/2", CheckStatus: "L7OK", CheckDesc: "OK, fine",
		Weight: 7, Sessions: 4, Total: 12345678901, Requests: 12345678901}
	if len(got) != 2 || got[0] != want || got[1].Type != TypeBackend || got[1].Name != "BACKEND" {
		t.Fatalf("got %+v, want [%+v] and the backend's line", got, want)
	}
}

// TestParseStatsCounters: req_tot counts requests where HAProxy sets it,
// since stot also counts every retry of a request.
func TestParseStatsCounters(t *testing.T) {
	out := "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,hrsp_5xx,req_tot,extra,type,addr,check_status,weight\n" +
		"web,BACKEND,3,0,5,9,,120,0,0,0,0,,2,0,4,1,UP,7,120,x,1,,,1\n" +
		"web,web-001,1,0,4,9,,130,0,0,0,0,,1,0,0,0,UP,6,100,x,2,,,1\n" +
		"web,web-002,,,1,1,,20,0,0,0,0,,,,0,0,DOWN,,,x,2,,,1\n" +
		"\n"
	got, err := parseStats(out)
	if err != nil {
		t.Fatal(err)
	}
	type counters struct {
		sessions, queue                                int
		requests, errors5x, connErrs, retries, redisps int64
	}
	want := []counters{{5, 3, 120, 7, 2, 4, 1}, {4, 1, 100, 6, 1, 0, 0}, {1, 0, 20, 0, 0, 0, 0}}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %+v", len(got), len(want), got)
	}
	for i, s := range got {
		c := counters{s.Sessions, s.Queue, s.Requests, s.Responses[5], s.ConnErrors, s.Retries, s.Redispatches}
		if c != want[i] {
			t.Errorf("%s: got %+v, want %+v", s.Name, c, want[i])
		}
	}
}

// TestParseStatsUnmeasuredCheck: HAProxy 2.6 writes the duration of a
// check it has not measured (-1) as 2^64-1; that reads as no duration, not
// as an error that fails the whole answer.
func TestParseStatsUnmeasuredCheck(t *testing.T) {
	out := "# pxname,svname,qcur,scur,stot,econ,wretr,wredis,status,weight,type,addr,check_status,check_duration,hrsp_5xx,req_tot,srv_abrt\n" +
		"web,web-001,0,0,10,0,0,0,DOWN,1,2,10.0.0.2:20000,* L4CON,18446744073709551615,0,10,3\n\n"
	got, err := parseStats(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].CheckDuration != 0 || got[0].ServerAborts != 3 || got[0].CheckStatus != "L4CON" {
		t.Fatalf("got %+v, want web-001 with no check duration and 3 server aborts", got)
	}
}

func TestParseStatsErrors(t *testing.T) {
	for _, out := range []string{
		"No such proxy.\n\n",
		"",
		"# pxname,svname,status\nbe,s1,UP\n", // missing columns
	} {
		if got, err := parseStats(out); err == nil {
			t.Errorf("parseStats(%q) = %+v, want an error", out, got)
		}
	}
	if _, err := parseStats("No such proxy.\n\n"); err == nil || !strings.Contains(err.Error(), "No such proxy.") {
		t.Errorf("error %v does not quote HAProxy's answer", err)
	}
	if _, err := parseStats("Unknown command.\n"); err == nil || err.Error() != "Unknown command." {
		t.Errorf("error answer: %v", err)
	}
	if _, err := parseStats("# pxname,svname\nweb,x\n"); err == nil || !strings.Contains(err.Error(), `no "scur" column`) {
		t.Errorf("missing column: %v", err)
	}
	badNumber := "# pxname,svname,addr,status,check_status,weight,scur,stot,type,qcur,hrsp_5xx,econ,req_tot,wretr,wredis\n" +
		"be,s1,x,UP,,abc,0,0,2,0,0,0,0,0,0\n"
	if _, err := parseStats(badNumber); err == nil || !strings.Contains(err.Error(), "line 2: column weight") {
		t.Errorf("bad number: %v", err)
	}
}
