package haproxy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

const (
	// rateTableSize bounds the clients a frontend tracks: an IPv6 entry
	// with its counters is about 100 bytes, so 100k is about 10 MB. When
	// it is full HAProxy drops the entries closest to expiring.
	rateTableSize = "100k"
	// rateKeyLen is the length of a header-keyed table's key: the hex
	// SHA-256 of the header's value. The table holds the digest, never the
	// value (an API key, say), so that nothing reading the table (status,
	// the dashboard, HAProxy's runtime API) can show it; whole values are
	// hashed, so no two share an entry.
	rateKeyLen = 64
	// shownDigest is how many hex digits of a key's digest a LimitedClient
	// shows: enough to tell clients apart and to find a key with sha256sum,
	// too few to confirm a guess of a weak key.
	shownDigest = 12
	// TopLimited is how many limited clients LimitedClients returns per
	// frontend, the most refused first.
	TopLimited = 10
)

// rateLimitLines returns the lines of fe's frontend that limit each client
// to fe.RateLimit.Requests per fe.RateLimit.Per, nil when it has no limit.
//
// The frontend's own stick table (named after it) tracks each client by
// address (type ipv6 holds IPv4 too, as ::ffff:a.b.c.d; behind trusted
// proxies, the address clientLines found in X-Forwarded-For) or by a header's
// value's SHA-256; requests without the header are not limited. A request over the
// limit is answered 429 and counted in gpc0, which is how LimitedClients
// finds the limited clients. Refused requests count towards the rate too:
// a client that keeps sending stays limited until it slows down.
func rateLimitLines(fe config.Frontend) ([]string, error) {
	rl := fe.RateLimit
	if rl == nil {
		return nil, nil
	}
	if fe.Mode == config.ModeTCP {
		return nil, errors.New("rate_limit: applies to http frontends only")
	}
	if rl.Requests < 1 {
		return nil, fmt.Errorf("rate_limit requests %d: must be at least 1", rl.Requests)
	}
	if rl.Per <= 0 || rl.Per > maxTimer {
		return nil, fmt.Errorf("rate_limit per %s: must be positive and at most %s", rl.Per, maxTimer)
	}
	if err := config.CheckRateLimitBy(rl.By); err != nil {
		return nil, fmt.Errorf("rate_limit by: %w", err)
	}
	per := ms(rl.Per)
	sc := strconv.Itoa(rateCounter)
	table, track := "type ipv6", "http-request track-sc"+sc+" src"
	if rateByClient(fe) {
		track = "http-request track-sc" + sc + " var(" + clientVar + ")"
	}
	if name, ok := strings.CutPrefix(rl.By, config.RateLimitByHeader); ok {
		table = "type string len " + strconv.Itoa(rateKeyLen)
		track = "http-request track-sc" + sc + " req.hdr(" + name + "),sha2(256),hex if { req.hdr(" + name + ") -m found }"
	}
	return []string{
		"stick-table " + table + " size " + rateTableSize + " expire " + per + " store http_req_rate(" + per + "),gpc0",
		track,
		// The rate counts the request being tracked: the limit's first
		// request over is refused.
		"acl shoal_rate_limited sc_http_req_rate(" + sc + ") gt " + strconv.Itoa(rl.Requests),
		"http-request sc-inc-gpc0(" + sc + ") if shoal_rate_limited",
		"http-request deny deny_status 429 if shoal_rate_limited",
	}, nil
}

// LimitedClient is a client a frontend's rate limit refused recently.
type LimitedClient struct {
	Frontend string `json:"frontend"`
	// Client is the address (IPv4 without its ::ffff: prefix) or, for a
	// limit by header, "sha256:" and the first hex digits of the SHA-256 of
	// the header's value, never the value.
	Client string `json:"client"`
	// Refused counts the requests answered 429 since the client's entry
	// was created; it expires rate_limit.per after the client's last request.
	Refused int64 `json:"refused"`
	// Rate is the client's requests (refused ones too) in the last per.
	Rate int64 `json:"rate"`
}

// LimitedClients returns the clients each rate-limited frontend refused
// lately, the most refused first, at most TopLimited per frontend.
func (m *Manager) LimitedClients(ctx context.Context) ([]LimitedClient, error) {
	m.mu.Lock()
	up := m.up
	m.mu.Unlock()
	if !up {
		return nil, fmt.Errorf("rate-limited clients: %w", ErrNotRunning)
	}
	var all []LimitedClient
	for _, fe := range m.config().Frontends {
		if fe.RateLimit == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, cmdTimeout)
		m.reloadMu.RLock()
		clients, err := m.client.LimitedClients(cctx, fe.Name)
		m.reloadMu.RUnlock()
		cancel()
		if err != nil {
			return nil, err
		}
		if len(clients) > TopLimited {
			clients = clients[:TopLimited]
		}
		if strings.HasPrefix(fe.RateLimit.By, config.RateLimitByHeader) {
			for i := range clients {
				clients[i].Client = keyDigest(clients[i].Client)
			}
		}
		all = append(all, clients...)
	}
	return all, nil
}

// LimitedClients reads the stick table of frontend and returns its entries
// with refused requests, the most refused first.
func (c *Client) LimitedClients(ctx context.Context, frontend string) ([]LimitedClient, error) {
	if !hapword.Name(frontend) {
		return nil, fmt.Errorf("show table %q: invalid name", frontend)
	}
	cmd := "show table " + frontend + " data.gpc0 gt 0"
	out, err := c.Exec(ctx, cmd)
	if err != nil {
		return nil, err
	}
	clients, err := parseTable(out, frontend)
	if err != nil {
		return nil, fmt.Errorf("haproxy %q: %w", cmd, err)
	}
	return clients, nil
}

// keyDigest shows a header-keyed table's key: the start of the hex
// SHA-256 HAProxy keyed it by. A key that is not one (a table filled
// before the key was hashed) is hashed here: a value is never shown.
func keyDigest(key string) string {
	if len(key) != rateKeyLen || strings.Trim(key, "0123456789abcdefABCDEF") != "" {
		sum := sha256.Sum256([]byte(key))
		key = hex.EncodeToString(sum[:])
	}
	return "sha256:" + strings.ToLower(key[:shownDigest])
}

// parseTable parses "show table" output:
//
//	# table: edge, type: ipv6, size:102400, used:2
//	0x55d1c6b0e4a0: key=::ffff:127.0.0.1 use=0 exp=9998 gpc0=5 http_req_rate(10000)=15
func parseTable(out, frontend string) ([]LimitedClient, error) {
	var clients []LimitedClient
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "# table:") {
			continue
		}
		_, rest, ok := strings.Cut(line, ": key=")
		if !ok || !strings.HasPrefix(line, "0x") {
			return nil, errors.New(firstLine(out))
		}
		// The key is a client's header value: it ends at the last " use=".
		i := strings.LastIndex(rest, " use=")
		if i < 0 {
			return nil, fmt.Errorf("no use= in %q", line)
		}
		lc := LimitedClient{Frontend: frontend, Client: rest[:i]}
		for f := range strings.FieldsSeq(rest[i:]) {
			name, val, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(val, 10, 64)
			switch {
			case err != nil:
			case name == "gpc0":
				lc.Refused = n
			case strings.HasPrefix(name, "http_req_rate("):
				lc.Rate = n
			}
		}
		lc.Client = strings.TrimPrefix(lc.Client, "::ffff:")
		clients = append(clients, lc)
	}
	slices.SortStableFunc(clients, func(a, b LimitedClient) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(b.Rate, a.Rate), cmp.Compare(a.Client, b.Client))
	})
	return clients, nil
}
