package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/shoal-lb/shoal/internal/provider/ssh"
	"github.com/shoal-lb/shoal/internal/testhost"
)

// init --ssh against real sshds: it shows each host's key, writes
// known_hosts only once they are confirmed, and the file it writes passes
// validate's host-key check; a real login trusts that known_hosts.
func TestInitSSHHostKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lab, err := testhost.New(ctx, t.TempDir(), 2)
	if errors.Is(err, testhost.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	// The hosts' keys, as the lab wrote them: "ADDR TYPE BASE64".
	want := map[string]gossh.PublicKey{}
	b, err := os.ReadFile(lab.KnownHosts)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		addr, key, _ := strings.Cut(strings.TrimSpace(line), " ")
		k, _, _, _, err := gossh.ParseAuthorizedKey([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		want[addr] = k
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "shoal.yaml")
	known := filepath.Join(dir, "known_hosts")
	args := []string{"init", "-o", path, "--user", lab.User, "--key", lab.KeyFile, "--command", "/srv/app --listen {{.Host}}:{{.Port}}"}
	for _, h := range lab.Hosts {
		args = append(args, "--ssh", h.Addr)
	}
	nothingWritten := func(what string) {
		t.Helper()
		for _, p := range []string{path, known} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s was written", what, p)
			}
		}
	}

	// Not on a terminal, and not told to accept: the keys are shown, and
	// nothing is written.
	_, stderr, code := runShoal(t, strings.NewReader(""), args...)
	if code != exitUsage || !strings.Contains(stderr, "need your confirmation and stdin is not a terminal") {
		t.Fatalf("init --ssh without a terminal: exit %d, %s", code, stderr)
	}
	for _, h := range lab.Hosts {
		if line := h.Addr + ":22  ssh-ed25519 " + gossh.FingerprintSHA256(want[h.Addr]); !strings.Contains(stderr, line) {
			t.Errorf("stderr lacks %q:\n%s", line, stderr)
		}
	}
	nothingWritten("without a terminal")

	// On a terminal, "no" writes nothing; "yes" writes both files.
	for _, answer := range []string{"no", "yes"} {
		master, tty := openPTY(t, 80)
		if _, err := master.WriteString(answer + "\n"); err != nil {
			t.Fatal(err)
		}
		go func() { _, _ = io.Copy(io.Discard, master) }()
		_, stderr, code = runShoal(t, tty, args...)
		if answer == "no" {
			if code != exitFailed || !strings.Contains(stderr, "host keys not confirmed") {
				t.Fatalf("answer no: exit %d, %s", code, stderr)
			}
			nothingWritten("answer no")
		} else if code != 0 || !strings.Contains(stderr, "Are these the hosts' keys (yes/no) [no]: ") || !strings.Contains(stderr, "added 2 key(s) to "+known) {
			t.Fatalf("answer yes: exit %d, %s", code, stderr)
		}
	}
	var wantKnown strings.Builder
	for _, h := range lab.Hosts {
		wantKnown.WriteString(knownhosts.Line([]string{h.Addr}, want[h.Addr]) + "\n")
	}
	if b, _ := os.ReadFile(known); string(b) != wantKnown.String() {
		t.Errorf("known_hosts = %q, want %q", b, wantKnown.String())
	}
	cfg := validated(t, path) // the loader checks every host is in known_hosts
	s := ssh.Of(cfg.Providers[0])
	if s == nil || len(s.Hosts) != 2 || s.Hosts[0].KnownHosts != known || s.Hosts[0].KeyFile != lab.KeyFile || s.Hosts[1].Address != lab.Hosts[1].Addr {
		t.Errorf("ssh provider = %+v", s)
	}

	// A real login trusts what init wrote.
	cb, err := knownhosts.New(known)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(lab.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := gossh.ParsePrivateKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	c, err := gossh.Dial("tcp", net.JoinHostPort(lab.Hosts[0].Addr, "22"), &gossh.ClientConfig{
		User: lab.User, Auth: []gossh.AuthMethod{gossh.PublicKeys(signer)}, HostKeyCallback: cb,
		HostKeyAlgorithms: []string{gossh.KeyAlgoED25519}, Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("login with init's known_hosts: %v", err)
	}
	c.Close()

	// Again, with --force and --accept-host-keys: the keys are known, so
	// known_hosts is left as it is.
	_, stderr, code = runShoal(t, strings.NewReader(""), append(args, "--force", "--accept-host-keys")...)
	if code != 0 || !strings.Contains(stderr, "accepted (--accept-host-keys)") || !strings.Contains(stderr, "has every key already") {
		t.Fatalf("init --accept-host-keys: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(known); string(b) != wantKnown.String() {
		t.Errorf("known_hosts changed: %q", b)
	}

	// A host whose key differs from the one known_hosts has is refused,
	// even with --accept-host-keys: init does not replace a key.
	other := lab.Hosts[1].Addr + " " + strings.TrimSpace(string(gossh.MarshalAuthorizedKey(want[lab.Hosts[1].Addr])))
	forged := lab.Hosts[0].Addr + " " + strings.TrimPrefix(other, lab.Hosts[1].Addr+" ") + "\n"
	if err := os.WriteFile(known, []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	_, stderr, code = runShoal(t, strings.NewReader(""), append(args, "--force", "--accept-host-keys")...)
	if code != exitFailed || !strings.Contains(stderr, known+":1 has another ssh-ed25519 key for "+lab.Hosts[0].Addr+":22") {
		t.Errorf("a changed key: exit %d, %s", code, stderr)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("shoal.yaml changed although a host key did not match")
	}
	if b, _ := os.ReadFile(known); string(b) != forged {
		t.Errorf("known_hosts changed: %q", b)
	}

	// The interview asks for the same, then for the keys' confirmation.
	dir2 := t.TempDir()
	path2 := filepath.Join(dir2, "shoal.yaml")
	master, tty := openPTY(t, 80)
	answers := strings.Join([]string{"ssh", lab.Hosts[0].Addr + " " + lab.Hosts[1].Addr, lab.User, lab.KeyFile,
		"/srv/app --listen {{.Host}}:{{.Port}}", "", "", "", "yes"}, "\n") + "\n"
	if _, err := master.WriteString(answers); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, master) }()
	if _, stderr, code := runShoal(t, tty, "init", "-o", path2); code != 0 || !strings.Contains(stderr, "added 2 key(s) to "+filepath.Join(dir2, "known_hosts")) {
		t.Fatalf("the interview: exit %d, %s", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir2, "known_hosts")); string(b) != wantKnown.String() {
		t.Errorf("known_hosts from the interview = %q", b)
	}
	validated(t, path2)
}
