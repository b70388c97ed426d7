package gslb

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

// health is a site's state as gdnsd keeps it for a service_type:
//
//	      up_thresh consecutive successes
//	DOWN ────────────────────────────────▶ UP
//	 ▲                                      │
//	 └──────────────────────────────────────┘
//	   down_thresh failures, not necessarily consecutive,
//	   with no ok_thresh consecutive successes between them
//
// In UP, ok_thresh consecutive successes forget the failures counted; in
// DOWN, a failure restarts the count of successes. As in gdnsd, the first
// check alone decides the initial state (see site.monitor).
type health struct {
	down   bool
	fails  int // UP: failures since the last ok_thresh successes
	streak int // consecutive successes
}

// observe records one check's outcome and reports whether the state changed.
func (h *health) observe(ok bool, c config.GSLBCheck) bool {
	if ok {
		h.streak++
	} else {
		h.streak = 0
	}
	switch {
	case h.down && h.streak >= c.UpThresh:
		*h = health{}
		return true
	case h.down:
		return false
	case !ok:
		h.fails++
		if h.fails >= c.DownThresh {
			*h = health{down: true}
			return true
		}
	case h.streak >= c.OKThresh:
		h.fails, h.streak = 0, 0
	}
	return false
}

// site is one address of a record and its monitor's verdict.
type site struct {
	record string
	addr   netip.Addr
	check  config.GSLBCheck
	probe  Probe
	up     atomic.Bool
	// transition counts state changes (to "up" or "down").
	transition func(to string)
}

func newSite(record string, s config.GSLBSite, transition func(site *site, to string)) (*site, error) {
	addr, err := netip.ParseAddr(s.Address)
	if err != nil {
		return nil, fmt.Errorf("gslb record %s: site %q: %w", record, s.Address, err)
	}
	c := s.Check
	hostport := net.JoinHostPort(addr.String(), strconv.Itoa(c.Port))
	p := Probe{Addr: hostport, Host: c.Host, Timeout: c.Timeout}
	if c.Type == "http" {
		p.URL = "http://" + hostport + c.Path
	}
	st := &site{record: record, addr: addr, check: c, probe: p}
	st.transition = func(to string) { transition(st, to) }
	st.up.Store(true)
	return st, nil
}

// ok runs one check and judges it.
func (s *site) ok(ctx context.Context) (bool, string) {
	res, err := s.probe.Do(ctx)
	switch {
	case err != nil:
		return false, err.Error()
	case s.check.Type == "http" && res.Code != s.check.Status:
		return false, fmt.Sprintf("status %d, want %d", res.Code, s.check.Status)
	}
	return true, ""
}

// monitor checks the site every interval until ctx ends, the first check at
// once: its outcome is the initial state, and initialized is called then
// (or when ctx ends first).
func (s *site) monitor(ctx context.Context, log *slog.Logger, initialized func()) {
	defer initialized()
	t := time.NewTicker(s.check.Interval)
	defer t.Stop()
	ok, reason := s.ok(ctx)
	if ctx.Err() != nil {
		return
	}
	h := health{down: !ok}
	s.up.Store(ok)
	log.Info("gslb site initial state", "record", s.record, "address", s.addr.String(), "up", ok, "reason", reason)
	initialized()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, reason := s.ok(ctx)
		if ctx.Err() != nil {
			return
		}
		if h.observe(ok, s.check) {
			from, to := "up", "down"
			if !h.down {
				from, to = to, from
			}
			s.up.Store(!h.down)
			s.transition(to)
			log.Info("gslb site state changed", "record", s.record, "address", s.addr.String(), "from", from, "to", to, "reason", reason)
		}
	}
}
