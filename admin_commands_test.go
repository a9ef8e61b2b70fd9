package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// "oncepay merchant --help" (or apikey) lists the flags of the command
// and opens no database: it used to create the --db file it named.
func TestStoreCommandHelpOpensNothing(t *testing.T) {
	for _, cmd := range []string{"merchant", "apikey"} {
		t.Run(cmd, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "oncepay.db")
			getenv := env(map[string]string{"ONCEPAY_DB": db})
			var stderr bytes.Buffer
			err := run(context.Background(), []string{cmd, "--help"}, getenv, io.Discard, &stderr)
			if !errors.Is(err, flag.ErrHelp) {
				t.Errorf("run(%s --help) = %v, want flag.ErrHelp", cmd, err)
			}
			if !strings.Contains(stderr.String(), "--db (ONCEPAY_DB") {
				t.Errorf("%s --help lacks --db:\n%s", cmd, stderr.String())
			}
			err = run(context.Background(), []string{cmd, "--db", db}, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "usage: oncepay "+cmd) {
				t.Errorf("run(%s --db FILE) = %v, want its usage", cmd, err)
			}
			if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s --help made %s (stat: %v)", cmd, db, err)
			}
		})
	}
}
