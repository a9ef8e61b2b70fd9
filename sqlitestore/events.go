package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var (
	_ payment.EventStore = (*DB)(nil)
	_ payment.PurgeStore = (*DB)(nil)
)

// The inbox's statements run through write, unprepared: events come at the
// rate of payments at most, and their parse cost is no hot path's.

// ReceiveEvent claims (provider, event id); the rows affected decide.
func (db *DB) ReceiveEvent(ctx context.Context, e *payment.InboxEvent) (claimed bool, err error) {
	body, err := json.Marshal(e.Event)
	if err != nil {
		return false, fmt.Errorf("encode event: %w", err)
	}
	var n int64
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO webhook_events
			(provider, event_id, type, event, payment_id, state, attempts, fence, received_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, 0, 0, ?, ?)`,
			e.Provider, e.ID, e.Type, body, nullString(e.PaymentID), payment.EventReceived, ms(e.ReceivedAt), ms(e.UpdatedAt))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n == 1 && err == nil, err
}

// BeginEvent makes the caller the event's processor: one guarded UPDATE, so
// of two copies racing for it exactly one wins.
func (db *DB) BeginEvent(ctx context.Context, provider, id string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.update(ctx, `UPDATE webhook_events
		SET state = 'processing', fence = fence + 1, attempts = attempts + 1,
		    lease_expires_at = ?, updated_at = ?
		WHERE provider = ? AND event_id = ? AND fence = ?
		  AND (state IN ('received', 'failed') OR state = 'processing' AND lease_expires_at <= ?)`,
		ms(leaseUntil), ms(now), provider, id, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// FinishEvent ends a try, guarded by the processor's fence.
func (db *DB) FinishEvent(ctx context.Context, provider, id string, fence int64, state payment.EventState, result, lastErr string, now time.Time) (bool, error) {
	n, err := db.update(ctx, `UPDATE webhook_events
		SET state = ?, result = ?, last_error = ?, lease_expires_at = NULL, updated_at = ?
		WHERE provider = ? AND event_id = ? AND state = 'processing' AND fence = ?`,
		state, nullString(result), nullString(lastErr), ms(now), provider, id, fence)
	return n == 1 && err == nil, err
}

func (db *DB) update(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

const eventColumns = `event, state, attempts, fence, lease_expires_at, result, last_error, received_at, updated_at`

// InboxEvent reads one event from the read pool.
func (db *DB) InboxEvent(ctx context.Context, provider, id string) (*payment.InboxEvent, error) {
	e, err := scanEvent(db.r.QueryRowContext(ctx, `SELECT `+eventColumns+` FROM webhook_events
		WHERE provider = ? AND event_id = ?`, provider, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such event.")
	}
	return e, mapErr(err)
}

// StrandedEvents returns events a processor left: never begun, or begun
// under a lease that has run out; and failed ones with tries left, untouched
// for a lease, whose sender may have given up.
func (db *DB) StrandedEvents(ctx context.Context, receivedBefore, now time.Time, maxAttempts, limit int) ([]payment.InboxEvent, error) {
	return queryAll(ctx, db.r, scanEvent, `SELECT `+eventColumns+` FROM webhook_events
		WHERE state = 'received' AND updated_at <= ?1
		   OR state = 'processing' AND lease_expires_at <= ?2
		   OR state = 'failed' AND updated_at <= ?1 AND attempts < ?3
		ORDER BY updated_at LIMIT ?4`, ms(receivedBefore), ms(now), maxAttempts, limit)
}

// ListEvents returns events newest first.
func (db *DB) ListEvents(ctx context.Context, f payment.EventFilter) ([]payment.InboxEvent, error) {
	query, args := `SELECT `+eventColumns+` FROM webhook_events`, []any{}
	if f.State != "" {
		query += ` WHERE state = ?`
		args = append(args, f.State)
	}
	query += ` ORDER BY received_at DESC, event_id LIMIT ?`
	return queryAll(ctx, db.r, scanEvent, query, append(args, f.Limit)...)
}

func scanEvent(row scanner) (*payment.InboxEvent, error) {
	var (
		e                 payment.InboxEvent
		body              []byte
		lease             sql.NullInt64
		result, lastErr   sql.NullString
		received, updated int64
	)
	if err := row.Scan(&body, &e.State, &e.Attempts, &e.Fence, &lease, &result, &lastErr, &received, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &e.Event); err != nil {
		return nil, fmt.Errorf("decode stored event: %w", err)
	}
	e.LeaseExpiresAt = fromMS(lease)
	e.Result, e.LastError = result.String, lastErr.String
	e.ReceivedAt, e.UpdatedAt = time.UnixMilli(received).UTC(), time.UnixMilli(updated).UTC()
	return &e, nil
}

// PurgeEvents deletes up to limit final events (processed, ignored) last
// updated before before. An event still to be applied (received,
// processing, failed) is never deleted: its sender or an operator needs it.
func (db *DB) PurgeEvents(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	return db.purgeBatch(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_events WHERE rowid IN (
			SELECT rowid FROM webhook_events
			WHERE state IN ('processed', 'ignored') AND updated_at < ? LIMIT ?)`, ms(before), limit)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}
