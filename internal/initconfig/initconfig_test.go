package initconfig

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestWords(t *testing.T) {
	for _, tc := range []struct {
		line string
		want []string
		err  string
	}{
		{"app --port {{.Port}}", []string{"app", "--port", "{{.Port}}"}, ""},
		{"  a\tb\n c  ", []string{"a", "b", "c"}, ""},
		{`'my app' "x y" a\ b`, []string{"my app", "x y", "a b"}, ""},
		{`"a \"q\" \\ \n" 'it''s'`, []string{`a "q" \ \n`, "its"}, ""},
		{`'$HOME|&;' "<>"`, []string{"$HOME|&;", "<>"}, ""},
		{`'' x`, []string{"", "x"}, ""},
		{"a | b", nil, `"|" is a shell operator`},
		{"a >log", nil, `">" is a shell operator`},
		{"a && b", nil, `"&" is a shell operator`},
		{"run $PORT", nil, "$ expands nothing"},
		{"a `b`", nil, "\"`\" is a shell operator"},
		{`"open`, nil, `unterminated " quote`},
		{`a\`, nil, "lone backslash"},
		{"   ", nil, "is empty"},
	} {
		got, err := Words(tc.line)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Words(%q) = %q, %v; want error %q", tc.line, got, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("Words(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}

// WriteFile does not replace a file without overwrite, and leaves no
// temporary file either way.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.yaml")
	if err := WriteFile(path, []byte("one\n"), 0o644, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("two\n"), 0o644, false); !errors.Is(err, ErrExists) {
		t.Errorf("second write without overwrite: %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "one\n" {
		t.Errorf("content %q after a refused write", b)
	}
	if err := WriteFile(path, []byte("three\n"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if b, _ := os.ReadFile(path); string(b) != "three\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("content %q mode %v after overwrite", b, fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("files left: %v", ents)
	}
}

func edKey(t *testing.T) gossh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := gossh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// MergeKnownHosts adds what is missing, keeps what is there (comments
// too), and refuses a host whose key of the same type differs.
func TestMergeKnownHosts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "known_hosts")
	a, b := edKey(t), edKey(t)
	hk := func(addr string, k gossh.PublicKey) HostKey {
		return HostKey{Address: addr, Dial: DialAddress(addr), Key: k}
	}
	// No file yet: every key is added; a port other than 22 is written
	// [host]:port.
	data, added, err := MergeKnownHosts(path, []HostKey{hk("10.0.0.1", a), hk("10.0.0.2:2222", b)})
	want := knownhosts.Line([]string{"10.0.0.1"}, a) + "\n" + knownhosts.Line([]string{"[10.0.0.2]:2222"}, b) + "\n"
	if err != nil || added != 2 || string(data) != want {
		t.Fatalf("merge into nothing = %q, %d, %v; want %q", data, added, err, want)
	}
	existing := "# mine\n" + knownhosts.Line([]string{"10.0.0.1"}, a) // no final newline
	if err := os.WriteFile(path, []byte(existing), 0o600); err != nil {
		t.Fatal(err)
	}
	// Known with the same key: nothing to add.
	if data, added, err := MergeKnownHosts(path, []HostKey{hk("10.0.0.1", a)}); err != nil || added != 0 || string(data) != existing+"\n" {
		t.Errorf("same key: %q, %d, %v", data, added, err)
	}
	// Known with another key of the type offered: refused.
	if _, _, err := MergeKnownHosts(path, []HostKey{hk("10.0.0.1", b)}); err == nil || !strings.Contains(err.Error(), path+":2 has another ssh-ed25519 key for 10.0.0.1:22") {
		t.Errorf("changed key: %v", err)
	}
	// Known with a key of another type only: the new type is added.
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := gossh.NewPublicKey(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	data, added, err = MergeKnownHosts(path, []HostKey{hk("10.0.0.1", ec)})
	if err != nil || added != 1 || string(data) != existing+"\n"+knownhosts.Line([]string{"10.0.0.1"}, ec)+"\n" {
		t.Errorf("another type: %q, %d, %v", data, added, err)
	}
}
