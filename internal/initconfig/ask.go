package initconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// maxTries bounds how often one question is asked again after a bad
// answer.
const maxTries = 3

// Prompter asks questions on a terminal, one answer a line.
type Prompter struct {
	In  *bufio.Reader
	Out io.Writer
}

// Ask asks question (with def shown and taken for an empty answer) until
// check accepts the answer, at most maxTries times.
func (p Prompter) Ask(question, def string, check func(string) error) (string, error) {
	for range maxTries {
		if def != "" {
			fmt.Fprintf(p.Out, "%s [%s]: ", question, def)
		} else {
			fmt.Fprintf(p.Out, "%s: ", question)
		}
		line, err := p.In.ReadString('\n')
		if err != nil && (!errors.Is(err, io.EOF) || line == "") {
			if errors.Is(err, io.EOF) {
				return "", fmt.Errorf("%s: no answer (end of input)", question)
			}
			return "", fmt.Errorf("read answer: %w", err)
		}
		answer := strings.TrimSpace(line)
		if answer == "" {
			answer = def
		}
		if check == nil {
			return answer, nil
		}
		if err := check(answer); err != nil {
			fmt.Fprintf(p.Out, "  %v\n", err)
			continue
		}
		return answer, nil
	}
	return "", fmt.Errorf("%s: no acceptable answer in %d tries", question, maxTries)
}

// Confirm asks a yes/no question; only y or yes is yes.
func (p Prompter) Confirm(question string) (bool, error) {
	a, err := p.Ask(question+" (yes/no)", "no", func(s string) error {
		if !slices.Contains([]string{"y", "yes", "n", "no"}, strings.ToLower(s)) {
			return errors.New("answer yes or no")
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	return strings.HasPrefix(strings.ToLower(a), "y"), nil
}

// Interview fills in the options of a first config by asking: where the
// instances run and what they run, HTTPS, and an HA peer. Every answer is
// checked as the flags are.
func (p Prompter) Interview(o *Options) error {
	required := func(what string) func(string) error {
		return func(s string) error {
			if s == "" {
				return fmt.Errorf("%s is needed", what)
			}
			return nil
		}
	}
	argv := func(dst *[]string) func(string) error {
		return func(s string) error {
			w, err := Words(s)
			if err != nil {
				return fmt.Errorf("the command %v", err)
			}
			if !slices.ContainsFunc(w, func(a string) bool { return strings.Contains(a, "{{.Port}}") }) {
				return errors.New("the command must say the instance's port with {{.Port}} (--listen 127.0.0.1:{{.Port}}, say)")
			}
			*dst = w
			return nil
		}
	}
	where, err := p.Ask("Where do the instances run: local (processes on this machine), ssh (your servers) or cloud", "local", oneOf("local", "ssh", "cloud"))
	if err != nil {
		return err
	}
	switch where {
	case "local":
		var cmd []string
		if _, err := p.Ask("Command that starts one instance; {{.Port}} is its port (./app --listen 127.0.0.1:{{.Port}})", "", argv(&cmd)); err != nil {
			return err
		}
		o.Local = cmd
	case "ssh":
		s := &SSH{KnownHosts: "known_hosts"}
		hosts, err := p.Ask("Hosts, host or host:port, separated by spaces", "", required("a host"))
		if err != nil {
			return err
		}
		s.Hosts = strings.Fields(hosts)
		if s.User, err = p.Ask("Login on the hosts", "", required("the login")); err != nil {
			return err
		}
		if s.KeyFile, err = p.Ask("Private key file (no passphrase) the hosts accept", "~/.ssh/id_ed25519", nil); err != nil {
			return err
		}
		if _, err := p.Ask("Command that starts one instance on a host; it listens on {{.Host}}:{{.Port}}", "", argv(&s.Command)); err != nil {
			return err
		}
		o.SSH = s
	case "cloud":
		c := &Cloud{Port: DefaultCloudPort, Zone: DefaultZone}
		if c.Type, err = p.Ask("Which cloud: exec (any cloud with a CLI), ec2 or sacloud", "", oneOf(Clouds...)); err != nil {
			return err
		}
		port, err := p.Ask("Port the servers' app serves on", strconv.Itoa(DefaultCloudPort), func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 65535 {
				return errors.New("want a port from 1 to 65535")
			}
			return nil
		})
		if err != nil {
			return err
		}
		c.Port, _ = strconv.Atoi(port)
		switch c.Type {
		case "exec":
			c.CLI, err = p.Ask("Program that creates (PROG start NAME), deletes (PROG stop ID) and lists (PROG list) servers", "", required("the program"))
		case "ec2":
			if c.Region, err = p.Ask("AWS region", "", required("the region")); err == nil {
				c.LaunchTemplate, err = p.Ask("Launch template name", "", required("the launch template"))
			}
		case "sacloud":
			if c.Zone, err = p.Ask("Zone", DefaultZone, nil); err == nil {
				c.Archive, err = p.Ask("Source archive whose servers run your app", "", required("the archive"))
			}
		}
		if err != nil {
			return err
		}
		o.Cloud = c
	}
	domain, err := p.Ask("Domain to serve over HTTPS with a Let's Encrypt certificate (empty: plain HTTP)", "", nil)
	if err != nil {
		return err
	}
	if domain != "" {
		t := &TLS{Domains: strings.Fields(domain), Bind: DefaultHTTPS}
		if t.Email, err = p.Ask("Email address for the ACME account", "", required("an email address")); err != nil {
			return err
		}
		o.TLS, o.Listen = t, DefaultHTTPACME
	} else if o.Listen, err = p.Ask("Address HAProxy listens on", o.Listen, nil); err != nil {
		return err
	}
	peer, err := p.Ask("The other node's IP address, for an HA pair (empty: one node)", "", nil)
	if err != nil || peer == "" {
		return err
	}
	h := &HA{Peer: peer, Priority: DefaultPriority, Node: DefaultNode()}
	etcd, err := p.Ask("etcd endpoints the pair keeps its state in, http(s)://host:port, separated by spaces", "", required("an endpoint"))
	if err != nil {
		return err
	}
	h.Etcd = strings.Fields(etcd)
	o.HA = h
	return nil
}

func oneOf(choices ...string) func(string) error {
	return func(s string) error {
		if !slices.Contains(choices, s) {
			return fmt.Errorf("answer one of %s", strings.Join(choices, ", "))
		}
		return nil
	}
}
