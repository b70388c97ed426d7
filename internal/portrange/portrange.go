// Package portrange says where the kernel's ephemeral ports begin, and so
// which ports may be picked now and bound a moment later: every outgoing
// connection (HAProxy's health checks among them) takes its source port
// from the ephemeral range, so a port picked there may be a connection's by
// the time it is bound.
package portrange

import (
	"fmt"
	"os"
	"strings"
)

// rangeFile holds the kernel's ephemeral range, "FIRST LAST".
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// EphemeralStart is the first port of the kernel's ephemeral range (32768,
// Linux's default, when the file cannot be read).
func EphemeralStart() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &lo, &hi); err != nil || lo <= 0 {
		return 32768
	}
	return lo
}
