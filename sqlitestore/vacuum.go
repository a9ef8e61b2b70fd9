package sqlitestore

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"time"
)

// A file made by this store has auto_vacuum=INCREMENTAL: each purge batch
// hands the pages it freed back to the file system (incremental_vacuum, in
// small writes after the batch's: freePages), so a file shrinks when its
// keys and payments are purged. An older file has auto_vacuum=NONE: freed
// pages are reused but the file never shrinks. Turning it on takes a VACUUM, which rewrites the
// whole file and holds the writer while it does (BENCHMARKS.md: about a
// minute per GB on a small machine), so Open never does it on its own: a
// start would hang for as long with no word why. The operator runs
// "oncepay vacuum" (Vacuum) when a pause of writes is acceptable, and
// serve says so at every start until then (AutoVacuum).

// autoVacuumIncremental is PRAGMA auto_vacuum's value for INCREMENTAL.
const autoVacuumIncremental = 2

// Incremental reports whether the file gives the pages purges free back to
// the file system (auto_vacuum=INCREMENTAL). A file made before it was the
// default does not until Vacuum is run once.
func (db *DB) Incremental(ctx context.Context) (bool, error) {
	var mode int
	err := db.r.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode)
	return mode == autoVacuumIncremental, mapErr(err)
}

// Vacuum turns auto_vacuum=INCREMENTAL on and rewrites the file (VACUUM),
// which also drops every free page: what an older file needs once to
// shrink with its purges. It holds the writer (this process's and every
// other's) until it is done, and needs free disk space of about the
// file's size. It returns the file's size before and after.
func (db *DB) Vacuum(ctx context.Context) (before, after int64, err error) {
	path := db.path
	before = fileSize(path)
	// Its own connection: VACUUM runs in no transaction, and the writer's
	// connection is the group commit's.
	c, err := sql.Open(db.driver, db.dsn)
	if err != nil {
		return before, 0, err
	}
	defer c.Close()
	c.SetMaxOpenConns(1)
	// VACUUM makes the auto_vacuum set just before it the file's.
	for _, stmt := range []string{`PRAGMA auto_vacuum = INCREMENTAL`, `VACUUM`, `PRAGMA wal_checkpoint(TRUNCATE)`} {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			return before, 0, mapErr(err)
		}
	}
	return before, fileSize(path), nil
}

// freeStep is how many free pages one step of freePages gives back: a
// step moves as many pages from the file's end into the free ones (each
// with its parent's pointer), a few milliseconds of the writer's on a
// large file.
const freeStep = 128

// purgeBatch runs one batch of a purge, del, as a write alone in its
// transaction, and returns what it deleted and how long it held the writer
// (the Purger sizes the next batch by it). Then, on a file whose
// auto_vacuum is INCREMENTAL, it gives the pages the batch freed back to
// the file system, freeStep at a time (freePages): not in the batch's
// transaction, whose time would grow with every page moved.
func (db *DB) purgeBatch(ctx context.Context, del func(ctx context.Context, tx *sql.Tx) (int64, error)) (int, time.Duration, error) {
	var n, free int64
	held, err := db.writer.WriteAlone(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if n, err = del(ctx, tx); err != nil || n == 0 {
			return err
		}
		// Not INCREMENTAL: freed pages are reused, never given back.
		var mode int
		if err := tx.QueryRowContext(ctx, `PRAGMA auto_vacuum`).Scan(&mode); err != nil || mode != autoVacuumIncremental {
			return err
		}
		return tx.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&free)
	})
	if err != nil {
		return 0, held, mapErr(err)
	}
	return int(n), held, db.freePages(ctx, free)
}

// freePages gives free pages back to the file system, freeStep at a time,
// each step a write the writer runs between the payments' as one of
// theirs (sharing their commit), until none is left (or a step gives none
// back: other writes took them).
func (db *DB) freePages(ctx context.Context, free int64) error {
	for free > 0 {
		left := free
		err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `PRAGMA incremental_vacuum(`+strconv.Itoa(freeStep)+`)`)
			if err != nil {
				return err
			}
			for rows.Next() {
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `PRAGMA freelist_count`).Scan(&left)
		})
		if err != nil || left >= free {
			return err
		}
		free = left
	}
	return nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
