package core

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/source"
)

var (
	descSourceErrors = prometheus.NewDesc("shoal_source_errors_total",
		"Failed reads of a metrics source (metrics.sources) since shoal started.", []string{"source"}, nil)
	descSourceValue = prometheus.NewDesc("shoal_source_value",
		"The latest value a metrics source gave (absent for a per-instance source).", []string{"source"}, nil)
	descSourceLast = prometheus.NewDesc("shoal_source_last_read_timestamp_seconds",
		"When a metrics source last gave a value.", []string{"source"}, nil)
)

// sourceReads exposes the sources' reads on /metrics; s is nil for the
// metrics reference.
type sourceReads struct{ s *source.Set }

func (c sourceReads) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSourceErrors
	ch <- descSourceValue
	ch <- descSourceLast
}

func (c sourceReads) Collect(ch chan<- prometheus.Metric) {
	if c.s == nil {
		return
	}
	for _, st := range c.s.Statuses() {
		ch <- prometheus.MustNewConstMetric(descSourceErrors, prometheus.CounterValue, float64(st.Errors), st.Name)
		if st.Last.IsZero() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descSourceLast, prometheus.GaugeValue, float64(st.Last.UnixNano())/1e9, st.Name)
		if !st.PerInstance {
			ch <- prometheus.MustNewConstMetric(descSourceValue, prometheus.GaugeValue, st.Value, st.Name)
		}
	}
}

// checkSources looks at the sources from this machine: a command's program
// must be found, and a Prometheus server that answers must parse the query
// (a server that does not answer now is not an error: shoal may start
// before it, and the first read says what is wrong).
func checkSources(ctx context.Context, cfg *config.Config) config.ErrorList {
	var errs config.ErrorList
	for i, src := range cfg.Metrics.Sources {
		switch {
		case src.Prometheus != nil:
			if reached, err := source.CheckQuery(ctx, src); reached && err != nil {
				errs = append(errs, cfg.FieldError(fmt.Sprintf("metrics.sources[%d].prometheus.query", i), "%v", err))
			}
		case len(src.Command) > 0:
			if _, err := config.ResolveCommand(src.Command[0], ""); err != nil {
				errs = append(errs, cfg.FieldError(fmt.Sprintf("metrics.sources[%d].command[0]", i), "program %q not found: %v", src.Command[0], err))
			}
		}
	}
	return errs
}
