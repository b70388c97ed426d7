package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

func TestCheckColumns(t *testing.T) {
	changed := time.Now().Add(-90 * time.Second)
	tests := []struct {
		in   group.InstanceStatus
		want string
	}{
		{group.InstanceStatus{Check: "L7OK", CheckCode: 200, CheckDurationMS: 3, CheckDesc: "Layer7 check passed", LastChange: &changed}, "L7OK 200 3ms\t1m30s ago\t"},
		{group.InstanceStatus{Check: "L4CON", CheckDesc: "Layer4 connection problem", CheckReason: "Connection refused"}, "L4CON\t-\tConnection refused"},
		{group.InstanceStatus{Check: "L7RSP", CheckDesc: "Layer7 invalid response"}, "L7RSP\t-\tLayer7 invalid response"},
		// What a check saw comes from the instance: no terminal escapes.
		{group.InstanceStatus{Check: "L7STS", CheckCode: 500, CheckReason: "bad\x1b[2J\r\n"}, "L7STS 500\t-\tbad?[2J??"},
		{group.InstanceStatus{Check: "L7OK", CheckReason: "(tcp-check)"}, "L7OK\t-\t"},
		{group.InstanceStatus{}, "-\t-\t"},
	}
	for _, tt := range tests {
		if got := checkColumns(tt.in); got != tt.want {
			t.Errorf("checkColumns(%+v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCheckStatusOutput(t *testing.T) {
	for _, ok := range []string{"text", "html", "csv", "json"} {
		if err := checkStatusOutput(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	err := checkStatusOutput("yaml")
	if ee, ok := err.(*exitError); !ok || ee.code != exitUsage || ee.msg != `-o must be one of text, html, csv, json, got "yaml"` {
		t.Errorf("yaml: %v", err)
	}
}

// TestPrintLimited: a limited client may be a header's value, chosen by
// the client: it reaches the terminal without control characters.
func TestPrintLimited(t *testing.T) {
	var b strings.Builder
	printLimited(&b, []haproxy.LimitedClient{
		{Frontend: "edge", Client: "127.0.0.1", Refused: 30, Rate: 430},
		{Frontend: "keys", Client: "key\x1b[2J", Refused: 3, Rate: 6},
	})
	want := "FRONTEND  RATE-LIMITED CLIENT  REFUSED  RATE\n" +
		"edge      127.0.0.1            30       430\n" +
		"keys      key?[2J              3        6\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
