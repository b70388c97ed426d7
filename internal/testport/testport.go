// Package testport hands tests ports of 127.0.0.1 to bind later (HAProxy's
// frontends, pebble, etcd, moto).
//
// A port from net.Listen(":0") is in the kernel's ephemeral range, where
// every outgoing connection also takes its source port: with tests side by
// side under load, a port picked, closed and bound a second later had
// meanwhile become some client's source port, and the bind failed. So the
// ports come from below that range (and below shoal's local instances'), walked from an offset of this process's
// pid (test binaries of several packages run at once), each checked free
// for TCP and UDP and never handed out twice by one process.
package testport

import (
	"fmt"
	"net"
	"os"
	"sync"
	"testing"

	"github.com/shoal-lb/shoal/internal/portrange"
)

// The walk's range: above the ports services and other tools commonly
// listen on, below the range shoal's local instances take theirs from
// (provider/local) and the kernel's ephemeral range.
const lowest, highest = 10000, 20000

var walk struct {
	sync.Mutex
	next, lo, hi int // hi: the first port past the walk
}

// Free returns a port of 127.0.0.1 that nothing listens on for TCP or UDP
// now and that this process handed out to no one before.
func Free(t testing.TB) int {
	t.Helper()
	p, err := Next()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Next is Free for callers without a testing.TB.
func Next() (int, error) {
	walk.Lock()
	defer walk.Unlock()
	if walk.hi == 0 {
		walk.lo, walk.hi = lowest, min(highest, portrange.EphemeralStart())
		if walk.hi-walk.lo < 1000 {
			return 0, fmt.Errorf("testport: the ephemeral range starts at %d: no room below it from %d", walk.hi, lowest)
		}
		walk.next = walk.lo + (os.Getpid()*97)%(walk.hi-walk.lo)
	}
	span := walk.hi - walk.lo
	for range span {
		p := walk.next
		walk.next++
		if walk.next >= walk.hi {
			walk.next = walk.lo
		}
		if bindable(p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("testport: no free port in %d-%d", walk.lo, walk.hi-1)
}

func bindable(p int) bool {
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
