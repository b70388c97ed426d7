package group

import (
	"testing"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// TestHung: only a server whose checks got no answer and that still holds
// requests has them ended; one that answers its checks badly is alive.
func TestHung(t *testing.T) {
	for _, tc := range []struct {
		check    string
		sessions int
		want     bool
	}{
		{"L7TOUT", 3, true},
		{"L4TOUT", 1, true},
		{"L7TOUT", 0, false},
		{"L7STS", 3, false},
		{"L4CON", 3, false},
		{"L7OK", 3, false},
	} {
		if got := hung(haproxy.ServerStat{Status: "DOWN", CheckStatus: tc.check, Sessions: tc.sessions}); got != tc.want {
			t.Errorf("hung(check %s, %d sessions) = %v, want %v", tc.check, tc.sessions, got, tc.want)
		}
	}
}
