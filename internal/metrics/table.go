package metrics

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTable prints d for people: the group's figures, then one line per
// instance. Unmeasured values print as "-".
func (d *Document) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "group %s over %s: size %d, ready %d\n", d.Group, d.Window, d.Size, d.Ready)
	fmt.Fprintf(tw, "cpu %%\tavg %s\tmin %s\tmax %s\tp75 %s\tp90 %s\tp95 %s\tp99 %s\n",
		f1(d.CPU.Avg), f1(d.CPU.Min), f1(d.CPU.Max), f1(d.CPU.P75), f1(d.CPU.P90), f1(d.CPU.P95), f1(d.CPU.P99))
	fmt.Fprintf(tw, "requests/s\t%s\tper instance %s\t5xx/s %s\tconn errors/s %s\tretries/s %s\tqueue %s\tsessions %s\n",
		f1(d.RequestsPerSecond), f1(d.RequestsPerSecondPerInstance), f1(d.ErrorsPerSecond),
		f1(d.ConnectionErrorsPerSecond), f1(d.RetriesPerSecond), f1(d.Queue), f1(d.Sessions))
	l := d.Latency
	fmt.Fprintf(tw, "latency ms\tp50 %s\tp90 %s\tp99 %s\tTr p50 %s\tTr p90 %s\tTr p99 %s\t%d samples, 1 in %d\n",
		f1(l.P50), f1(l.P90), f1(l.P99), f1(l.TrP50), f1(l.TrP90), f1(l.TrP99), l.Samples, l.SampleRate)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "INSTANCE\tSTATE\tREADY\tCORES\tCPU% AVG\tCPU% MAX\tRSS MiB\tREQ/S\t5XX/S\tSESSIONS")
	for _, in := range d.Instances {
		rss := "-"
		if in.RSSBytes != nil {
			rss = strconv.FormatFloat(*in.RSSBytes/(1<<20), 'f', 1, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%t\t%g\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, in.State, in.Ready, in.Cores,
			f1(in.CPU.Avg), f1(in.CPU.Max), rss, f1(in.RequestsPerSecond), f1(in.ErrorsPerSecond), f1(in.Sessions))
	}
	return tw.Flush()
}

func f1(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 1, 64)
}
