// Package private makes the files oncepay writes readable by their owner
// only: the databases hold payments, card tokens and API key hashes.
package private

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Mode is the mode of every file oncepay writes.
const Mode fs.FileMode = 0o600

// SQLite prepares the SQLite database at path before it is opened: it is
// created empty with Mode if missing (SQLite then gives its -wal and -shm
// files the same mode), and an existing database, -wal or -shm that others
// may read is tightened to Mode rather than only warned about, since a
// warning in a log is easily missed and the data is the same either way.
func SQLite(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, Mode)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := tighten(p); err != nil {
			return err
		}
	}
	return nil
}

// tighten takes group and other permissions off path, if it exists.
func tighten(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, Mode); err != nil {
		return fmt.Errorf("%s is mode %o, readable by others, and could not be made %o: %w", path, fi.Mode().Perm(), Mode, err)
	}
	return nil
}
