package cli

import (
	"bytes"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/gslb"
)

// Nagios plugin exit codes.
const (
	nagiosOK       = 0
	nagiosWarning  = 1
	nagiosCritical = 2
	nagiosUnknown  = 3
)

var nagiosStates = [...]string{"OK", "WARNING", "CRITICAL", "UNKNOWN"}

func checkCmd(o *options) *cobra.Command {
	var (
		expect     int
		expectBody string
		warning    time.Duration
		critical   time.Duration
		timeout    time.Duration
		host       string
	)
	cmd := &cobra.Command{
		Use:   "check URL",
		Short: "check a URL as a Nagios plugin does (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
		Long: `check GETs URL once and prints one status line with perfdata, as Nagios,
Mackerel and gdnsd's extmon expect of a check command:

  HTTP OK: HTTP/1.1 200 OK - 12 bytes in 0.002 s|time=0.002s;0.2;1;0 size=12B;;;0

Without --expect, a status below 400 is OK, 4xx WARNING and 5xx CRITICAL
(as check_http); with it, any other status is CRITICAL. No connection, a
timeout or a missing --expect-body string is CRITICAL. A response slower than
--warning or --critical is WARNING or CRITICAL. Bad arguments are UNKNOWN.
Redirects are not followed.`,
		Example: `  shoal check http://127.0.0.1:8080/health --expect 200 --warning 200ms --critical 1s
  shoal check http://[::1]:8080/ --expect-body ok --timeout 5s`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("want one URL, got %d arguments", len(args)), "")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			switch {
			case err != nil:
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("bad URL: %v", err), "")
			case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("URL must be http:// or https:// with a host, got %q", args[0]), "")
			case timeout <= 0:
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("--timeout must be positive, got %s", timeout), "")
			case warning < 0 || critical < 0 || warning > 0 && critical > 0 && warning > critical:
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("--warning (%s) and --critical (%s) must be positive, warning at most critical", warning, critical), "")
			case expect != 0 && (expect < 100 || expect > 599):
				return nagiosExit(o, nagiosUnknown, fmt.Sprintf("--expect must be an HTTP status from 100 to 599, got %d", expect), "")
			}
			res, err := gslb.Probe{URL: u.String(), Host: host, Timeout: timeout}.Do(cmd.Context())
			perf := fmt.Sprintf("time=%.6fs;%s;%s;0", res.Elapsed.Seconds(), threshold(warning), threshold(critical))
			if err != nil {
				return nagiosExit(o, nagiosCritical, err.Error(), perf)
			}
			perf += fmt.Sprintf(" size=%dB;;;0", len(res.Body))
			state, why := nagiosOK, ""
			switch {
			case expect != 0 && res.Code != expect:
				state, why = nagiosCritical, fmt.Sprintf(", expected %d", expect)
			case expect == 0 && res.Code >= 500:
				state = nagiosCritical
			case expect == 0 && res.Code >= 400:
				state = nagiosWarning
			}
			if expectBody != "" && !bytes.Contains(res.Body, []byte(expectBody)) {
				state, why = nagiosCritical, why+fmt.Sprintf(", body lacks %q", expectBody)
			}
			switch {
			case critical > 0 && res.Elapsed > critical:
				state, why = max(state, nagiosCritical), why+fmt.Sprintf(", slower than %s", critical)
			case warning > 0 && res.Elapsed > warning:
				state, why = max(state, nagiosWarning), why+fmt.Sprintf(", slower than %s", warning)
			}
			msg := fmt.Sprintf("%s %s - %d bytes in %.3f s%s", res.Proto, res.Status, len(res.Body), res.Elapsed.Seconds(), why)
			return nagiosExit(o, state, msg, perf)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&expect, "expect", 0, "the HTTP status required (default: any below 400 is OK)")
	fl.StringVar(&expectBody, "expect-body", "", "a string the body must contain")
	fl.DurationVar(&warning, "warning", 0, "response time above which the state is WARNING (0: none)")
	fl.DurationVar(&critical, "critical", 0, "response time above which the state is CRITICAL (0: none)")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "time after which the check is CRITICAL")
	fl.StringVar(&host, "host", "", "the Host header to send (default: the URL's)")
	// A plugin's bad arguments are UNKNOWN, not CRITICAL (shoal's usual 2).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return nagiosExit(o, nagiosUnknown, err.Error(), "")
	})
	return cmd
}

// threshold is a perfdata threshold in seconds, empty when there is none.
func threshold(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// nagiosExit prints the status line on stdout and returns the exit code.
func nagiosExit(o *options, state int, msg, perf string) error {
	line := "HTTP " + nagiosStates[state] + ": " + msg
	if perf != "" {
		line += "|" + perf
	}
	fmt.Fprintln(o.stdout, line)
	if state == nagiosOK {
		return nil
	}
	return &exitError{code: state}
}
