package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// sessions are the logins the dashboard has issued, in memory: a restart
// asks for the token again. Each is kept by its id's hash, so that looking
// one up takes no time that depends on the secret.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	expires map[[sha256.Size]byte]time.Time
}

// maxSessions bounds the logins held; the oldest goes first.
const maxSessions = 1000

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, expires: make(map[[sha256.Size]byte]time.Time)}
}

// create returns a new session's id.
func (s *sessions) create() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.expires) >= maxSessions {
		var oldest [sha256.Size]byte
		var at time.Time
		for k, e := range s.expires {
			if !e.After(now) {
				delete(s.expires, k)
			} else if at.IsZero() || e.Before(at) {
				oldest, at = k, e
			}
		}
		if len(s.expires) >= maxSessions {
			delete(s.expires, oldest)
		}
	}
	s.expires[sha256.Sum256([]byte(id))] = now.Add(s.ttl)
	return id
}

// valid reports whether id is a live session.
func (s *sessions) valid(id string) bool {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.expires[k]
	if ok && !e.After(s.now()) {
		delete(s.expires, k)
		return false
	}
	return ok
}

// end forgets id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.expires, sha256.Sum256([]byte(id)))
}
