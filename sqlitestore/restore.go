package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"
)

// MarkRestored records that the file was just restored from a replica
// (note says from where and up to when) and ends, at now, every lease it
// holds: the processes that took them ran against the file this one was
// restored from, and are gone. Serve reads the mark and settles what was in
// progress before it answers anyone (Restored, ClearRestored).
func (db *DB) MarkRestored(ctx context.Context, note string, now time.Time) error {
	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range []string{
			`UPDATE payment_attempts SET lease_expires_at = ?1 WHERE status = 'in_progress' AND lease_expires_at > ?1`,
			`UPDATE forward_queue SET lease_expires_at = ?1 WHERE lease_expires_at > ?1`,
			`UPDATE webhook_events SET lease_expires_at = ?1 WHERE state = 'processing' AND lease_expires_at > ?1`,
		} {
			if _, err := tx.ExecContext(ctx, q, ms(now)); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('restored_from', ?), ('restored_at', ?)
			ON CONFLICT (name) DO UPDATE SET value = excluded.value`, note, strconv.FormatInt(ms(now), 10))
		return err
	})
}

// Restored returns the note MarkRestored left and when, or "" if the file
// was not restored or its restore has been settled since.
func (db *DB) Restored(ctx context.Context) (note string, at time.Time, err error) {
	var when sql.NullString
	err = db.r.QueryRowContext(ctx, `SELECT f.value, (SELECT value FROM settings WHERE name = 'restored_at')
		FROM settings f WHERE f.name = 'restored_from'`).Scan(&note, &when)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, mapErr(err)
	}
	if v, perr := strconv.ParseInt(when.String, 10, 64); perr == nil {
		at = time.UnixMilli(v).UTC()
	}
	return note, at, nil
}

// ClearRestored removes the mark MarkRestored left.
func (db *DB) ClearRestored(ctx context.Context) error {
	_, err := db.execSQL(ctx, `DELETE FROM settings WHERE name IN ('restored_from', 'restored_at')`)
	return err
}
