package certstore

import (
	"context"
	"strings"
	"time"
)

// ExpiryWarning is how long before a certificate expires that it is
// reported (each check, in the log) and flagged by Certs.
const ExpiryWarning = 14 * 24 * time.Hour

// expiryCheck is how often Run looks at the certificates' expiry.
const expiryCheck = time.Hour

// Run rotates the session ticket keys every TicketRotation and reports the
// certificates that expire within ExpiryWarning (at once, then every hour)
// until ctx ends. expiring, when not nil, is called for each of them.
func (s *Store) Run(ctx context.Context, expiring func(Cert)) {
	rotate := time.NewTicker(TicketRotation)
	defer rotate.Stop()
	check := time.NewTicker(expiryCheck)
	defer check.Stop()
	s.checkExpiry(expiring)
	for {
		select {
		case <-ctx.Done():
			return
		case <-rotate.C:
			if err := s.RotateTicketKeys(ctx); err != nil {
				s.log.Error("session ticket keys not rotated", "err", err)
			}
		case <-check.C:
			s.checkExpiry(expiring)
		}
	}
}

func (s *Store) checkExpiry(expiring func(Cert)) {
	now := time.Now()
	for _, c := range s.Certs() {
		if c.NotServed || !c.ExpiresWithin(now, ExpiryWarning) {
			continue
		}
		s.log.Warn("certificate expires soon", "frontend", c.Frontend, "site", c.Site,
			"names", strings.Join(c.Names, ","), "not_after", c.NotAfter, "left", c.NotAfter.Sub(now).Round(time.Minute))
		if expiring != nil {
			expiring(c)
		}
	}
}

// ExpiresWithin reports whether c expires within d of now (or has).
func (c Cert) ExpiresWithin(now time.Time, d time.Duration) bool {
	return c.NotAfter.Sub(now) < d
}
