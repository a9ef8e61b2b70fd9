package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// The SQL of sqlitestore/payments.go, statement for statement; what differs
// is said where it does.

// refuseExpiredKey fails the claim of a key whose record was purged while
// the payment or refund it made is still kept: the late retry of an old
// intent, which must never move money a second time.
func refuseExpiredKey(ctx context.Context, tx pgx.Tx, a *payment.Attempt) error {
	var kind, id, paymentID string
	hash := payment.KeyHash(a.Key)
	err := tx.QueryRow(ctx, expiredKeySQL, a.Scope, hash).Scan(&kind, &id, &paymentID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return payment.ExpiredKey(a, kind, id, paymentID)
}

// createRefund reserves a's amount on its payment with one guarded UPDATE:
// under READ COMMITTED, refunds racing on one payment queue on its row
// lock and each re-checks the guard on the row the one before it left, so
// together they never reserve more than the payment. An amount of 0 asks
// for all that is left: the row is locked while it is read (SQLite's one
// writer needs no lock), so no other refund changes it before the UPDATE.
// A refusal returns its error and the claim's transaction rolls back:
// nothing is reserved and the key stays free.
func createRefund(ctx context.Context, tx pgx.Tx, a *payment.Attempt) error {
	if a.Amount == 0 {
		err := tx.QueryRow(ctx, `SELECT amount - amount_refunded - amount_reserved FROM payments
			WHERE id = $1 AND scope = $2 FOR UPDATE`, a.PaymentID, a.Scope).Scan(&a.Amount)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	err := tx.QueryRow(ctx, `UPDATE payments
		SET amount_reserved = amount_reserved + $1, updated_at = $2
		WHERE id = $3 AND scope = $4 AND status = 'succeeded' AND $1 > 0
		  AND amount - amount_refunded - amount_reserved >= $1
		RETURNING currency`, a.Amount, ms(a.CreatedAt), a.PaymentID, a.Scope).Scan(&a.Currency)
	if errors.Is(err, pgx.ErrNoRows) {
		return refundRefusal(ctx, tx, a)
	}
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE payment_attempts SET amount = $1, currency = $2
		WHERE scope = $3 AND idempotency_key = $4`, a.Amount, a.Currency, a.Scope, a.Key); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO refunds
		(id, scope, payment_id, key_hash, amount, currency, status, details, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		a.ID, a.Scope, a.PaymentID, payment.KeyHash(a.Key), a.Amount, a.Currency, string(a.Status), a.Details,
		ms(a.CreatedAt), ms(a.UpdatedAt))
	return err
}

// refundRefusal says why the reservation of a refused: read after the
// guarded UPDATE matched nothing, only to word the answer.
func refundRefusal(ctx context.Context, tx pgx.Tx, a *payment.Attempt) error {
	var (
		status                     string
		amount, refunded, reserved int64
	)
	err := tx.QueryRow(ctx, `SELECT status, amount, amount_refunded, amount_reserved FROM payments
		WHERE id = $1 AND scope = $2`, a.PaymentID, a.Scope).Scan(&status, &amount, &refunded, &reserved)
	if errors.Is(err, pgx.ErrNoRows) {
		return payment.RefundRefused(a, nil)
	}
	if err != nil {
		return err
	}
	return payment.RefundRefused(a, &payment.Payment{Status: payment.Status(status), Amount: amount, AmountRefunded: refunded, AmountReserved: reserved})
}

// settleRefund copies a refund's final outcome to its row and turns its
// reservation into refunded money, or gives it back.
func settleRefund(ctx context.Context, tx pgx.Tx, id, paymentID string, amount int64, o payment.Outcome, now time.Time) error {
	if _, err := tx.Exec(ctx, `UPDATE refunds SET status = $1, provider_refund_id = $2, failure_code = $3, updated_at = $4
		WHERE id = $5`, string(o.Status), nullString(o.ChargeID), nullString(o.FailureCode), ms(now), id); err != nil {
		return err
	}
	refunded := int64(0)
	if o.Status == payment.Succeeded {
		refunded = amount
	}
	_, err := tx.Exec(ctx, `UPDATE payments
		SET amount_reserved = amount_reserved - $1, amount_refunded = amount_refunded + $2, updated_at = $3
		WHERE id = $4`, amount, refunded, ms(now), paymentID)
	return err
}

const paymentColumns = `p.id, p.scope, coalesce(a.idempotency_key, ''), p.key_hash, p.amount, p.currency, p.status,
	p.charge_id, p.failure_code, p.amount_refunded, p.amount_reserved, p.details, p.created_at, p.updated_at,
	p.dispute_id, p.dispute_status, p.dispute_reason, p.dispute_amount`

// Payment returns the payment id within scope, with its key while the key's
// record is kept.
func (db *DB) Payment(ctx context.Context, scope, id string) (*payment.Payment, error) {
	p, err := scanPayment(db.pool.QueryRow(ctx, `SELECT `+paymentColumns+`
		FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id
		WHERE p.id = $1 AND p.scope = $2`, id, scope))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.ErrNoPayment()
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return p, nil
}

func scanPayment(row pgx.Row) (*payment.Payment, error) {
	var (
		p                     payment.Payment
		status                string
		chargeID, failure     *string
		created, updated      int64
		dID, dStatus, dReason *string
		dAmount               *int64
	)
	if err := row.Scan(&p.ID, &p.Scope, &p.Key, &p.KeyHash, &p.Amount, &p.Currency,
		&status, &chargeID, &failure, &p.AmountRefunded, &p.AmountReserved, &p.Details, &created, &updated,
		&dID, &dStatus, &dReason, &dAmount); err != nil {
		return nil, err
	}
	p.Status, p.ChargeID, p.FailureCode = payment.Status(status), deref(chargeID), deref(failure)
	if dID != nil {
		p.Dispute = &payment.Dispute{ID: *dID, Status: deref(dStatus), Reason: deref(dReason)}
		if dAmount != nil {
			p.Dispute.Amount = *dAmount
		}
	}
	p.CreatedAt, p.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &p, nil
}

// ListPayments returns up to f.Limit+1 payments of f.Scope, newest first,
// by the index of (scope, id): ids lead with their time.
func (db *DB) ListPayments(ctx context.Context, f payment.PaymentFilter) ([]payment.Payment, error) {
	q, args := `SELECT `+paymentColumns+` FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id WHERE p.scope = $1`, []any{f.Scope}
	if f.Status != "" {
		args = append(args, string(f.Status))
		q += fmt.Sprintf(` AND p.status = $%d`, len(args))
	}
	order := ` ORDER BY p.id DESC`
	switch {
	case f.StartingAfter != "":
		args = append(args, f.StartingAfter)
		q += fmt.Sprintf(` AND p.id < $%d`, len(args))
	case f.EndingBefore != "":
		args = append(args, f.EndingBefore)
		q, order = q+fmt.Sprintf(` AND p.id > $%d`, len(args)), ` ORDER BY p.id`
	}
	args = append(args, f.Limit+1)
	ps, err := queryAll(ctx, db, scanPayment, q+order+fmt.Sprintf(` LIMIT $%d`, len(args)), args...)
	if f.EndingBefore != "" {
		slices.Reverse(ps)
	}
	return ps, err
}

// Refunds returns the refunds of payment paymentID within scope, oldest
// first.
func (db *DB) Refunds(ctx context.Context, scope, paymentID string) ([]payment.Refund, error) {
	return queryAll(ctx, db, scanRefund, `SELECT `+refundColumns+`
		FROM refunds r LEFT JOIN payment_attempts a ON a.id = r.id
		WHERE r.payment_id = $1 AND r.scope = $2 ORDER BY r.created_at, r.id`, paymentID, scope)
}

const refundColumns = `r.id, r.scope, r.payment_id, coalesce(a.idempotency_key, ''),
	r.amount, r.currency, r.status, r.provider_refund_id, r.failure_code, r.details, r.created_at, r.updated_at`

func scanRefund(row pgx.Row) (*payment.Refund, error) {
	var (
		r                 payment.Refund
		status            string
		provider, failure *string
		created, updated  int64
	)
	err := row.Scan(&r.ID, &r.Scope, &r.PaymentID, &r.Key, &r.Amount, &r.Currency, &status,
		&provider, &failure, &r.Details, &created, &updated)
	if err != nil {
		return nil, err
	}
	r.Status, r.ProviderRefundID, r.FailureCode = payment.Status(status), deref(provider), deref(failure)
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &r, nil
}

// PurgePayments deletes up to limit final payments last updated before
// before, with their refunds, once their key's record is gone and no
// refund of theirs is in progress. The payments are locked as they are
// chosen, skipping any another instance's purge (or a refund's claim)
// holds: a refund reserving on a payment being purged waits, then finds
// no payment.
func (db *DB) PurgePayments(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	var n int64
	start := time.Now()
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT p.id FROM payments p
			WHERE p.created_at < $1 AND p.status IN ('succeeded', 'failed', 'expired') AND p.updated_at < $1 AND p.amount_reserved = 0
			  AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = p.id)
			  AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.payment_id = p.id AND r.status = 'in_progress')
			LIMIT $2 FOR UPDATE SKIP LOCKED`, ms(before), limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		// Their keys are forgotten with them (the foreign key of
		// expired_keys deletes them): a retry of one is a new payment.
		if _, err := tx.Exec(ctx, `DELETE FROM refunds WHERE payment_id = ANY($1)`, ids); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM payments WHERE id = ANY($1)`, ids)
		n = tag.RowsAffected()
		return err
	})
	return int(n), time.Since(start), mapErr(err)
}

// PaymentByID returns the payment id in any scope.
func (db *DB) PaymentByID(ctx context.Context, id string) (*payment.Payment, error) {
	p, err := scanPayment(db.pool.QueryRow(ctx, `SELECT `+paymentColumns+`
		FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id WHERE p.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.ErrNoPayment()
	}
	return p, mapErr(err)
}

// RefundByID returns the refund id in any scope.
func (db *DB) RefundByID(ctx context.Context, id string) (*payment.Refund, error) {
	r, err := scanRefund(db.pool.QueryRow(ctx, `SELECT `+refundColumns+`
		FROM refunds r LEFT JOIN payment_attempts a ON a.id = r.id WHERE r.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such refund.")
	}
	return r, mapErr(err)
}

// FailRefund moves a succeeded refund to failed and gives its amount back
// to its payment, with e, in one transaction. The guarded UPDATE decides:
// a racing one waits for the row, then finds it failed and matches nothing.
func (db *DB) FailRefund(ctx context.Context, scope, id, failureCode string, e *payment.OutboxEvent, now time.Time) (ok bool, err error) {
	return db.changeWithEvent(ctx, e, func(tx pgx.Tx) (bool, error) {
		var (
			paymentID string
			amount    int64
		)
		err := tx.QueryRow(ctx, `UPDATE refunds SET status = 'failed', failure_code = $1, updated_at = $2
			WHERE id = $3 AND scope = $4 AND status = 'succeeded'
			RETURNING payment_id, amount`, nullString(failureCode), ms(now), id, scope).Scan(&paymentID, &amount)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = tx.Exec(ctx, `UPDATE payments SET amount_refunded = amount_refunded - $1, updated_at = $2
			WHERE id = $3 AND scope = $4`, amount, ms(now), paymentID, scope)
		return err == nil, err
	})
}

// changeWithEvent runs change in one transaction and, if it changed
// something, puts e in the outbox in that same transaction. It reports
// whether it did.
func (db *DB) changeWithEvent(ctx context.Context, e *payment.OutboxEvent, change func(tx pgx.Tx) (bool, error)) (ok bool, err error) {
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		ok = false
		changed, err := change(tx)
		if err != nil || !changed {
			return err
		}
		if err := insertEvent(ctx, tx, e); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, mapErr(err)
	}
	return ok, nil
}

// SetDispute stores d on the payment, with e, if it changes what the
// payment holds: no dispute or another one, or this one, open, in another
// status. A closed one stays closed.
func (db *DB) SetDispute(ctx context.Context, scope, id string, d payment.Dispute, e *payment.OutboxEvent, now time.Time) (ok bool, err error) {
	return db.changeWithEvent(ctx, e, func(tx pgx.Tx) (bool, error) {
		tag, err := tx.Exec(ctx, `UPDATE payments
			SET dispute_id = $1, dispute_status = $2, dispute_reason = $3, dispute_amount = $4, updated_at = $5
			WHERE id = $6 AND scope = $7 AND (dispute_id IS NULL OR dispute_id <> $1
				OR dispute_status <> $2 AND dispute_status NOT IN ('won', 'lost', 'warning_closed'))`,
			d.ID, d.Status, nullString(d.Reason), d.Amount, ms(now), id, scope)
		return err == nil && tag.RowsAffected() > 0, err
	})
}
