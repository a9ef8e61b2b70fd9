package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/internal/crashpoint"
	"github.com/oncepay/oncepay/payment"
)

var _ payment.QueueStore = (*DB)(nil)

// SetOfflineLimits sets scope's limits for payments taken while the provider
// cannot be reached; nil turns them off.
func (db *DB) SetOfflineLimits(ctx context.Context, scope string, l *payment.OfflineLimits) error {
	if l == nil {
		_, err := db.exec(ctx, `DELETE FROM offline_limits WHERE scope = $1`, scope)
		return err
	}
	_, err := db.exec(ctx, `INSERT INTO offline_limits (scope, max_amount, max_total, max_age_ms, updated_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (scope) DO UPDATE SET max_amount = excluded.max_amount, max_total = excluded.max_total,
			max_age_ms = excluded.max_age_ms, updated_at = excluded.updated_at`,
		scope, l.MaxAmount, l.MaxTotal, l.MaxAge.Milliseconds(), ms(time.Now()))
	return err
}

func scanLimits(row pgx.Row, extra ...any) (*payment.OfflineLimits, error) {
	var l payment.OfflineLimits
	var age int64
	if err := row.Scan(append(extra, &l.MaxAmount, &l.MaxTotal, &age)...); err != nil {
		return nil, err
	}
	l.MaxAge = time.Duration(age) * time.Millisecond
	return &l, nil
}

// OfflineLimits returns scope's limits, nil when offline payments are off.
func (db *DB) OfflineLimits(ctx context.Context, scope string) (*payment.OfflineLimits, error) {
	l, err := scanLimits(db.pool.QueryRow(ctx, `SELECT max_amount, max_total, max_age_ms FROM offline_limits WHERE scope = $1`, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return l, mapErr(err)
}

// AllOfflineLimits returns every scope's limits.
func (db *DB) AllOfflineLimits(ctx context.Context) (map[string]payment.OfflineLimits, error) {
	rows, err := db.pool.Query(ctx, `SELECT scope, max_amount, max_total, max_age_ms FROM offline_limits`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	all := map[string]payment.OfflineLimits{}
	for rows.Next() {
		var scope string
		l, err := scanLimits(rows, &scope)
		if err != nil {
			return nil, mapErr(err)
		}
		all[scope] = *l
	}
	return all, mapErr(rows.Err())
}

// Queue records the 202 of a queued payment and puts it in the forward
// queue, if it fits the merchant's limits. The merchant's limits row is
// locked first (FOR UPDATE), so the queues of one merchant, whichever
// instance writes them, are summed one at a time: two payments cannot both
// fit a total that holds only one.
func (db *DB) Queue(ctx context.Context, scope, key string, fence int64, o payment.Outcome, reached bool, now time.Time) (v payment.QueueVerdict, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var (
			id, currency                string
			amount, created             int64
			maxAmount, maxTotal, maxAge int64
			queuedTotal                 int64
		)
		err := tx.QueryRow(ctx, `SELECT max_amount, max_total, max_age_ms FROM offline_limits WHERE scope = $1 FOR UPDATE`, scope).
			Scan(&maxAmount, &maxTotal, &maxAge)
		if errors.Is(err, pgx.ErrNoRows) {
			v = payment.QueueOff
			return nil
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT id, amount, currency, created_at FROM payment_attempts
			WHERE scope = $1 AND idempotency_key = $2 AND status = 'in_progress' AND fence = $3 AND kind = 'payment'
			FOR UPDATE`, scope, key, fence).Scan(&id, &amount, &currency, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			v = payment.QueueFenced
			return nil
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT coalesce(sum(amount), 0) FROM forward_queue WHERE scope = $1 AND currency = $2`,
			scope, currency).Scan(&queuedTotal); err != nil {
			return err
		}
		expires := created + maxAge
		if v = payment.OfflineVerdict(amount, queuedTotal, maxAmount, maxTotal, ms(now) >= expires); v != payment.QueueAccepted {
			return nil
		}
		if _, err := tx.Exec(ctx, `WITH a AS (UPDATE payment_attempts
				SET status = 'queued', response_status = $1, response_body = $2, lease_expires_at = NULL, updated_at = $3
				WHERE scope = $4 AND idempotency_key = $5 AND status = 'in_progress' AND fence = $6
				RETURNING id)
			UPDATE payments SET status = 'queued', updated_at = $3 FROM a WHERE payments.id = a.id`,
			o.ResponseStatus, o.ResponseBody, ms(now), scope, key, fence); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO forward_queue
			(payment_id, scope, idempotency_key, amount, currency, fence, tries, reached, queued_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, 1, 0, $6, $7, $8)`,
			id, scope, key, amount, currency, reached, ms(now), expires); err != nil {
			return err
		}
		return insertEvent(ctx, tx, o.Event)
	})
	return v, mapErr(err)
}

const forwardColumns = `payment_id, scope, idempotency_key, amount, currency, fence, lease_expires_at,
	tries, reached, coalesce(last_error, ''), queued_at, expires_at`

func scanForward(row pgx.Row) (*payment.Forward, error) {
	var (
		f               payment.Forward
		lease           *int64
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
	return queryAll(ctx, db, scanForward, `SELECT `+forwardColumns+` FROM forward_queue
		WHERE lease_expires_at IS NULL OR lease_expires_at <= $1
		ORDER BY queued_at, payment_id LIMIT $2`, ms(now), limit)
}

// Forwards returns up to limit queued payments, oldest first.
func (db *DB) Forwards(ctx context.Context, limit int) ([]payment.Forward, error) {
	return queryAll(ctx, db, scanForward, `SELECT `+forwardColumns+` FROM forward_queue
		ORDER BY queued_at, payment_id LIMIT $1`, limit)
}

// ClaimForward gives a queued payment to one forwarder, of any instance:
// of two racing for it, exactly one matches the guarded UPDATE.
func (db *DB) ClaimForward(ctx context.Context, paymentID string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	n, err := db.exec(ctx, `UPDATE forward_queue
		SET fence = fence + 1, lease_expires_at = $1, tries = tries + 1, reached = true
		WHERE payment_id = $2 AND fence = $3 AND (lease_expires_at IS NULL OR lease_expires_at <= $4)`,
		ms(leaseUntil), paymentID, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// ReleaseForward drops a forwarder's lease and notes its error.
func (db *DB) ReleaseForward(ctx context.Context, paymentID string, fence int64, lastErr string, now time.Time) error {
	_, err := db.exec(ctx, `UPDATE forward_queue SET lease_expires_at = NULL, last_error = $1
		WHERE payment_id = $2 AND fence = $3`, payment.TruncateError(lastErr), paymentID, fence)
	return err
}

// Forwarded settles a queued payment under fence: out of the queue, and
// its attempt and payment final, in one statement, and its event, in one
// transaction.
func (db *DB) Forwarded(ctx context.Context, paymentID string, fence int64, o payment.Outcome, now time.Time) (ok bool, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `WITH q AS (DELETE FROM forward_queue WHERE payment_id = $1 AND fence = $2 RETURNING payment_id),
			a AS (UPDATE payment_attempts SET status = $3, charge_id = $4, failure_code = $5, updated_at = $6
				FROM q WHERE payment_attempts.id = q.payment_id AND payment_attempts.status = 'queued')
			UPDATE payments SET status = $3, charge_id = $4, failure_code = $5, updated_at = $6
			FROM q WHERE payments.id = q.payment_id AND payments.status = 'queued'`,
			paymentID, fence, string(o.Status), nullString(o.ChargeID), nullString(o.FailureCode), ms(now))
		if err != nil || tag.RowsAffected() == 0 {
			return err // fenced out
		}
		if err := insertEvent(ctx, tx, o.Event); err != nil {
			return err
		}
		ok = true
		crashpoint.Hit("in-forwarded") // written, not yet committed
		return nil
	})
	return ok && err == nil, mapErr(err)
}

// QueueTotals returns the forward queue per currency.
func (db *DB) QueueTotals(ctx context.Context) ([]payment.QueueTotal, error) {
	return queryAll(ctx, db, func(row pgx.Row) (*payment.QueueTotal, error) {
		var t payment.QueueTotal
		var oldest int64
		err := row.Scan(&t.Currency, &t.Count, &t.Amount, &oldest)
		t.Oldest = time.UnixMilli(oldest).UTC()
		return &t, err
	}, `SELECT currency, count(*), sum(amount)::bigint, min(queued_at) FROM forward_queue GROUP BY currency ORDER BY currency`)
}
