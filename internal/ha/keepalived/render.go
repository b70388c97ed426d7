package keepalived

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Track scripts. interval 1 with fall 2 takes a dead or hung core (the
// health check answers within timeout 1 or fails) to FAULT in 2-3 s, and
// FAULT sends a priority-0 advert that makes the backup take over at once;
// rise 2 keeps a flapping core from taking the VIP back on one good answer.
// The leader check adds leaderWeight while it passes: the leader outranks
// any standby whose base priority is less than 50 above its own. It falls on
// two failures too, so one slow answer from a busy leader does not move the
// VIP, and rises on one, so the VIP follows a new leader within ~1 s.
const (
	healthScript = "shoal_health"
	leaderScript = "shoal_leader"
	leaderWeight = 50
	yieldTrack   = "shoal_yield"
	instance     = "shoal"
)

// plain is what a path, interface or name rendered unquoted may hold:
// nothing keepalived's parser reads specially (whitespace, quotes, '#' and
// '!' comments, '$' parameters, braces, backslash escapes).
var plain = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// scriptLine renders argv as the argument of keepalived's script keyword.
// keepalived (2.2.7) splits a double-quoted string on unquoted spaces and
// takes each single-quoted word whole, spaces included: "'a' 'b c'" runs a
// with the one argument "b c" (checked with a script that prints its
// arguments). Inside the quotes '#', '!' and braces are literal, but a
// backslash starts an escape and '$' a parameter substitution, and a quote
// would end the word, so words holding any of those, or control characters,
// are refused rather than escaped: argv never reaches a shell, and nothing
// in it is reinterpreted.
func scriptLine(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("empty command")
	}
	words := make([]string, len(argv))
	for i, w := range argv {
		if w == "" || strings.ContainsAny(w, `'"\$`) || strings.ContainsFunc(w, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return "", fmt.Errorf("argument %q: keepalived cannot be given an empty word or one with a quote, backslash, '$' or control character", w)
		}
		words[i] = "'" + w + "'"
	}
	return `"` + strings.Join(words, " ") + `"`, nil
}

// advert renders advert_int in seconds. VRRPv2 counts whole seconds; a
// fraction needs VRRPv3 (centiseconds), which both nodes then speak since
// they render the same configuration.
func advert(d time.Duration) (text string, v3 bool) {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10), false
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64), true
}

// render returns keepalived.conf for o, whose VIP is vip and whose track
// scripts' argv[0] are already absolute (resolveScript).
func render(o Options, vip netip.Prefix, fifo string) (string, error) {
	v := o.VIP
	switch {
	case !plain.MatchString(o.Node):
		return "", fmt.Errorf("node name %q: expected letters, digits, '-', '_' or '.'", o.Node)
	case !plain.MatchString(v.Interface) || len(v.Interface) > 15:
		return "", fmt.Errorf("vip interface %q: not an interface name", v.Interface)
	case o.Priority < 1 || o.Priority > 254:
		return "", fmt.Errorf("priority %d: expected 1..254", o.Priority)
	case v.RouterID < 1 || v.RouterID > 255:
		return "", fmt.Errorf("vip router_id %d: expected 1..255", v.RouterID)
	case v.Advert < 10*time.Millisecond || v.Advert > 255*time.Second:
		return "", fmt.Errorf("vip advert %s: expected 10ms..255s", v.Advert)
	case !plain.MatchString(fifo):
		return "", fmt.Errorf("state directory %q: keepalived cannot be given a path with spaces, quotes or %q", filepath.Dir(fifo), "#!${}\\")
	}
	var b strings.Builder
	b.WriteString("# Written by shoal on each start of keepalived; edits are lost.\n")
	fmt.Fprintf(&b, "global_defs {\n    router_id shoal-%s\n", o.Node)
	// Scripts run as root, and keepalived refuses (disables) a script
	// that a non-root user could replace: see checkSecure.
	b.WriteString("    script_user root\n    enable_script_security\n")
	// States arrive in order on a FIFO that the supervisor reads.
	fmt.Fprintf(&b, "    vrrp_notify_fifo %s\n}\n", fifo)
	// The handover's yield (see Handover): with weight 0, a non-zero value
	// in the file is a fault, read as soon as the file changes.
	fmt.Fprintf(&b, "vrrp_track_file %s {\n    file %s\n    weight 0\n}\n", yieldTrack, filepath.Join(filepath.Dir(fifo), yieldFile))
	var tracks []string
	for _, s := range []struct {
		name string
		argv []string
		opts string
	}{
		{healthScript, o.Check, "    fall 2\n    rise 2\n"},
		{leaderScript, o.LeaderCheck, fmt.Sprintf("    weight %d\n    fall 2\n    rise 1\n", leaderWeight)},
	} {
		if len(s.argv) == 0 {
			continue
		}
		line, err := scriptLine(s.argv)
		if err != nil {
			return "", fmt.Errorf("%s script: %w", s.name, err)
		}
		fmt.Fprintf(&b, "vrrp_script %s {\n    script %s\n    interval 1\n    timeout 1\n%s}\n", s.name, line, s.opts)
		tracks = append(tracks, s.name)
	}
	adv, v3 := advert(v.Advert)
	fmt.Fprintf(&b, "vrrp_instance %s {\n    state BACKUP\n    interface %s\n    virtual_router_id %d\n    priority %d\n    advert_int %s\n",
		instance, v.Interface, v.RouterID, o.Priority, adv)
	if v3 {
		b.WriteString("    version 3\n")
	}
	if len(v.UnicastPeers) > 0 {
		b.WriteString("    unicast_peer {\n")
		for _, p := range v.UnicastPeers {
			a, err := netip.ParseAddr(p)
			if err != nil {
				return "", fmt.Errorf("vip unicast peer %q: expected an IP address", p)
			}
			if a.Is4() != vip.Addr().Is4() {
				return "", fmt.Errorf("vip unicast peer %s: VRRP runs in the VIP's address family, %s is not", a, vip.Addr())
			}
			fmt.Fprintf(&b, "        %s\n", a)
		}
		b.WriteString("    }\n")
	}
	fmt.Fprintf(&b, "    virtual_ipaddress {\n        %s dev %s\n    }\n", vip, v.Interface)
	if len(tracks) > 0 {
		b.WriteString("    track_script {\n")
		for _, t := range tracks {
			fmt.Fprintf(&b, "        %s\n", t)
		}
		b.WriteString("    }\n")
	}
	fmt.Fprintf(&b, "    track_file {\n        %s\n    }\n", yieldTrack)
	b.WriteString("}\n")
	return b.String(), nil
}

// resolveScript returns argv with argv[0] made an absolute path with no
// symbolic links (looked up in PATH if it has no slash), and checks it as
// keepalived will.
func resolveScript(argv []string) ([]string, error) {
	if len(argv) == 0 {
		return nil, nil
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, fmt.Errorf("find %s: %w", argv[0], err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("find %s: %w", argv[0], err)
	}
	if path, err = filepath.EvalSymlinks(path); err != nil {
		return nil, fmt.Errorf("find %s: %w", argv[0], err)
	}
	if err := checkSecure(path); err != nil {
		return nil, err
	}
	return append([]string{path}, argv[1:]...), nil
}

// checkSecure applies keepalived's rule for scripts run as root: the file
// and every directory above it are owned by root and writable by no one
// else, except that a sticky directory (/tmp) may be world-writable.
// keepalived does not fail on a script that breaks it: it logs "Unsafe
// permissions" and disables the track script, and the node would then hold
// the VIP however unhealthy it is. So Start refuses instead.
func checkSecure(path string) error {
	for p := path; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("check script %s: %w", path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("check script %s: no owner information for %s", path, p)
		}
		mode := fi.Mode()
		sticky := fi.IsDir() && mode&os.ModeSticky != 0
		if st.Uid != 0 || (mode.Perm()&0o022 != 0 && !sticky) {
			return fmt.Errorf("script %s: keepalived runs it as root only if no other user can replace it, but %s is owned by uid %d with mode %s (make it root's and not group- or world-writable)", path, p, st.Uid, mode.Perm())
		}
		if p == "/" {
			return nil
		}
	}
}
