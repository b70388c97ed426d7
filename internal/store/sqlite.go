package store

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // the "sqlite" driver
)

// OpenSQLite opens the SQLite file at path the way shoal opens each of its
// databases, and returns it with the file's absolute path. The file is
// created first with mode 0600: SQLite would create it honouring only the
// umask, and gives -wal and -shm the database file's mode. Every connection
// waits up to 5 s for a lock (busy_timeout) and gets pragmas besides.
func OpenSQLite(path string, pragmas ...string) (db *sql.DB, abs string, err error) {
	abs, err = filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, "", err
	}
	if err := f.Close(); err != nil {
		return nil, "", err
	}
	db, err = sql.Open("sqlite", DSN(abs, true, pragmas...))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", abs, err)
	}
	return db, abs, nil
}

// DSN names the SQLite file abs with busy_timeout(5000) and pragmas. They go
// in the DSN so that every connection the pool opens gets them, also one
// that replaces a discarded connection. A writer's transactions take the
// write lock when they begin (immediate), so two writers never deadlock
// upgrading read locks.
func DSN(abs string, write bool, pragmas ...string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	if write {
		q.Set("_txlock", "immediate")
	}
	return (&url.URL{Scheme: "file", Path: abs, RawQuery: q.Encode()}).String()
}
