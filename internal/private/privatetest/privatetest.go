// Package privatetest checks, for the tests of every package that keeps a
// SQLite file, that the file and its WAL and shared memory are private.
package privatetest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/oncepay/oncepay/internal/private"
)

// SQLite checks that the SQLite database at path, its -wal and its -shm are
// created with private.Mode under the usual umask 022, and that a database
// left readable by others is tightened when opened again. use opens path,
// writes once (so the -wal and -shm exist) and returns what closes it.
func SQLite(t *testing.T, path string, use func() (close func())) {
	t.Helper()
	defer syscall.Umask(syscall.Umask(0o022))
	files := []string{path, path + "-wal", path + "-shm"}
	check := func(when string) {
		t.Helper()
		for _, p := range files {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if mode := fi.Mode().Perm(); mode != private.Mode {
				t.Errorf("%s: %s mode = %o, want %o", when, filepath.Base(p), mode, private.Mode)
			}
		}
	}
	closeDB := use()
	check("created")
	closeDB()
	for _, p := range files {
		os.Chmod(p, 0o644) // the -wal and -shm may be gone after a clean close
	}
	closeDB = use()
	defer closeDB()
	check("reopened")
}
