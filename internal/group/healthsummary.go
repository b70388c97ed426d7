package group

import (
	"strconv"

	"github.com/shoal-lb/shoal/internal/haproxy"
)

// healthCheckSummary says what HAProxy's last health check of a server
// found, such as "L7STS 500 Internal Server Error" or "L7RSP HTTP content
// check did not match".
func healthCheckSummary(st haproxy.ServerStat) string {
	s := st.CheckStatus
	if st.CheckCode != 0 {
		s += " " + strconv.Itoa(st.CheckCode)
	}
	if st.CheckInfo != "" {
		s += " " + st.CheckInfo
	}
	return s
}
