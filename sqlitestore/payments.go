package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// refuseExpiredKey fails the claim of a key whose record was purged while
// the payment or refund it made is still kept: the late retry of an old
// intent, which must never move money a second time, even at a provider
// that has forgotten the key too.
func (db *DB) refuseExpiredKey(ctx context.Context, tx *sql.Tx, a *payment.Attempt) error {
	var kind, id, paymentID string
	hash := payment.KeyHash(a.Key)
	err := tx.StmtContext(ctx, db.stmt.expiredKey).QueryRowContext(ctx, a.Scope, hash).Scan(&kind, &id, &paymentID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return payment.ExpiredKey(a, kind, id, paymentID)
}

func (db *DB) createPayment(ctx context.Context, tx *sql.Tx, a *payment.Attempt) error {
	_, err := tx.StmtContext(ctx, db.stmt.createPayment).ExecContext(ctx,
		a.ID, a.Scope, payment.KeyHash(a.Key), a.Amount, a.Currency, a.Status, a.Details, ms(a.CreatedAt), ms(a.UpdatedAt))
	return err
}

// createRefund reserves a's amount on its payment with one guarded UPDATE
// (check and reservation in one statement), so two refunds that together
// exceed the payment cannot both be reserved, then records the refund. An
// amount of 0 asks for all that is left, read first in this same write
// transaction. A refusal returns its error and the caller's savepoint
// undoes the claim: nothing is reserved and the key stays free.
func createRefund(ctx context.Context, tx *sql.Tx, a *payment.Attempt) error {
	if a.Amount == 0 {
		err := tx.QueryRowContext(ctx, `SELECT amount - amount_refunded - amount_reserved FROM payments
			WHERE id = ? AND scope = ?`, a.PaymentID, a.Scope).Scan(&a.Amount)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	err := tx.QueryRowContext(ctx, `UPDATE payments
		SET amount_reserved = amount_reserved + ?1, updated_at = ?2
		WHERE id = ?3 AND scope = ?4 AND status = 'succeeded' AND ?1 > 0
		  AND amount - amount_refunded - amount_reserved >= ?1
		RETURNING currency`, a.Amount, ms(a.CreatedAt), a.PaymentID, a.Scope).Scan(&a.Currency)
	if errors.Is(err, sql.ErrNoRows) {
		return refundRefusal(ctx, tx, a)
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payment_attempts SET amount = ?, currency = ?
		WHERE scope = ? AND idempotency_key = ?`, a.Amount, a.Currency, a.Scope, a.Key); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO refunds
		(id, scope, payment_id, key_hash, amount, currency, status, details, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.Scope, a.PaymentID, payment.KeyHash(a.Key), a.Amount, a.Currency, a.Status, a.Details,
		ms(a.CreatedAt), ms(a.UpdatedAt))
	return err
}

// refundRefusal says why the reservation of a refused: read after the
// guarded UPDATE matched nothing, only to word the answer.
func refundRefusal(ctx context.Context, tx *sql.Tx, a *payment.Attempt) error {
	var p payment.Payment
	err := tx.QueryRowContext(ctx, `SELECT status, amount, amount_refunded, amount_reserved FROM payments
		WHERE id = ? AND scope = ?`, a.PaymentID, a.Scope).Scan(&p.Status, &p.Amount, &p.AmountRefunded, &p.AmountReserved)
	if errors.Is(err, sql.ErrNoRows) {
		return payment.RefundRefused(a, nil)
	}
	if err != nil {
		return err
	}
	return payment.RefundRefused(a, &p)
}

// settleRefund copies a refund's final outcome to its row and turns its
// reservation into refunded money, or gives it back.
func settleRefund(ctx context.Context, tx *sql.Tx, id, paymentID string, amount int64, o payment.Outcome, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE refunds SET status = ?, provider_refund_id = ?, failure_code = ?, updated_at = ?
		WHERE id = ?`, o.Status, nullString(o.ChargeID), nullString(o.FailureCode), ms(now), id); err != nil {
		return err
	}
	refunded := int64(0)
	if o.Status == payment.Succeeded {
		refunded = amount
	}
	_, err := tx.ExecContext(ctx, `UPDATE payments
		SET amount_reserved = amount_reserved - ?, amount_refunded = amount_refunded + ?, updated_at = ?
		WHERE id = ?`, amount, refunded, ms(now), paymentID)
	return err
}

const paymentColumns = `p.id, p.scope, coalesce(a.idempotency_key, ''), p.key_hash, p.amount, p.currency, p.status,
	p.charge_id, p.failure_code, p.amount_refunded, p.amount_reserved, p.details, p.created_at, p.updated_at,
	p.dispute_id, p.dispute_status, p.dispute_reason, p.dispute_amount`

// Payment returns the payment id within scope, with its key while the key's
// record is kept.
func (db *DB) Payment(ctx context.Context, scope, id string) (*payment.Payment, error) {
	p, err := scanPayment(db.r.QueryRowContext(ctx, `SELECT `+paymentColumns+`
		FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id
		WHERE p.id = ? AND p.scope = ?`, id, scope))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such payment.")
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return p, nil
}

func scanPayment(row scanner) (*payment.Payment, error) {
	var (
		p                 payment.Payment
		chargeID, failure sql.NullString
		created, updated  int64
		dispute           disputeColumns
	)
	err := row.Scan(&p.ID, &p.Scope, &p.Key, &p.KeyHash, &p.Amount, &p.Currency,
		&p.Status, &chargeID, &failure, &p.AmountRefunded, &p.AmountReserved, &p.Details, &created, &updated,
		&dispute.id, &dispute.status, &dispute.reason, &dispute.amount)
	if err != nil {
		return nil, err
	}
	p.ChargeID, p.FailureCode, p.Dispute = chargeID.String, failure.String, dispute.dispute()
	p.CreatedAt, p.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &p, nil
}

const refundColumns = `r.id, r.scope, r.payment_id, coalesce(a.idempotency_key, ''),
	r.amount, r.currency, r.status, r.provider_refund_id, r.failure_code, r.details, r.created_at, r.updated_at`

// Refunds returns the refunds of payment paymentID within scope, oldest
// first.
func (db *DB) Refunds(ctx context.Context, scope, paymentID string) ([]payment.Refund, error) {
	return queryAll(ctx, db.r, scanRefund, `SELECT `+refundColumns+`
		FROM refunds r LEFT JOIN payment_attempts a ON a.id = r.id
		WHERE r.payment_id = ? AND r.scope = ? ORDER BY r.created_at, r.id`, paymentID, scope)
}

func scanRefund(row scanner) (*payment.Refund, error) {
	var r payment.Refund
	return &r, scanRefundInto(row, &r)
}

// scanRefundInto scans refundColumns into r, then extra columns into extra.
func scanRefundInto(row scanner, r *payment.Refund, extra ...any) error {
	var (
		provider, failure sql.NullString
		created, updated  int64
	)
	err := row.Scan(append([]any{&r.ID, &r.Scope, &r.PaymentID, &r.Key, &r.Amount, &r.Currency, &r.Status,
		&provider, &failure, &r.Details, &created, &updated}, extra...)...)
	if err != nil {
		return err
	}
	r.ProviderRefundID, r.FailureCode = provider.String, failure.String
	r.CreatedAt, r.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return nil
}

// PurgePayments deletes up to limit final payments last updated before
// before, with their refunds, once their key's record is gone and no
// refund of theirs is in progress.
func (db *DB) PurgePayments(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	return db.purgeBatch(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		const victims = `SELECT p.id FROM payments p
			WHERE p.rowid < ? AND p.status IN ('succeeded', 'failed', 'expired') AND p.updated_at < ? AND p.amount_reserved = 0
			  AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = p.id)
			  AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.payment_id = p.id AND r.status = 'in_progress')
			ORDER BY p.rowid LIMIT ?`
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS purged_payments (id TEXT PRIMARY KEY)`); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM purged_payments`); err != nil {
			return 0, err
		}
		// Rows are appended as payments are made: the old ones are below
		// the edge, and a batch reads from the oldest up, never the rest.
		edge, err := timeEdge(ctx, tx, "payments", ms(before))
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO purged_payments `+victims, edge, ms(before), limit); err != nil {
			return 0, err
		}
		// Their keys are forgotten with them: a retry of one is a new payment.
		if _, err := tx.ExecContext(ctx, `DELETE FROM expired_keys WHERE payment_id IN (SELECT id FROM purged_payments)`); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM refunds WHERE payment_id IN (SELECT id FROM purged_payments)`); err != nil {
			return 0, err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM payments WHERE id IN (SELECT id FROM purged_payments)`)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// ListPayments returns up to f.Limit+1 payments of f.Scope, newest first,
// by the index of (scope, id): ids lead with their time.
func (db *DB) ListPayments(ctx context.Context, f payment.PaymentFilter) ([]payment.Payment, error) {
	q, args := `SELECT `+paymentColumns+` FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id WHERE p.scope = ?`, []any{f.Scope}
	if f.Status != "" {
		q, args = q+` AND p.status = ?`, append(args, f.Status)
	}
	order := ` ORDER BY p.id DESC`
	switch {
	case f.StartingAfter != "":
		q, args = q+` AND p.id < ?`, append(args, f.StartingAfter)
	case f.EndingBefore != "":
		q, args, order = q+` AND p.id > ?`, append(args, f.EndingBefore), ` ORDER BY p.id`
	}
	ps, err := queryAll(ctx, db.r, scanPayment, q+order+` LIMIT ?`, append(args, f.Limit+1)...)
	if f.EndingBefore != "" {
		slices.Reverse(ps)
	}
	return ps, err
}

// disputeColumns scans a payment's dispute, NULL when it has none.
type disputeColumns struct {
	id, status, reason sql.NullString
	amount             sql.NullInt64
}

func (c disputeColumns) dispute() *payment.Dispute {
	if !c.id.Valid {
		return nil
	}
	return &payment.Dispute{ID: c.id.String, Status: c.status.String, Reason: c.reason.String, Amount: c.amount.Int64}
}

// PaymentByID returns the payment id in any scope.
func (db *DB) PaymentByID(ctx context.Context, id string) (*payment.Payment, error) {
	p, err := scanPayment(db.r.QueryRowContext(ctx, `SELECT `+paymentColumns+`
		FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id WHERE p.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such payment.")
	}
	return p, mapErr(err)
}

// RefundByID returns the refund id in any scope.
func (db *DB) RefundByID(ctx context.Context, id string) (*payment.Refund, error) {
	r, err := scanRefund(db.r.QueryRowContext(ctx, `SELECT `+refundColumns+`
		FROM refunds r LEFT JOIN payment_attempts a ON a.id = r.id WHERE r.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.Errorf(payment.ENOTFOUND, "No such refund.")
	}
	return r, mapErr(err)
}

// FailRefund moves a succeeded refund to failed and gives its amount back
// to its payment, with e, in one write: the guarded UPDATE (status still
// succeeded) decides, so of many racing only one moves the money back.
func (db *DB) FailRefund(ctx context.Context, scope, id, failureCode string, e *payment.OutboxEvent, now time.Time) (ok bool, err error) {
	return db.changeWithEvent(ctx, e, func(ctx context.Context, tx *sql.Tx) (bool, error) {
		var (
			paymentID string
			amount    int64
		)
		err := tx.QueryRowContext(ctx, `UPDATE refunds SET status = 'failed', failure_code = ?, updated_at = ?
			WHERE id = ? AND scope = ? AND status = 'succeeded'
			RETURNING payment_id, amount`, nullString(failureCode), ms(now), id, scope).Scan(&paymentID, &amount)
		if errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		_, err = tx.ExecContext(ctx, `UPDATE payments SET amount_refunded = amount_refunded - ?, updated_at = ?
			WHERE id = ? AND scope = ?`, amount, ms(now), paymentID, scope)
		return err == nil, err
	})
}

// changeWithEvent runs change in one write and, if it changed something,
// puts e in the outbox in that same write. It reports whether it did.
func (db *DB) changeWithEvent(ctx context.Context, e *payment.OutboxEvent, change func(ctx context.Context, tx *sql.Tx) (bool, error)) (ok bool, err error) {
	err = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ok = false // a write is run once, but start from nothing all the same
		changed, err := change(ctx, tx)
		if err != nil || !changed {
			return err
		}
		if err := db.insertEvent(ctx, tx, e); err != nil {
			return err
		}
		ok = true
		return nil
	})
	return ok && err == nil, err
}

// disputeChanges is the guard of SetDispute: the payment holds no dispute
// or another one, or this one, open, in another status.
const disputeChanges = `(dispute_id IS NULL OR dispute_id <> ?1
	OR dispute_status <> ?2 AND dispute_status NOT IN ('won', 'lost', 'warning_closed'))`

// SetDispute stores d on the payment, with e, if it changes what the
// payment holds.
func (db *DB) SetDispute(ctx context.Context, scope, id string, d payment.Dispute, e *payment.OutboxEvent, now time.Time) (ok bool, err error) {
	return db.changeWithEvent(ctx, e, func(ctx context.Context, tx *sql.Tx) (bool, error) {
		res, err := tx.ExecContext(ctx, `UPDATE payments
			SET dispute_id = ?1, dispute_status = ?2, dispute_reason = ?3, dispute_amount = ?4, updated_at = ?5
			WHERE id = ?6 AND scope = ?7 AND `+disputeChanges, d.ID, d.Status, nullString(d.Reason), d.Amount, ms(now), id, scope)
		if err != nil {
			return false, err
		}
		n, err := res.RowsAffected()
		return n > 0, err
	})
}
