// Package hygiene checks the repository itself: what is tracked, not what runs.
package hygiene

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedSize is the largest file the repository may track. Anything
// bigger is a build output or a data set, and belongs outside git.
const maxTrackedSize = 1 << 20

func TestNoLargeTrackedFiles(t *testing.T) {
	out, err := exec.Command("git", "-C", "../..", "ls-files", "-z").Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Skipf("not a git checkout (git ls-files: %v)", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 10 {
		t.Fatalf("git ls-files listed %d files; expected the whole repository", len(files))
	}
	for _, f := range files {
		fi, err := os.Lstat(filepath.Join("../..", f))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		if fi.Mode().IsRegular() && fi.Size() > maxTrackedSize {
			t.Errorf("%s is tracked and %d bytes (over %d): build outputs and data sets stay out of git", f, fi.Size(), maxTrackedSize)
		}
	}
}
