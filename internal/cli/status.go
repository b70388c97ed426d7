package cli

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/shoal-lb/shoal/internal/api"
	"github.com/shoal-lb/shoal/internal/group"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

func checkStatusOutput(output string) error {
	if output != "text" && !slices.Contains(api.StatusFormats, output) {
		return &exitError{code: exitUsage, msg: fmt.Sprintf("-o must be one of text, %s, got %q", strings.Join(api.StatusFormats, ", "), output)}
	}
	return nil
}

// checkColumns renders the CHECK, CHANGED and REASON columns of the status
// table for in.
func checkColumns(in group.InstanceStatus) string {
	check := in.Check
	if check == "" {
		check = "-"
	}
	if in.CheckCode != 0 {
		check += " " + strconv.Itoa(in.CheckCode)
	}
	if in.CheckDurationMS != 0 {
		check += " " + strconv.FormatInt(in.CheckDurationMS, 10) + "ms"
	}
	changed := "-"
	if in.LastChange != nil {
		changed = time.Since(*in.LastChange).Round(time.Second).String() + " ago"
	}
	// A passing check needs no reason ("(tcp-check)" says nothing more).
	reason := ""
	if !strings.HasSuffix(in.Check, "OK") {
		reason = cmp.Or(in.CheckReason, in.CheckDesc)
	}
	return check + "\t" + changed + "\t" + printable(reason)
}

// printable keeps text that came from an instance (a check's answer) from
// writing control sequences to the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// printLimited writes the rate-limited clients of `shoal status`: an
// address or a header value's digest, printed escaped all the same.
func printLimited(w io.Writer, clients []haproxy.LimitedClient) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FRONTEND\tRATE-LIMITED CLIENT\tREFUSED\tRATE")
	for _, c := range clients {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", c.Frontend, printable(c.Client), c.Refused, c.Rate)
	}
	tw.Flush()
}
