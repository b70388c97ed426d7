package certstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// HAProxy holds TLS_TICKETS_NO (3) session ticket keys per bind, oldest
// first: the last decrypts only (it is the next one), the one before it
// encrypts, the others decrypt. "set ssl tls-key" appends a key and drops
// the oldest, as the file is written on each rotation, so a reload reads
// the keys the running HAProxy has.
const ticketKeysKept = 3

// TicketRotation is how often the session ticket keys change: a ticket
// stays valid for at most about two rotations.
const TicketRotation = time.Hour

// ticketKeyBytes is an aes128 key set: name, HMAC and AES keys, 16 bytes
// each.
const ticketKeyBytes = 48

func newKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = newKey()
	}
	return keys
}

func newKey() string {
	b := make([]byte, ticketKeyBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(b)
}

func (s *Store) writeKeys(fe string, keys []string) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("frontend %s: ticket keys: %w", fe, err)
	}
	if err := writeFile(s.ticketKeys(fe), []byte(strings.Join(keys, "\n")+"\n")); err != nil {
		return fmt.Errorf("frontend %s: ticket keys: %w", fe, err)
	}
	return nil
}

// RotateTicketKeys gives every frontend with ticket_keys: rotate a new
// session ticket key: written to its file, then sent to HAProxy.
func (s *Store) RotateTicketKeys(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, fe := range s.rotate {
		if err := s.rotateLocked(ctx, fe); err != nil {
			errs = append(errs, fmt.Errorf("frontend %s: rotate ticket keys: %w", fe, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Store) rotateLocked(ctx context.Context, fe string) error {
	b, err := os.ReadFile(s.ticketKeys(fe))
	if err != nil {
		return err
	}
	keys := strings.Fields(string(b))
	key := newKey()
	keys = append(keys, key)
	keys = keys[max(0, len(keys)-ticketKeysKept):]
	if err := s.writeKeys(fe, keys); err != nil {
		return err
	}
	out, err := s.rt.Runtime(ctx, "show tls-keys", "")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "("+s.ticketKeys(fe)+")") {
		return nil // HAProxy reads the file when it loads the frontend
	}
	return s.expect(ctx, "set ssl tls-key "+s.ticketKeys(fe)+" "+key, "", "TLS ticket key updated")
}
