package metrics

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// statCmd asks for every backend's and server's line (types 2|4) in one call.
const statCmd = "show stat -1 6 -1"

// counters are one "show stat" line's values that metrics uses. Totals are
// cumulative since HAProxy's worker started.
type counters struct {
	sessions int64 // scur
	queue    int64 // qcur
	// total counts requests: req_tot in HTTP mode, where stot also counts
	// every retry of a request, or stot (connections) in TCP mode.
	total    int64
	errors5x int64 // hrsp_5xx
	connErrs int64 // econ: requests that failed to connect, retries exhausted
	// retries is wretr + wredis: attempts HAProxy retried or sent to another
	// server, after a failed connection (an instance refusing them) or a
	// retryable response.
	retries int64
}

type statKey struct{ backend, server string }

// backendLine is the key of a backend's own line.
const backendLine = "BACKEND"

// parseStatCSV parses "show stat" output by column name, as columns are added
// between HAProxy versions.
func parseStatCSV(out string) (map[statKey]counters, error) {
	body, ok := strings.CutPrefix(out, "# ")
	if !ok {
		line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		if line == "" {
			line = "empty answer"
		}
		return nil, errors.New(line)
	}
	r := csv.NewReader(strings.NewReader(body))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("parse stat CSV header: %w", err)
	}
	col := make(map[string]int, len(header))
	for i, name := range header {
		col[name] = i
	}
	names := []string{"pxname", "svname", "scur", "qcur", "stot", "hrsp_5xx", "econ", "req_tot", "wretr", "wredis"}
	idx := make([]int, len(names))
	for i, name := range names {
		c, ok := col[name]
		if !ok {
			return nil, fmt.Errorf("parse stat CSV: no %q column", name)
		}
		idx[i] = c
	}
	res := make(map[statKey]counters)
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("parse stat CSV: %w", err)
		}
		field := func(i int) string {
			if c := idx[i]; c < len(rec) {
				return rec[c]
			}
			return ""
		}
		// HAProxy leaves counters that do not apply empty.
		var bad error
		num := func(i int) int64 {
			v := field(i)
			if v == "" {
				return 0
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("parse stat CSV line %d: column %s: %w", line, names[i], err)
			}
			return n
		}
		k := statKey{field(0), field(1)}
		c := counters{sessions: num(2), queue: num(3), total: num(4), errors5x: num(5), connErrs: num(6), retries: num(8) + num(9)}
		if field(7) != "" {
			c.total = num(7)
		}
		if bad != nil {
			return nil, bad
		}
		if k.server == "FRONTEND" {
			continue
		}
		res[k] = c
	}
	return res, nil
}

// delta is the increase of a cumulative counter. HAProxy restarts its
// counters when its worker is replaced (and a re-added server starts at 0),
// so a decrease means everything counted now is new.
func delta(prev, cur int64) int64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
