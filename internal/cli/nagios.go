package cli

import (
	"bytes"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
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

// checkCmd is `shoal check`, a Nagios plugin: "check" as Nagios names its
// plugins, not shoal's pre-flight (core.Preflight) or health checks.
func checkCmd(o *options) *cobra.Command {
	var (
		expect     statusList
		expectBody string
		warning    seconds
		critical   seconds
		timeout    time.Duration
		host       string
	)
	cmd := &cobra.Command{
		Use:   "check URL",
		Short: "check a URL as a Nagios plugin does (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)",
		Long: `check GETs URL once (or, for tcp://HOST:PORT, connects once) and prints one
status line with perfdata, as Nagios, Mackerel and gdnsd's extmon expect of a
check command:

  HTTP OK: HTTP/1.1 200 OK - 12 bytes in 0.002 s|time=0.002s;0.2;1;0 size=12B;;;0

Without --expect, a status below 400 is OK, 4xx WARNING and 5xx CRITICAL
(as check_http); with it (one status or a list: 200,301), any other status is
CRITICAL. No connection, a timeout or a missing --expect-body string is
CRITICAL. A response slower than --warning or --critical is WARNING or
CRITICAL; they take seconds as Nagios plugins do (0.5) or a duration (500ms).
Bad arguments are UNKNOWN. Redirects are not followed.`,
		Example: `  shoal check http://127.0.0.1:8080/health --expect 200 --warning 200ms --critical 1s
  shoal check http://[::1]:8080/ --expect 200,301 --expect-body ok --timeout 5s
  shoal check tcp://[2001:db8::10]:443 --warning 0.5 --critical 2`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return nagiosExit(o, "HTTP", nagiosUnknown, fmt.Sprintf("want one URL, got %d arguments", len(args)), "")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			service := "HTTP"
			if err == nil && u.Scheme == "tcp" {
				service = "TCP"
			}
			unknown := func(msg string) error { return nagiosExit(o, service, nagiosUnknown, msg, "") }
			switch {
			case err != nil:
				return unknown(fmt.Sprintf("bad URL: %v", err))
			case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "tcp" || u.Host == "":
				return unknown(fmt.Sprintf("URL must be http://, https:// or tcp:// with a host, got %q", args[0]))
			case u.Scheme == "tcp" && (u.Port() == "" || u.Path != "" && u.Path != "/"):
				return unknown(fmt.Sprintf("a tcp URL is tcp://HOST:PORT, got %q", args[0]))
			case u.Scheme == "tcp" && (len(expect) > 0 || expectBody != "" || host != ""):
				return unknown("--expect, --expect-body and --host are for http checks")
			case timeout <= 0:
				return unknown(fmt.Sprintf("--timeout must be positive, got %s", timeout))
			case warning > 0 && critical > 0 && warning > critical:
				return unknown(fmt.Sprintf("--warning (%s) must be at most --critical (%s)", warning, critical))
			}
			probe := gslb.Probe{URL: u.String(), Host: host, Timeout: timeout}
			if service == "TCP" {
				probe = gslb.Probe{Addr: u.Host, Timeout: timeout}
			}
			res, err := probe.Do(cmd.Context())
			perf := fmt.Sprintf("time=%.6fs;%s;%s;0", res.Elapsed.Seconds(), threshold(warning), threshold(critical))
			if err != nil {
				return nagiosExit(o, service, nagiosCritical, err.Error(), perf)
			}
			state, why := nagiosOK, ""
			var msg string
			if service == "TCP" {
				msg = fmt.Sprintf("connected to %s in %.3f s", u.Host, res.Elapsed.Seconds())
			} else {
				perf += fmt.Sprintf(" size=%dB;;;0", len(res.Body))
				switch {
				case len(expect) > 0 && !slices.Contains(expect, res.Code):
					state, why = nagiosCritical, ", expected "+expect.String()
				case len(expect) == 0 && res.Code >= 500:
					state = nagiosCritical
				case len(expect) == 0 && res.Code >= 400:
					state = nagiosWarning
				}
				if expectBody != "" && !bytes.Contains(res.Body, []byte(expectBody)) {
					state, why = nagiosCritical, why+fmt.Sprintf(", body lacks %q", expectBody)
				}
				msg = fmt.Sprintf("%s %s - %d bytes in %.3f s", res.Proto, res.Status, len(res.Body), res.Elapsed.Seconds())
			}
			switch {
			case critical > 0 && res.Elapsed > time.Duration(critical):
				state, why = max(state, nagiosCritical), why+fmt.Sprintf(", slower than %s", critical)
			case warning > 0 && res.Elapsed > time.Duration(warning):
				state, why = max(state, nagiosWarning), why+fmt.Sprintf(", slower than %s", warning)
			}
			return nagiosExit(o, service, state, msg+why, perf)
		},
	}
	fl := cmd.Flags()
	fl.Var(&expect, "expect", "the HTTP statuses accepted, comma-separated (default: any below 400 is OK)")
	fl.StringVar(&expectBody, "expect-body", "", "a string the body must contain")
	fl.Var(&warning, "warning", "response time above which the state is WARNING: seconds (0.5) or a duration (500ms); 0: none")
	fl.Var(&critical, "critical", "response time above which the state is CRITICAL: seconds or a duration; 0: none")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "time after which the check is CRITICAL")
	fl.StringVar(&host, "host", "", "the Host header to send (default: the URL's)")
	// A plugin's bad arguments are UNKNOWN, not CRITICAL (shoal's usual 2).
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return nagiosExit(o, "HTTP", nagiosUnknown, err.Error(), "")
	})
	return cmd
}

// statusList is --expect: HTTP statuses, as check_http's -e takes a list.
type statusList []int

func (l *statusList) String() string {
	parts := make([]string, len(*l))
	for i, c := range *l {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

func (l *statusList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || c < 100 || c > 599 {
			return fmt.Errorf("want HTTP statuses from 100 to 599, comma-separated, got %q", part)
		}
		*l = append(*l, c)
	}
	return nil
}

func (l *statusList) Type() string { return "statuses" }

// seconds is a response-time threshold written as Nagios plugins take it,
// in seconds ("0.5"), or as a Go duration ("500ms").
type seconds time.Duration

func (s seconds) String() string { return time.Duration(s).String() }

func (s *seconds) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || f < 0 || f > 24*3600 {
			return fmt.Errorf("want seconds (0.5) or a duration (500ms), got %q", v)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d < 0 {
		return fmt.Errorf("want a positive time, got %q", v)
	}
	*s = seconds(d)
	return nil
}

func (s *seconds) Type() string { return "seconds" }

// threshold is a perfdata threshold in seconds, empty when there is none.
func threshold(d seconds) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(time.Duration(d).Seconds(), 'f', -1, 64)
}

// nagiosExit prints the status line on stdout and returns the exit code.
func nagiosExit(o *options, service string, state int, msg, perf string) error {
	line := service + " " + nagiosStates[state] + ": " + msg
	if perf != "" {
		line += "|" + perf
	}
	fmt.Fprintln(o.stdout, line)
	if state == nagiosOK {
		return nil
	}
	return &exitError{code: state}
}
