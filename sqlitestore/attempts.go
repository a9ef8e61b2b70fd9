package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
)

var _ payment.Store = (*DB)(nil)

// Claim inserts a unless its (scope, idempotency_key) is taken or expired;
// the rows affected decide ownership, never a read. The payment or refund a
// makes is created in the same transaction (payments.go).
func (db *DB) Claim(ctx context.Context, a *payment.Attempt) (claimed bool, err error) {
	c := *a
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		c = *a // a write is run once, but start from the caller's attempt all the same
		res, err := tx.StmtContext(ctx, db.stmt.claim).ExecContext(ctx,
			c.Scope, c.Key, c.ID, c.RequestHash, c.Request, c.Amount, c.Currency,
			c.Status, c.Fence, ms(c.LeaseExpiresAt), ms(c.CreatedAt), ms(c.UpdatedAt),
			c.Kind, nullString(c.PaymentID), c.Details, payment.KeyHash(c.Key), nullString(c.Provider))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err == nil {
				err = db.refuseExpiredKey(ctx, tx, &c)
			}
			return err // nil: a duplicate, and the caller reads the row that holds the key
		}
		if c.Kind == payment.KindRefund {
			err = createRefund(ctx, tx, &c)
		} else {
			err = db.createPayment(ctx, tx, &c)
		}
		claimed = err == nil
		return err
	})
	if err != nil {
		return false, err
	}
	*a = c
	return claimed, nil
}

// TakeOver moves an abandoned attempt to a new owner: one guarded UPDATE, so
// of two retries racing for it exactly one wins.
func (db *DB) TakeOver(ctx context.Context, scope, key string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error) {
	n, err := db.exec(ctx, db.stmt.takeOver, nil, ms(leaseUntil), ms(now), scope, key, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// Record stores the final outcome, guarded by the owner's fence: a late
// owner cannot overwrite what a takeover or reconcile wrote. A payment's
// record is one statement, whose trigger settles the payment row, and the
// insert of its event; a refund's settles the refund and its payment's
// reservation too. Each is one write, so one transaction.
func (db *DB) Record(ctx context.Context, kind payment.Kind, scope, key string, fence int64, o payment.Outcome, now time.Time) (ok bool, err error) {
	args := []any{o.Status, o.ResponseStatus, o.ResponseBody, nullString(o.ChargeID), nullString(o.FailureCode), ms(now), scope, key, fence}
	switch kind {
	case payment.KindPayment:
		if o.Event == nil {
			n, err := db.exec(ctx, db.stmt.recordPayment, func(n int64) {
				if n == 1 {
					crashpoint.Hit("in-record") // written, not yet committed
				}
			}, args...)
			return n == 1 && err == nil, err
		}
	case payment.KindRefund:
	default:
		return false, fmt.Errorf("record %q: unknown kind %q", key, kind)
	}
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ok = false
		if kind == payment.KindPayment {
			res, err := tx.StmtContext(ctx, db.stmt.recordPayment).ExecContext(ctx, args...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				return err // fenced out
			}
		} else {
			var (
				id, paymentID string
				amount        int64
			)
			err := tx.StmtContext(ctx, db.stmt.recordRefund).QueryRowContext(ctx, args...).Scan(&id, &paymentID, &amount)
			if errors.Is(err, sql.ErrNoRows) {
				return nil // fenced out
			}
			if err != nil {
				return err
			}
			if err := settleRefund(ctx, tx, id, paymentID, amount, o, now); err != nil {
				return err
			}
		}
		if err := db.insertEvent(ctx, tx, o.Event); err != nil {
			return err
		}
		ok = true
		crashpoint.Hit("in-record") // written, not yet committed
		return nil
	})
	return ok && err == nil, err
}

// Release drops the owner's lease so that a retry can take over at once.
func (db *DB) Release(ctx context.Context, scope, key string, fence int64, now time.Time) error {
	_, err := db.exec(ctx, db.stmt.release, nil, ms(now), scope, key, fence)
	return err
}

const attemptColumns = `scope, idempotency_key, id, request_hash, request, amount, currency,
	status, fence, lease_expires_at, response_status, response_body, charge_id,
	failure_code, created_at, updated_at, kind, payment_id, details, provider`

// Attempt returns the attempt for (scope, key). It reads from the read pool:
// a replay never waits for the writer.
func (db *DB) Attempt(ctx context.Context, scope, key string) (*payment.Attempt, error) {
	return attemptOrNotFound(scanAttempt(db.stmt.attempt.QueryRowContext(ctx, scope, key)))
}

// Answer returns what a duplicate of (scope, key) is decided by: five
// columns, not sixteen, from the read pool, or from memory once final.
func (db *DB) Answer(ctx context.Context, scope, key string) (*payment.Answer, error) {
	cached, gen, err := db.answers.Get(ctx, scope, key)
	if cached != nil || err != nil {
		return cached, mapErr(err)
	}
	var (
		a                 payment.Answer
		lease, respStatus sql.NullInt64
	)
	err = db.stmt.answer.QueryRowContext(ctx, scope, key).Scan(&a.RequestHash, &a.Status, &lease, &respStatus, &a.ResponseBody)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such payment.")
	}
	if err != nil {
		return nil, mapErr(err)
	}
	a.LeaseExpiresAt, a.ResponseStatus = fromMS(lease), int(respStatus.Int64)
	db.answers.Put(gen, scope, key, &a)
	return &a, nil
}

// AttemptByID returns the attempt with payment id id, within scope only.
func (db *DB) AttemptByID(ctx context.Context, scope, id string) (*payment.Attempt, error) {
	return db.queryAttempt(ctx, `SELECT `+attemptColumns+` FROM payment_attempts
		WHERE id = ? AND scope = ?`, id, scope)
}

func (db *DB) queryAttempt(ctx context.Context, query string, args ...any) (*payment.Attempt, error) {
	return attemptOrNotFound(scanAttempt(db.r.QueryRowContext(ctx, query, args...)))
}

func attemptOrNotFound(a *payment.Attempt, err error) (*payment.Attempt, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.ErrNoPayment()
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return a, nil
}

type scanner interface{ Scan(dest ...any) error }

// queryAll runs query on pool and scans every row with scan.
func queryAll[T any](ctx context.Context, pool *sql.DB, scan func(scanner) (*T, error), query string, args ...any) ([]T, error) {
	rows, err := pool.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	return scanRows(rows, scan)
}

// scanRows scans every row of rows with scan, and closes rows.
func scanRows[T any](rows *sql.Rows, scan func(scanner) (*T, error)) ([]T, error) {
	defer rows.Close()
	var all []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		all = append(all, *v)
	}
	return all, mapErr(rows.Err())
}

func scanAttempt(row scanner) (*payment.Attempt, error) {
	var (
		a                 payment.Attempt
		lease, respStatus sql.NullInt64
		created, updated  int64
		chargeID, failure sql.NullString
		paymentID, prov   sql.NullString
	)
	err := row.Scan(&a.Scope, &a.Key, &a.ID, &a.RequestHash, &a.Request, &a.Amount, &a.Currency,
		&a.Status, &a.Fence, &lease, &respStatus, &a.ResponseBody, &chargeID,
		&failure, &created, &updated, &a.Kind, &paymentID, &a.Details, &prov)
	if err != nil {
		return nil, err
	}
	a.LeaseExpiresAt = fromMS(lease)
	a.ResponseStatus = int(respStatus.Int64)
	a.ChargeID, a.FailureCode, a.PaymentID, a.Provider = chargeID.String, failure.String, paymentID.String, prov.String
	a.CreatedAt, a.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &a, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Counts returns how many attempts are in each status.
func (db *DB) Counts(ctx context.Context) (map[payment.Status]int, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT status, count(*) FROM payment_attempts GROUP BY status`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	counts := map[payment.Status]int{}
	for rows.Next() {
		var (
			s payment.Status
			n int
		)
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		counts[s] = n
	}
	return counts, mapErr(rows.Err())
}

// Stale returns up to limit attempts still in progress, last updated at or
// before updatedBefore, holding no live lease at now, oldest first.
func (db *DB) Stale(ctx context.Context, updatedBefore, now time.Time, limit int) ([]payment.Attempt, error) {
	return queryAll(ctx, db.r, scanAttempt, `SELECT `+attemptColumns+` FROM payment_attempts
		WHERE status = 'in_progress' AND updated_at <= ?
		  AND (lease_expires_at IS NULL OR lease_expires_at <= ?)
		ORDER BY updated_at LIMIT ?`, ms(updatedBefore), ms(now), limit)
}

// CountStale counts what Stale would return without a limit.
func (db *DB) CountStale(ctx context.Context, updatedBefore, now time.Time) (int, error) {
	var n int
	err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM payment_attempts
		WHERE status = 'in_progress' AND updated_at <= ?
		  AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`, ms(updatedBefore), ms(now)).Scan(&n)
	return n, mapErr(err)
}

// Purge deletes up to limit final attempts last updated before before and
// returns how many it deleted and how long it held the writer, moving each
// key to expired_keys while its payment or refund is kept. Attempts in
// progress are never deleted. A purge that deleted any bumps the purge
// version (other processes' replay caches read it) and clears this
// process's replay cache once committed.
func (db *DB) Purge(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	var version int64
	n, held, err := db.purgeBatch(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		for _, stmt := range []string{
			`CREATE TEMP TABLE IF NOT EXISTS purged_attempts (id TEXT PRIMARY KEY)`,
			`DELETE FROM purged_attempts`,
		} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return 0, err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO purged_attempts SELECT id FROM payment_attempts
			WHERE status IN ('succeeded', 'failed', 'expired') AND updated_at < ? LIMIT ?`, ms(before), limit); err != nil {
			return 0, err
		}
		// The trigger payment_attempts_expire moves each key to expired_keys.
		res, err := tx.ExecContext(ctx, `DELETE FROM payment_attempts WHERE id IN (SELECT id FROM purged_attempts)`)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		if err != nil || n == 0 {
			return n, err
		}
		return n, tx.QueryRowContext(ctx, `INSERT INTO settings (name, value) VALUES ('purge_version', '1')
			ON CONFLICT (name) DO UPDATE SET value = CAST(value AS INTEGER) + 1
			RETURNING CAST(value AS INTEGER)`).Scan(&version)
	})
	if n > 0 { // committed, whatever giving its pages back did
		db.answers.Clear(version)
	}
	return n, held, err
}

// ReplayCacheStats returns what the replay cache did, for the metrics.
func (db *DB) ReplayCacheStats() replaycache.Stats { return db.answers.Stats() }

// purgeVersion is the number of purges that deleted attempts, for the
// replay caches of every process on this file.
func (db *DB) purgeVersion(ctx context.Context) (int64, error) {
	var v int64
	err := db.r.QueryRowContext(ctx, `SELECT CAST(value AS INTEGER) FROM settings WHERE name = 'purge_version'`).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// InProgress returns how many attempts are in progress and when the oldest
// was created (zero if none).
func (db *DB) InProgress(ctx context.Context) (n int, oldest time.Time, err error) {
	var min sql.NullInt64
	err = db.r.QueryRowContext(ctx, `SELECT count(*), min(created_at) FROM payment_attempts WHERE status = 'in_progress'`).Scan(&n, &min)
	return n, fromMS(min), mapErr(err)
}
