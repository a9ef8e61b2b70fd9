package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/sqlitestore"
)

// runVacuum is "oncepay vacuum --db FILE": an older SQLite file (made
// before auto_vacuum=INCREMENTAL was the default) turned into one whose
// purges give their freed pages back, by one VACUUM, which rewrites the
// file and holds every writer until it is done. Never done at start on
// its own: a start that hangs for minutes with no word why is worse than
// a warning (sqlitestore/vacuum.go).
func runVacuum(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var cfg config
	fs := newFlagSet("vacuum", "vacuum [--db FILE]", stderr)
	cfg.registerStore(fs)
	if _, err := parseFlags(fs, args, getenv); err != nil {
		return err
	}
	if pgstore.IsURL(cfg.db) {
		return errors.New("vacuum: --db is PostgreSQL, whose autovacuum frees space on its own (docs/postgres.md)")
	}
	db, err := sqlitestore.Open(ctx, cfg.db, schema, sqlitestore.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	incremental, err := db.Incremental(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(stdout, "vacuum: rewriting %s (auto_vacuum=INCREMENTAL: %v); writes wait until it is done\n", cfg.db, incremental)
	before, after, err := db.Vacuum(ctx)
	if err != nil {
		return fmt.Errorf("vacuum %s: %w", cfg.db, err)
	}
	fmt.Fprintf(stdout, "vacuum: %s from %d to %d bytes in %s; auto_vacuum=INCREMENTAL: each purge batch now gives back the space it frees\n",
		cfg.db, before, after, time.Since(start).Round(time.Millisecond))
	return nil
}

// warnNotIncremental says, at every start, that a SQLite file never
// shrinks until "oncepay vacuum" has been run once on it.
func warnNotIncremental(ctx context.Context, db any, name string, warn func(msg string, args ...any)) {
	s, ok := db.(*sqlitestore.DB)
	if !ok {
		return
	}
	if incremental, err := s.Incremental(ctx); err == nil && !incremental {
		warn("this database file never shrinks: purges free space for reuse but do not give it back (auto_vacuum is off, as on every file made before it was the default); run \"oncepay vacuum --db FILE\" once, when writes may wait for it (about a minute a GB)", "db", name)
	}
}
