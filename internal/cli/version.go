package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy"
)

func versionCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print shoal's version and commit, and the Go and HAProxy versions",
		Long: `version prints the version, commit and build date shoal was built from
(stamped by make build, make package and make dist from git; otherwise the
build information Go embeds), the Go version, and the version of the HAProxy
the config names (haproxy.binary; haproxy on PATH without a config).`,
		Example: `  shoal version
  shoal version -c /etc/shoal/shoal.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			bi, _ := debug.ReadBuildInfo() // nil in a binary built without modules
			writeVersion(cmd.Context(), o.stdout, stamped(), bi, o.haproxyBinary())
			return nil
		},
	}
}

// haproxyBinary is the config's haproxy.binary when the config loads, and
// haproxy (on PATH) otherwise: version must work without a config.
func (o *options) haproxyBinary() string {
	if cfg, err := config.Load(o.configFile()); err == nil {
		return cfg.HAProxy.Binary
	}
	return "haproxy"
}

// Set with -ldflags -X by make build, make package and make dist (from git
// describe), because a build with -buildvcs=false, or from a release tarball
// without .git, has no VCS settings in its build information.
var (
	stampVersion string
	stampCommit  string
	stampDate    string
)

// stamp is what the linker stamped into the binary; empty fields were not set.
type stamp struct{ version, commit, date string }

func stamped() stamp { return stamp{stampVersion, stampCommit, stampDate} }

// writeVersion writes shoal's build information and the version of HAProxy
// binary bin, or why there is none. What the linker stamped wins over the
// build information Go embeds.
func writeVersion(ctx context.Context, w io.Writer, st stamp, bi *debug.BuildInfo, bin string) {
	version, commit, built, goVersion := "(unknown)", "(unknown)", "(unknown)", "(unknown)"
	if bi != nil {
		version, goVersion = bi.Main.Version, bi.GoVersion
		var rev, at, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
		if rev != "" {
			commit = rev + modified
			if at != "" {
				commit += " " + at
			}
		}
	}
	if st.version != "" {
		version = st.version
	}
	if st.commit != "" {
		commit = st.commit
	}
	if st.date != "" {
		built = st.date
	}
	fmt.Fprintf(w, "shoal    %s\ncommit   %s\nbuilt    %s\ngo       %s\n", version, commit, built, goVersion)
	hv, _, _, err := haproxy.Version(ctx, bin)
	if err != nil {
		hv = "(unavailable: " + err.Error() + ")"
	}
	fmt.Fprintf(w, "haproxy  %s\n", hv)
}
