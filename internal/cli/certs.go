package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/api"
)

func certsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "list the certificates the TLS frontends serve, with their names and expiry",
		Long: `Lists every certificate HAProxy serves on every TLS frontend, the default
(served without SNI) first: its names (SAN), serial, issuer and expiry. A
certificate that expires within 14 days is marked EXPIRING; the same shows in
/metrics as shoal_tls_certificate_expiry_seconds. When a push to HAProxy
failed, what the files hold differs from what is served: a site served with
another certificate than its file's is marked PENDING with the file's serial,
one not served at all NOT SERVED.`,
		Example: `  shoal certs
  shoal certs -o json | jq -r '.certificates[] | select(.expiring) | .names[]'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := show(cmd, o, (*api.Client).Certs, func(w io.Writer, resp api.CertsResponse) {
				printCerts(w, resp.Certificates)
			})
			return err
		},
	}
	addOutputFlag(cmd, o)
	return cmd
}

func printCerts(w io.Writer, certs []api.Certificate) {
	if len(certs) == 0 {
		fmt.Fprintln(w, "no TLS frontend")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FRONTEND\tSITE\tNAMES\tNOT AFTER\tLEFT\t")
	for _, c := range certs {
		left := (time.Duration(c.ExpiresIn) * time.Second).Truncate(time.Hour).String()
		switch {
		case c.NotServed:
			left += " NOT SERVED (in the files only)"
		case c.Expiring:
			left += " EXPIRING"
		}
		if c.Pending != "" {
			left += " PENDING " + c.Pending + " (in the files, not served)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", c.Frontend, c.Site, printable(strings.Join(c.Names, ",")),
			c.NotAfter.UTC().Format(time.RFC3339), left)
	}
	_ = tw.Flush()
}
