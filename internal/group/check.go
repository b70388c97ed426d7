package group

import (
	"strconv"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// States lists every instance state in lifecycle order, for validating user
// input such as `shoal instances --state`.
var States = []State{Starting, InService, Unhealthy, Drained, Standby, Draining, Stopping, Failed}

// checkSummary says what HAProxy's last check of a server found, such as
// "L7STS 500 Internal Server Error" or "L7RSP HTTP content check did not match".
func checkSummary(st haproxy.ServerStat) string {
	s := st.CheckStatus
	if st.CheckCode != 0 {
		s += " " + strconv.Itoa(st.CheckCode)
	}
	if st.CheckInfo != "" {
		s += " " + st.CheckInfo
	}
	return s
}
