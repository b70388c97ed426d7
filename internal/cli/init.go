package cli

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/core"
	"github.com/shoal-lb/shoal/internal/initconfig"
)

// scanTimeout bounds one host's key scan: the connect and the server's
// first messages.
const scanTimeout = 10 * time.Second

// initFlags are shoal init's flags, turned into initconfig.Options.
type initFlags struct {
	output, local, command          string
	force, acceptHostKeys           bool
	ssh, domains, etcd              []string
	user, key, knownHosts           string
	cloud, cloudCLI, region, lt     string
	zone, archive                   string
	port                            int
	email, acmeDirectory, tlsListen string
	ha, node, vip, vipInterface     string
	priority                        int
	listen, stateDir, group, health string
	min, max, maxConn               int
}

func initCmd(o *options) *cobra.Command {
	f := &initFlags{}
	cmd := &cobra.Command{
		Use:   "init",
		Short: "write a first, commented shoal.yaml for processes here, your servers over SSH or a cloud",
		Long: `init writes a commented shoal.yaml that validates and serves as written:
one group of instances behind HAProxy, with a policy. Say where the instances
run with one of --local CMD (processes on this machine), --ssh HOST… (your
servers: init scans each host's key, shows its SHA256 fingerprint and writes
known_hosts once you confirm) or --cloud exec|ec2|sacloud; add HTTPS with
--tls DOMAIN --email E (certificates from Let's Encrypt, or --acme-directory)
and an HA pair with --ha PEER --etcd URL. --max-conn N caps the requests
each instance serves at once (more wait in HAProxy's queue) and makes the
policy scale on concurrency, 0.7 × N in flight per instance. A command is split into words as a
shell would, but no shell runs it; {{.Port}} is where the instance's port goes.

With none of these on a terminal, init asks. It checks the file as
` + "`shoal validate`" + ` does before writing it, and never replaces a file
without --force.`,
		Example: `  shoal init --local './app --listen 127.0.0.1:{{.Port}}'
  shoal init --ssh 10.0.1.11 --ssh 10.0.1.12 --user deploy --key ~/.ssh/id_ed25519 --command '/srv/app --listen {{.Host}}:{{.Port}}'
  shoal init --cloud ec2 --region ap-northeast-1 --launch-template web --port 8080 --tls example.com --email ops@example.com
  shoal init --local 'python3 -m http.server {{.Port}}' -o - | less`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runInit(cmd, o, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", `file to write (default: -c's, else shoal.yaml); "-": stdout`)
	fl.BoolVar(&f.force, "force", false, "replace the file if it exists")
	fl.StringVar(&f.local, "local", "", "instances are processes here, each running CMD ({{.Port}}: its port)")
	fl.StringSliceVar(&f.ssh, "ssh", nil, "instances run on these servers over SSH (repeatable, or comma-separated), host or host:port")
	fl.StringVar(&f.user, "user", "", "--ssh: the login on the hosts")
	fl.StringVar(&f.key, "key", "", "--ssh: private key file (no passphrase) the hosts accept")
	fl.StringVar(&f.knownHosts, "known-hosts", "", "--ssh: known_hosts file to add the confirmed keys to (default: known_hosts beside the config)")
	fl.StringVar(&f.command, "command", "", "--ssh: CMD each instance runs on its host ({{.Host}}:{{.Port}}: where it listens)")
	fl.BoolVar(&f.acceptHostKeys, "accept-host-keys", false, "--ssh: accept the scanned host keys without asking (they are still shown); for scripts that checked them")
	fl.StringVar(&f.cloud, "cloud", "", "instances are a cloud's servers: exec, ec2 or sacloud")
	fl.IntVar(&f.port, "port", initconfig.DefaultCloudPort, "--cloud: the port the servers' app serves on")
	fl.StringVar(&f.cloudCLI, "cloud-cli", "", "--cloud exec: the program that starts, stops and lists servers")
	fl.StringVar(&f.region, "region", "", "--cloud ec2: the AWS region")
	fl.StringVar(&f.lt, "launch-template", "", "--cloud ec2: the launch template's name")
	fl.StringVar(&f.zone, "zone", initconfig.DefaultZone, "--cloud sacloud: the zone")
	fl.StringVar(&f.archive, "archive", "", "--cloud sacloud: the source archive whose servers run the app")
	fl.StringSliceVar(&f.domains, "tls", nil, "serve HTTPS for DOMAIN (repeatable) with certificates from ACME")
	fl.StringVar(&f.email, "email", "", "--tls: the ACME account's email address")
	fl.StringVar(&f.acmeDirectory, "acme-directory", "", "--tls: the ACME CA's directory URL (default: Let's Encrypt)")
	fl.StringVar(&f.tlsListen, "tls-listen", initconfig.DefaultHTTPS, "--tls: where HTTPS is served")
	fl.StringVar(&f.ha, "ha", "", "make this node one of an HA pair with PEER (the other node's IP address)")
	fl.StringSliceVar(&f.etcd, "etcd", nil, "--ha: etcd endpoints, http(s)://host:port (repeatable)")
	fl.StringVar(&f.node, "node", "", "--ha: this node's name (default: the host name)")
	fl.IntVar(&f.priority, "priority", initconfig.DefaultPriority, "--ha: this node's priority (1-254; give the peer another)")
	fl.StringVar(&f.vip, "vip", "", "--ha: a virtual IP (CIDR) keepalived moves to the leader")
	fl.StringVar(&f.vipInterface, "vip-interface", "", "--ha: the interface that carries --vip")
	def := initconfig.Defaults
	fl.StringVar(&f.listen, "listen", def.Listen, "where HAProxy serves HTTP (with --tls: "+initconfig.DefaultHTTPACME+", for ACME's challenges)")
	fl.StringVar(&f.stateDir, "state-dir", def.StateDir, "state_dir, relative to the config file")
	fl.StringVar(&f.group, "group", def.Group, "the group's name")
	fl.IntVar(&f.min, "min", def.Min, "the group's min_size")
	fl.IntVar(&f.max, "max", def.Max, "the group's max_size")
	fl.StringVar(&f.health, "health-path", def.HealthPath, "the HTTP path instances are checked at")
	fl.IntVar(&f.maxConn, "max-conn", 0, "requests each instance serves at once (limits.max_conn; more wait in HAProxy's queue); the policy then scales on concurrency, 0.7 × N in flight per instance")
	_ = cmd.RegisterFlagCompletionFunc("cloud", cobra.FixedCompletions(initconfig.Clouds, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// runInit is shoal init: the options from the flags or the interview, the
// host keys confirmed, the file rendered, checked and written.
func runInit(cmd *cobra.Command, o *options, f *initFlags) error {
	usage := func(format string, args ...any) error {
		return &exitError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
	}
	path := cmp.Or(f.output, o.configFile())
	toStdout := path == "-"
	if !toStdout && !f.force {
		if _, err := os.Lstat(path); err == nil {
			return usage("%s exists; init never replaces a file: --force does, or -o FILE writes another", path)
		}
	}
	dir := "."
	if !toStdout {
		dir = filepath.Dir(path)
	}
	in := cmd.InOrStdin()
	ask := initconfig.Prompter{In: bufio.NewReader(in), Out: o.stderr}
	tty := stdinTerminal(in)

	opts, asked, err := f.options(cmd)
	if err != nil {
		return usage("init: %v", err)
	}
	if !asked {
		if !tty {
			fmt.Fprint(o.stderr, cmd.UsageString())
			return usage("init: say where the instances run (--local CMD, --ssh HOST or --cloud TYPE); without flags init asks, on a terminal only")
		}
		fmt.Fprintln(o.stderr, "A first shoal.yaml: a group of instances behind HAProxy. Enter takes the [default].")
		if err := ask.Interview(&opts); err != nil {
			return usage("init: %v", err)
		}
	}
	if err := opts.Check(); err != nil {
		return usage("init: %v", err)
	}
	resolvePaths(&opts, f.knownHosts != "")
	if opts.SSH != nil {
		if err := confirmHostKeys(cmd.Context(), o, opts.SSH, dir, f.acceptHostKeys, tty, ask); err != nil {
			return err
		}
	}
	data, err := initconfig.Render(opts)
	if err != nil {
		return usage("init: %v", err)
	}
	// Checked as the file it will be: relative paths against its directory.
	checkPath := path
	if toStdout {
		checkPath = "shoal.yaml"
	}
	if err := checkInit(cmd.Context(), o, checkPath, data); err != nil {
		return err
	}
	if toStdout {
		_, err := o.stdout.Write(data)
		return err
	}
	// Nothing init writes holds a secret (credentials come from the
	// environment or files the config names), so the file is readable as
	// /etc's configs are.
	if err := initconfig.WriteFile(path, data, 0o644, f.force); err != nil {
		if errors.Is(err, initconfig.ErrExists) {
			return usage("%s exists; init never replaces a file: --force does, or -o FILE writes another", path)
		}
		return &exitError{code: exitFailed, msg: err.Error()}
	}
	fmt.Fprintf(o.stderr, "wrote %s; next: shoal validate -c %s && shoal serve -c %s\n", path, path, path)
	return nil
}

// options are the flags as initconfig.Options; asked is false when no flag
// says what to write, so the interview must.
func (f *initFlags) options(cmd *cobra.Command) (opts initconfig.Options, asked bool, err error) {
	changed := cmd.Flags().Changed
	opts = initconfig.Options{Listen: f.listen, StateDir: f.stateDir, Group: f.group, Min: f.min, Max: f.max, HealthPath: f.health, MaxConn: f.maxConn}
	if changed("max-conn") && f.maxConn < 1 {
		return opts, asked, fmt.Errorf("--max-conn must be at least 1 (requests each instance serves at once), got %d", f.maxConn)
	}
	for _, name := range []string{"local", "ssh", "cloud", "tls", "ha"} {
		asked = asked || changed(name)
	}
	words := func(flag, line string) ([]string, error) {
		if line == "" {
			return nil, nil // Check names what is missing
		}
		w, err := initconfig.Words(line)
		if err != nil {
			return nil, fmt.Errorf("--%s %q: the command %w", flag, line, err)
		}
		return w, nil
	}
	if changed("local") {
		if opts.Local, err = words("local", f.local); err != nil {
			return opts, asked, err
		}
		if opts.Local == nil {
			return opts, asked, errors.New("--local needs the command instances run")
		}
	}
	if changed("ssh") {
		opts.SSH = &initconfig.SSH{Hosts: f.ssh, User: f.user, KeyFile: f.key, KnownHosts: "known_hosts"}
		if opts.SSH.Command, err = words("command", f.command); err != nil {
			return opts, asked, err
		}
		if f.knownHosts != "" {
			opts.SSH.KnownHosts = f.knownHosts
		}
	}
	if changed("cloud") {
		c := &initconfig.Cloud{Type: f.cloud, Port: f.port, CLI: f.cloudCLI, Region: f.region, LaunchTemplate: f.lt, Zone: f.zone, Archive: f.archive}
		// ec2's keys: the environment's if set, else the usual file's
		// default profile; the loader says what is missing.
		if c.Type == "ec2" && os.Getenv("AWS_ACCESS_KEY_ID") == "" {
			if home, err := os.UserHomeDir(); err == nil {
				if _, err := os.Stat(filepath.Join(home, ".aws", "credentials")); err == nil {
					c.CredentialsFile = "~/.aws/credentials"
				}
			}
		}
		opts.Cloud = c
	}
	if changed("tls") || changed("email") {
		opts.TLS = &initconfig.TLS{Domains: f.domains, Email: f.email, Directory: f.acmeDirectory, Bind: f.tlsListen}
		if !changed("listen") {
			opts.Listen = initconfig.DefaultHTTPACME
		}
	}
	if changed("ha") {
		opts.HA = &initconfig.HA{Peer: f.ha, Node: cmp.Or(f.node, initconfig.DefaultNode()), Priority: f.priority, Etcd: f.etcd, VIP: f.vip, Interface: f.vipInterface}
	}
	return opts, asked, nil
}

// resolvePaths makes the paths the operator gave (flags or answers),
// relative to the working directory, absolute: the config resolves relative
// paths against its own directory. known_hosts is the operator's only with
// --known-hosts; by default it is the file beside the config.
func resolvePaths(opts *initconfig.Options, ownKnownHosts bool) {
	if s := opts.SSH; s != nil {
		s.KeyFile = absPath(s.KeyFile)
		if ownKnownHosts {
			s.KnownHosts = absPath(s.KnownHosts)
		}
	}
	if c := opts.Cloud; c != nil && strings.ContainsRune(c.CLI, '/') {
		c.CLI = absPath(c.CLI) // a bare name is looked up on PATH
	}
}

// absPath is p made absolute; ~/ is kept: the loader expands it.
func absPath(p string) string {
	if p == "" || strings.HasPrefix(p, "~/") || filepath.IsAbs(p) {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// confirmHostKeys scans every host's key, shows the fingerprints and, once
// the operator confirms them (on the terminal, or beforehand with
// --accept-host-keys), adds them to the known_hosts file. A key is never
// accepted unseen: without a terminal and without the flag, init stops.
func confirmHostKeys(ctx context.Context, o *options, s *initconfig.SSH, dir string, accept, tty bool, ask initconfig.Prompter) error {
	var keys []initconfig.HostKey
	for _, h := range s.Hosts {
		k, err := initconfig.Scan(ctx, h, scanTimeout)
		if err != nil {
			return &exitError{code: exitFailed, msg: "init: " + err.Error()}
		}
		keys = append(keys, k)
	}
	fmt.Fprintln(o.stderr, "The hosts offered these keys; compare each with what `ssh-keygen -lf /etc/ssh/ssh_host_TYPE_key.pub` (TYPE: ed25519, ecdsa or rsa) prints on that host, seen over a channel you trust (its console):")
	for _, k := range keys {
		fmt.Fprintf(o.stderr, "  %s  %s %s\n", k.Dial, k.Key.Type(), k.Fingerprint())
	}
	switch {
	case accept:
		fmt.Fprintln(o.stderr, "accepted (--accept-host-keys)")
	case tty:
		ok, err := ask.Confirm("Are these the hosts' keys")
		if err != nil {
			return &exitError{code: exitUsage, msg: "init: " + err.Error()}
		}
		if !ok {
			return &exitError{code: exitFailed, msg: "init: host keys not confirmed; nothing written"}
		}
	default:
		return &exitError{code: exitUsage, msg: "init: the host keys above need your confirmation and stdin is not a terminal: check them, then run again with --accept-host-keys; nothing written"}
	}
	known := s.KnownHosts
	if !filepath.IsAbs(known) && !strings.HasPrefix(known, "~/") {
		known = filepath.Join(dir, known)
	}
	if strings.HasPrefix(known, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return &exitError{code: exitFailed, msg: "init: known_hosts: " + err.Error()}
		}
		known = filepath.Join(home, known[2:])
	}
	data, added, err := initconfig.MergeKnownHosts(known, keys)
	if err != nil {
		return &exitError{code: exitFailed, msg: "init: " + err.Error()}
	}
	if added == 0 {
		fmt.Fprintf(o.stderr, "%s has every key already\n", known)
		return nil
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(known); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := initconfig.WriteFile(known, data, mode, true); err != nil {
		return &exitError{code: exitFailed, msg: "init: " + err.Error()}
	}
	fmt.Fprintf(o.stderr, "added %d key(s) to %s\n", added, known)
	return nil
}

// checkInit runs on data what `shoal validate` runs on a file at path: the
// loader, then the checks of this machine (programs, haproxy -c). A file
// that fails is not written: that is init's promise.
func checkInit(ctx context.Context, o *options, path string, data []byte) error {
	cfg, err := config.Parse(path, data)
	if err == nil {
		_, err = core.Preflight(ctx, cfg)
	}
	if err == nil {
		return nil
	}
	var el config.ErrorList
	if errors.As(err, &el) {
		fmt.Fprintln(o.stderr, err)
		fmt.Fprintf(o.stderr, "the file would have been:\n%s", numbered(data))
		return &exitError{code: exitUsage, msg: fmt.Sprintf("init: the file does not validate (%d error(s) above); nothing written", len(el))}
	}
	return &exitError{code: exitFailed, msg: "init: " + err.Error()}
}

// numbered prefixes data's lines with their numbers, for the errors'
// FILE:LINE.
func numbered(data []byte) string {
	var b strings.Builder
	for i, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) > 0 {
			fmt.Fprintf(&b, "%4d  %s", i+1, line)
		}
	}
	return b.String()
}

// stdinTerminal says whether r is a terminal: only there does init ask.
func stdinTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
