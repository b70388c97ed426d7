package initconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExists is WriteFile's refusal to replace a file without overwrite.
var ErrExists = errors.New("file exists")

// WriteFile writes data to path atomically, with mode perm: readers see the
// old file or the new one, never a part. Without overwrite an existing
// path is left as it is and ErrExists returned; the check and the write
// are one step (a hard link of the finished file, which fails if the name
// is taken), so a file made meanwhile is not replaced either.
func WriteFile(path string, data []byte, perm fs.FileMode, overwrite bool) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	name := tmp.Name()
	defer os.Remove(name) // gone after the rename or link; a leftover after a failure
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if overwrite {
		err = os.Rename(name, path)
	} else if err = os.Link(name, path); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
