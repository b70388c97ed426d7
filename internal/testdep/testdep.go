// Package testdep is how a test says it needs a program this machine may
// lack (HAProxy, etcd, keepalived, sshd, Chromium, promtool, pebble, moto):
// without it the test is skipped with one line saying what to install, so
// `go test ./...` passes on a machine with only Go; under CI=true it fails
// instead, since CI installs everything (`make test-deps`) and a skip there
// would hide a test that never ran.
package testdep

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Command returns the path of the program name on PATH, or skips t (fails
// it in CI) saying which Debian package holds it.
func Command(t testing.TB, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, fmt.Sprintf("%s is not installed (Debian package %s; `make test-deps` installs it)", name, debianPackage))
	}
	return p
}

// Missing skips t with why, or fails it when CI is set.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (CI is set: the test must run)")
	}
	t.Skip(why)
}
