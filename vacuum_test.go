package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/sqlitestore"
)

// A file made before auto_vacuum=INCREMENTAL was the default is named at
// every start until "oncepay vacuum" has rewritten it once; a new file,
// or one vacuumed, is not.
func TestVacuumCommandAndItsWarning(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.db")
	c, err := sql.Open("sqlite", old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(schema); err != nil {
		t.Fatal(err)
	}
	c.Close()
	warned := func(path string) bool {
		t.Helper()
		db, err := sqlitestore.Open(context.Background(), path, schema, sqlitestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var said []string
		warnNotIncremental(context.Background(), db, path, func(msg string, args ...any) { said = append(said, fmt.Sprint(msg, args)) })
		return len(said) == 1 && strings.Contains(said[0], "oncepay vacuum")
	}
	if !warned(old) {
		t.Errorf("an older file: no warning naming oncepay vacuum")
	}
	if warned(filepath.Join(dir, "new.db")) {
		t.Errorf("a new file: warned, want nothing")
	}
	out := runOK(t, "vacuum", "--db", old)
	if !strings.Contains(out, "auto_vacuum=INCREMENTAL: each purge batch now gives back") {
		t.Errorf("oncepay vacuum said %q", out)
	}
	if warned(old) {
		t.Errorf("the older file once vacuumed: warned, want nothing")
	}
}
