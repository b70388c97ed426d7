package docgen

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-lb/shoal/internal/core"
)

// metric is one row of docs/metrics.md.
type metric struct {
	name, typ, help string
	labels          []string
}

// metricsReference is docs/metrics.md: every metric of the collectors
// serve registers, by name.
func metricsReference() (string, error) {
	ms, err := describe(core.MetricCollectors())
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(`# Metrics reference

<!-- Generated from the collectors shoal registers (internal/promexp and the
     collectors of core, notify and gslb) by make docs.
     Do not edit; TestDocsUpToDate fails when this file is stale. -->

What ` + "`/metrics`" + ` on the admin listener serves, besides the Go runtime's
` + "`go_*`" + ` and the process's ` + "`process_*`" + ` metrics. A metric of an optional feature
(GSLB, TLS, notifications, the access log) has series only when the config
turns the feature on; a histogram ` + "`NAME`" + ` is served as ` + "`NAME_bucket`" + `,
` + "`NAME_sum`" + ` and ` + "`NAME_count`" + `.

| metric | type | labels | meaning |
| --- | --- | --- | --- |
`)
	for _, m := range ms {
		labels := make([]string, len(m.labels))
		for i, l := range m.labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.name, m.typ, strings.Join(labels, ", "), cell(m.help))
	}
	return b.String(), nil
}

// describe returns the metrics of cs, sorted by name. A metric's type is
// its collector's when that is a vector or a single metric; a collector of
// its own builds its metrics at scrape time, from state these have not, so
// its type follows Prometheus's naming rule, which shoal keeps: a counter's
// name ends in _total, and no other's does (describe checks it where it
// knows the type).
func describe(cs []prometheus.Collector) ([]metric, error) {
	var out []metric
	seen := map[string]bool{}
	for _, c := range cs {
		typ := collectorType(c)
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			m, err := parseDesc(d)
			if err != nil {
				return nil, err
			}
			if seen[m.name] {
				return nil, fmt.Errorf("%s: described twice", m.name)
			}
			seen[m.name] = true
			counterName := strings.HasSuffix(m.name, "_total")
			switch m.typ = typ; {
			case typ == "":
				m.typ = "gauge"
				if counterName {
					m.typ = "counter"
				}
			case (typ == "counter") != counterName:
				return nil, fmt.Errorf("%s is a %s: only a counter's name ends in _total", m.name, typ)
			}
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b metric) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// collectorType is the type of c's metrics, when c says it without
// collecting: a vector, or a single metric (as NewCounterFunc's).
func collectorType(c prometheus.Collector) string {
	switch c := c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	case prometheus.Metric:
		var m dto.Metric
		if c.Write(&m) != nil {
			return ""
		}
		switch {
		case m.Counter != nil:
			return "counter"
		case m.Gauge != nil:
			return "gauge"
		case m.Histogram != nil:
			return "histogram"
		case m.Summary != nil:
			return "summary"
		}
	}
	return ""
}

// descRE reads what Desc.String writes, the only way client_golang shows a
// description's name, help and labels.
var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

func parseDesc(d *prometheus.Desc) (metric, error) {
	sm := descRE.FindStringSubmatch(d.String())
	if sm == nil {
		return metric{}, fmt.Errorf("cannot read the description %s", d)
	}
	name, err := strconv.Unquote(sm[1])
	if err != nil {
		return metric{}, fmt.Errorf("description %s: %w", d, err)
	}
	help, err := strconv.Unquote(sm[2])
	if err != nil {
		return metric{}, fmt.Errorf("description %s: %w", d, err)
	}
	m := metric{name: name, help: help}
	if sm[3] != "" {
		return metric{}, fmt.Errorf("%s: constant labels are not listed; add them to the reference", name)
	}
	if sm[4] != "" {
		m.labels = strings.Split(sm[4], ",")
	}
	return m, nil
}
