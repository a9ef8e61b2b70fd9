package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/oncepay/oncepay/internal/crashpoint"
	"github.com/oncepay/oncepay/payment"
)

var _ payment.QueueStore = (*DB)(nil)

// SetOfflineLimits sets scope's limits for payments taken while the provider
// cannot be reached; nil turns them off.
func (db *DB) SetOfflineLimits(ctx context.Context, scope string, l *payment.OfflineLimits) error {
	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if l == nil {
			_, err := tx.ExecContext(ctx, `DELETE FROM offline_limits WHERE scope = ?`, scope)
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO offline_limits (scope, max_amount, max_total, max_age_ms, updated_at)
			VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (scope) DO UPDATE SET max_amount = excluded.max_amount, max_total = excluded.max_total,
				max_age_ms = excluded.max_age_ms, updated_at = excluded.updated_at`,
			scope, l.MaxAmount, l.MaxTotal, l.MaxAge.Milliseconds(), ms(time.Now()))
		return err
	})
}

// OfflineLimits returns scope's limits, nil when offline payments are off.
func (db *DB) OfflineLimits(ctx context.Context, scope string) (*payment.OfflineLimits, error) {
	var l payment.OfflineLimits
	var age int64
	err := db.r.QueryRowContext(ctx, `SELECT max_amount, max_total, max_age_ms FROM offline_limits WHERE scope = ?`, scope).
		Scan(&l.MaxAmount, &l.MaxTotal, &age)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, mapErr(err)
	}
	l.MaxAge = time.Duration(age) * time.Millisecond
	return &l, nil
}

// AllOfflineLimits returns every scope's limits.
func (db *DB) AllOfflineLimits(ctx context.Context) (map[string]payment.OfflineLimits, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT scope, max_amount, max_total, max_age_ms FROM offline_limits`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	all := map[string]payment.OfflineLimits{}
	for rows.Next() {
		var (
			scope string
			l     payment.OfflineLimits
			age   int64
		)
		if err := rows.Scan(&scope, &l.MaxAmount, &l.MaxTotal, &age); err != nil {
			return nil, err
		}
		l.MaxAge = time.Duration(age) * time.Millisecond
		all[scope] = l
	}
	return all, mapErr(rows.Err())
}

// Queue records the 202 of a queued payment and puts it in the forward
// queue, if it fits the merchant's limits: one transaction of the one
// writer, so two payments cannot both fit a total that holds only one.
func (db *DB) Queue(ctx context.Context, scope, key string, fence int64, o payment.Outcome, reached bool, now time.Time) (v payment.QueueVerdict, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var (
			id, currency                string
			amount, created             int64
			maxAmount, maxTotal, maxAge int64
			queuedTotal                 int64
		)
		err := tx.QueryRowContext(ctx, `SELECT max_amount, max_total, max_age_ms FROM offline_limits WHERE scope = ?`, scope).
			Scan(&maxAmount, &maxTotal, &maxAge)
		if errors.Is(err, sql.ErrNoRows) {
			v = payment.QueueOff
			return nil
		}
		if err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, `SELECT id, amount, currency, created_at FROM payment_attempts
			WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ? AND kind = 'payment'`,
			scope, key, fence).Scan(&id, &amount, &currency, &created)
		if errors.Is(err, sql.ErrNoRows) {
			v = payment.QueueFenced
			return nil
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(amount), 0) FROM forward_queue WHERE scope = ? AND currency = ?`,
			scope, currency).Scan(&queuedTotal); err != nil {
			return err
		}
		expires := created + maxAge
		if v = payment.OfflineVerdict(amount, queuedTotal, maxAmount, maxTotal, ms(now) >= expires); v != payment.QueueAccepted {
			return nil
		}
		// The trigger payment_attempts_settle makes the payment queued.
		if _, err := tx.ExecContext(ctx, `UPDATE payment_attempts
			SET status = 'queued', response_status = ?, response_body = ?, lease_expires_at = NULL, updated_at = ?
			WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ?`,
			o.ResponseStatus, o.ResponseBody, ms(now), scope, key, fence); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO forward_queue
			(payment_id, scope, idempotency_key, amount, currency, fence, tries, reached, queued_at, expires_at)
			VALUES (?, ?, ?, ?, ?, 1, 0, ?, ?, ?)`,
			id, scope, key, amount, currency, reached, ms(now), expires); err != nil {
			return err
		}
		return db.insertEvent(ctx, tx, o.Event)
	})
	return v, err
}

const forwardColumns = `payment_id, scope, idempotency_key, amount, currency, fence, lease_expires_at,
	tries, reached, coalesce(last_error, ''), queued_at, expires_at`

func scanForward(row scanner) (*payment.Forward, error) {
	var (
		f               payment.Forward
		lease           sql.NullInt64
		queued, expires int64
	)
	err := row.Scan(&f.PaymentID, &f.Scope, &f.Key, &f.Amount, &f.Currency, &f.Fence, &lease,
		&f.Tries, &f.Reached, &f.LastError, &queued, &expires)
	f.LeaseExpiresAt = fromMS(lease)
	f.QueuedAt, f.ExpiresAt = time.UnixMilli(queued).UTC(), time.UnixMilli(expires).UTC()
	return &f, err
}

// DueForwards returns up to limit queued payments no forwarder holds at
// now, oldest first.
func (db *DB) DueForwards(ctx context.Context, now time.Time, limit int) ([]payment.Forward, error) {
	return queryAll(ctx, db.r, scanForward, `SELECT `+forwardColumns+` FROM forward_queue
		WHERE lease_expires_at IS NULL OR lease_expires_at <= ?
		ORDER BY queued_at, payment_id LIMIT ?`, ms(now), limit)
}

// Forwards returns up to limit queued payments, oldest first.
func (db *DB) Forwards(ctx context.Context, limit int) ([]payment.Forward, error) {
	return queryAll(ctx, db.r, scanForward, `SELECT `+forwardColumns+` FROM forward_queue
		ORDER BY queued_at, payment_id LIMIT ?`, limit)
}

// ClaimForward gives a queued payment to one forwarder: of two racing for
// it, exactly one matches the guarded UPDATE.
func (db *DB) ClaimForward(ctx context.Context, paymentID string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.execSQL(ctx, `UPDATE forward_queue
		SET fence = fence + 1, lease_expires_at = ?, tries = tries + 1, reached = 1
		WHERE payment_id = ? AND fence = ? AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`,
		ms(leaseUntil), paymentID, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// ReleaseForward drops a forwarder's lease and notes its error.
func (db *DB) ReleaseForward(ctx context.Context, paymentID string, fence int64, lastErr string, now time.Time) error {
	_, err := db.execSQL(ctx, `UPDATE forward_queue SET lease_expires_at = NULL, last_error = ?
		WHERE payment_id = ? AND fence = ?`, payment.TruncateError(lastErr), paymentID, fence)
	return err
}

// Forwarded settles a queued payment under fence: out of the queue, and
// its attempt and payment final, in one transaction.
func (db *DB) Forwarded(ctx context.Context, paymentID string, fence int64, o payment.Outcome, now time.Time) (ok bool, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ok = false
		res, err := tx.ExecContext(ctx, `DELETE FROM forward_queue WHERE payment_id = ? AND fence = ?`, paymentID, fence)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // fenced out
		}
		args := []any{o.Status, nullString(o.ChargeID), nullString(o.FailureCode), ms(now), paymentID}
		if _, err := tx.ExecContext(ctx, `UPDATE payment_attempts SET status = ?, charge_id = ?, failure_code = ?, updated_at = ?
			WHERE id = ? AND status = 'queued'`, args...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, charge_id = ?, failure_code = ?, updated_at = ?
			WHERE id = ? AND status = 'queued'`, args...); err != nil {
			return err
		}
		if err := db.insertEvent(ctx, tx, o.Event); err != nil {
			return err
		}
		ok = true
		crashpoint.Hit("in-forwarded") // written, not yet committed
		return nil
	})
	return ok && err == nil, err
}

// QueueTotals returns the forward queue per currency.
func (db *DB) QueueTotals(ctx context.Context) ([]payment.QueueTotal, error) {
	return queryAll(ctx, db.r, func(s scanner) (*payment.QueueTotal, error) {
		var t payment.QueueTotal
		var oldest int64
		err := s.Scan(&t.Currency, &t.Count, &t.Amount, &oldest)
		t.Oldest = time.UnixMilli(oldest).UTC()
		return &t, err
	}, `SELECT currency, count(*), sum(amount), min(queued_at) FROM forward_queue GROUP BY currency ORDER BY currency`)
}

// execSQL runs one write statement through the writer and returns the
// rows it affected.
func (db *DB) execSQL(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}
