package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

var (
	_ payment.EventStore = (*DB)(nil)
	_ payment.PurgeStore = (*DB)(nil)
)

// The inbox, as sqlitestore/events.go keeps it: the claim of (provider,
// event id) is an INSERT ... ON CONFLICT DO NOTHING whose rows affected
// decide, and a try is begun and finished by guarded UPDATEs of the fence.

// ReceiveEvent claims (provider, event id); the rows affected decide.
func (db *DB) ReceiveEvent(ctx context.Context, e *payment.InboxEvent) (claimed bool, err error) {
	body, err := json.Marshal(e.Event)
	if err != nil {
		return false, fmt.Errorf("encode event: %w", err)
	}
	n, err := db.exec(ctx, `INSERT INTO webhook_events
		(provider, event_id, type, event, payment_id, state, attempts, fence, received_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, 0, 0, $7, $8)
		ON CONFLICT (provider, event_id) DO NOTHING`,
		e.Provider, e.ID, e.Type, body, nullString(e.PaymentID), string(payment.EventReceived), ms(e.ReceivedAt), ms(e.UpdatedAt))
	return n == 1 && err == nil, err
}

// BeginEvent makes the caller the event's processor: one guarded UPDATE.
// Of two copies racing for it on any instances, the second waits for the
// first's row lock, re-checks the fence on the row it left and matches
// nothing.
func (db *DB) BeginEvent(ctx context.Context, provider, id string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.exec(ctx, `UPDATE webhook_events
		SET state = 'processing', fence = fence + 1, attempts = attempts + 1,
		    lease_expires_at = $1, updated_at = $2
		WHERE provider = $3 AND event_id = $4 AND fence = $5
		  AND (state IN ('received', 'failed') OR state = 'processing' AND lease_expires_at <= $6)`,
		ms(leaseUntil), ms(now), provider, id, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// FinishEvent ends a try, guarded by the processor's fence.
func (db *DB) FinishEvent(ctx context.Context, provider, id string, fence int64, state payment.EventState, result, lastErr string, now time.Time) (bool, error) {
	n, err := db.exec(ctx, `UPDATE webhook_events
		SET state = $1, result = $2, last_error = $3, lease_expires_at = NULL, updated_at = $4
		WHERE provider = $5 AND event_id = $6 AND state = 'processing' AND fence = $7`,
		string(state), nullString(result), nullString(lastErr), ms(now), provider, id, fence)
	return n == 1 && err == nil, err
}

const eventColumns = `event, state, attempts, fence, lease_expires_at, result, last_error, received_at, updated_at`

// InboxEvent reads one event.
func (db *DB) InboxEvent(ctx context.Context, provider, id string) (*payment.InboxEvent, error) {
	e, err := scanEvent(db.pool.QueryRow(ctx, `SELECT `+eventColumns+` FROM webhook_events
		WHERE provider = $1 AND event_id = $2`, provider, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such event.")
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return e, nil
}

// StrandedEvents returns events a processor left: never begun, or begun
// under a lease that has run out; and failed ones with tries left, untouched
// for a lease, whose sender may have given up. Every instance's sweep may read the same
// ones; BeginEvent's fence decides which of them applies each.
func (db *DB) StrandedEvents(ctx context.Context, receivedBefore, now time.Time, maxAttempts, limit int) ([]payment.InboxEvent, error) {
	return queryAll(ctx, db, scanEvent, `SELECT `+eventColumns+` FROM webhook_events
		WHERE state = 'received' AND updated_at <= $1
		   OR state = 'processing' AND lease_expires_at <= $2
		   OR state = 'failed' AND updated_at <= $1 AND attempts < $3
		ORDER BY updated_at LIMIT $4`, ms(receivedBefore), ms(now), maxAttempts, limit)
}

// ListEvents returns events newest first.
func (db *DB) ListEvents(ctx context.Context, f payment.EventFilter) ([]payment.InboxEvent, error) {
	query, args := `SELECT `+eventColumns+` FROM webhook_events`, []any{}
	if f.State != "" {
		query += ` WHERE state = $1`
		args = append(args, string(f.State))
	}
	query += fmt.Sprintf(` ORDER BY received_at DESC, event_id LIMIT $%d`, len(args)+1)
	return queryAll(ctx, db, scanEvent, query, append(args, f.Limit)...)
}

func scanEvent(row pgx.Row) (*payment.InboxEvent, error) {
	var (
		e                 payment.InboxEvent
		body              []byte
		state             string
		lease             *int64
		result, lastErr   *string
		received, updated int64
	)
	if err := row.Scan(&body, &state, &e.Attempts, &e.Fence, &lease, &result, &lastErr, &received, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &e.Event); err != nil {
		return nil, fmt.Errorf("decode stored event: %w", err)
	}
	e.State, e.LeaseExpiresAt = payment.EventState(state), fromMS(lease)
	e.Result, e.LastError = deref(result), deref(lastErr)
	e.ReceivedAt, e.UpdatedAt = time.UnixMilli(received).UTC(), time.UnixMilli(updated).UTC()
	return &e, nil
}

// PurgeEvents deletes up to limit final events (processed, ignored) last
// updated before before. An event still to be applied (received,
// processing, failed) is never deleted. Rows another instance's purge is
// deleting are skipped, not waited for.
func (db *DB) PurgeEvents(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	start := time.Now()
	n, err := db.exec(ctx, `DELETE FROM webhook_events WHERE (provider, event_id) IN (
		SELECT provider, event_id FROM webhook_events
		WHERE state IN ('processed', 'ignored') AND updated_at < $1
		LIMIT $2 FOR UPDATE SKIP LOCKED)`, ms(before), limit)
	return int(n), time.Since(start), err
}
