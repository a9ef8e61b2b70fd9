package sim

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// refundSchema is the ledger of refunds, deduped by key as charges are: a
// key's first refund is copy 0; with dedupe off each further call is the
// next copy. Like a bank, the sim never refunds more than was charged.
const refundSchema = `CREATE TABLE IF NOT EXISTS sim_refunds (
	idempotency_key TEXT NOT NULL,
	copy            INTEGER NOT NULL DEFAULT 0,
	id              TEXT NOT NULL UNIQUE,
	charge_id       TEXT NOT NULL,
	amount          INTEGER NOT NULL,
	currency        TEXT NOT NULL,
	params_hash     TEXT NOT NULL,
	created_at      INTEGER NOT NULL, -- unix ms
	-- Added later (createLedger adds them to an older ledger):
	status          TEXT NOT NULL DEFAULT 'succeeded', -- or 'failed': the bank returned it
	refund_id       TEXT,             -- the caller's name of the refund, carried in events
	payment_id      TEXT,             -- the caller's name of the payment
	failure_code    TEXT,             -- why it failed
	PRIMARY KEY (idempotency_key, copy)
)`

// disputeSchema is the ledger of disputes: a cardholder's dispute of a
// charge, open until closed won or lost.
const disputeSchema = `CREATE TABLE IF NOT EXISTS sim_disputes (
	id         TEXT PRIMARY KEY,
	charge_id  TEXT NOT NULL,
	amount     INTEGER NOT NULL,
	currency   TEXT NOT NULL,
	reason     TEXT NOT NULL,
	status     TEXT NOT NULL, -- needs_response, then won or lost
	created_at INTEGER NOT NULL -- unix ms
)`

// errNoSuchCharge is the bank's refusal of a refund of a charge it never
// made; nothing was refunded.
var errNoSuchCharge = &payment.DeclineError{Code: "charge_not_found", Message: "No such charge."}

// Refund gives back part of a charge once per idempotency key. It
// implements payment.Provider. The fault knobs of charges apply: a failure
// before refunding, a response lost after refunding, no dedupe.
func (s *Sim) Refund(ctx context.Context, req payment.ProviderRefundRequest) (payment.ProviderRefund, error) {
	f, err := s.arrive(ctx, req.IdempotencyKey, opRefund)
	if err != nil {
		return payment.ProviderRefund{}, err
	}
	if req.IdempotencyKey == "" || len(req.IdempotencyKey) > 255 || req.Amount <= 0 || req.ChargeID == "" {
		return payment.ProviderRefund{}, fmt.Errorf("%w: a refund needs a key, a charge and a positive amount", ErrInvalidRequest)
	}
	if roll(f.FailBeforeCharge) {
		return payment.ProviderRefund{}, ErrFailedBeforeCharge
	}
	hash := refundHash(req)
	r := payment.ProviderRefund{
		ID:             "re_sim_" + strings.ToLower(crand.Text()[:20]),
		IdempotencyKey: req.IdempotencyKey,
		ChargeID:       req.ChargeID,
		Amount:         req.Amount,
		Currency:       req.Currency,
		CreatedAt:      time.UnixMilli(time.Now().UnixMilli()).UTC(),
	}
	var (
		declined error
		made     bool // a new refund, not a replay
	)
	err = s.writer.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if !f.NoDedupe {
			var stored string
			var ms int64
			err := tx.QueryRowContext(ctx, `SELECT id, charge_id, amount, currency, params_hash, created_at FROM sim_refunds
				WHERE idempotency_key = ? ORDER BY copy LIMIT 1`, req.IdempotencyKey).Scan(&r.ID, &r.ChargeID, &r.Amount, &r.Currency, &stored, &ms)
			if err == nil {
				r.CreatedAt = time.UnixMilli(ms).UTC()
				if stored != hash {
					declined = ErrKeyMismatch
				}
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var charged, refunded int64
		var currency string
		err := tx.QueryRowContext(ctx, `SELECT amount, currency,
			(SELECT coalesce(sum(amount), 0) FROM sim_refunds WHERE charge_id = ?1 AND status <> 'failed')
			FROM sim_charges WHERE id = ?1`, req.ChargeID).Scan(&charged, &currency, &refunded)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			declined = errNoSuchCharge
			return nil
		case err != nil:
			return err
		case currency != req.Currency || refunded+req.Amount > charged && !f.NoRefundLimit:
			declined = &payment.DeclineError{Code: "amount_too_large",
				Message: fmt.Sprintf("The charge has %d %s left to refund.", charged-refunded, currency)}
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO sim_refunds
			(idempotency_key, id, charge_id, amount, currency, params_hash, created_at, refund_id, payment_id, copy)
			VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, (SELECT coalesce(max(copy) + 1, 0) FROM sim_refunds WHERE idempotency_key = ?1))`,
			r.IdempotencyKey, r.ID, r.ChargeID, r.Amount, r.Currency, hash, r.CreatedAt.UnixMilli(), req.RefundID, req.PaymentID)
		made = err == nil
		return err
	})
	if err != nil {
		return payment.ProviderRefund{}, fmt.Errorf("sim: record refund: %w", err)
	}
	if declined != nil {
		return payment.ProviderRefund{}, declined
	}
	if made {
		s.emitRefund(EventRefundSucceeded, r, req.RefundID, req.PaymentID, "")
		if roll(f.FailRefundLater) {
			// The bank takes the refund, answers, then returns it: the
			// caller is told it succeeded, and learns otherwise from the
			// refund.failed event (or a lookup).
			defer func() {
				if _, err := s.FailRefund(context.WithoutCancel(ctx), r.ID, ReturnedCode); err != nil {
					slog.Error("sim: fail refund later", "refund", r.ID, "err", err)
				}
			}()
		}
	}
	if roll(f.FailAfterCharge) {
		return payment.ProviderRefund{}, ErrLostResponse
	}
	return r, nil
}

// LookupRefund reports the refund made under key, if any. It implements
// payment.Provider.
func (s *Sim) LookupRefund(ctx context.Context, req payment.RefundLookup) (payment.ProviderRefund, bool, error) {
	if err := s.arriveLookup(ctx, req.IdempotencyKey, opRefundLookup); err != nil {
		return payment.ProviderRefund{}, false, err
	}
	r := payment.ProviderRefund{IdempotencyKey: req.IdempotencyKey}
	var (
		ms   int64
		code sql.NullString
	)
	err := s.read.QueryRowContext(ctx, `SELECT id, charge_id, amount, currency, created_at, status, failure_code FROM sim_refunds
		WHERE idempotency_key = ? ORDER BY copy LIMIT 1`, req.IdempotencyKey).Scan(&r.ID, &r.ChargeID, &r.Amount, &r.Currency, &ms, &r.Status, &code)
	if errors.Is(err, sql.ErrNoRows) {
		return payment.ProviderRefund{}, false, nil
	}
	if err != nil {
		return payment.ProviderRefund{}, false, fmt.Errorf("sim: read refund: %w", err)
	}
	if r.Status == refundFailed { // it gave nothing back, as Stripe's failed refund
		return payment.ProviderRefund{}, false, &payment.DeclineError{Code: code.String, Message: "The bank returned the refund; nothing was given back."}
	}
	r.CreatedAt = time.UnixMilli(ms).UTC()
	return r, true, nil
}

// Refund statuses in the ledger.
const (
	refundSucceeded = "succeeded"
	refundFailed    = "failed"
)

// ReturnedCode is the failure code of a refund the bank returned after it
// succeeded (FailRefund's default, and the fail_refund_later knob's).
const ReturnedCode = "refund_returned"

// ErrNoRefund is FailRefund's answer for a refund the ledger does not hold.
var ErrNoRefund = errors.New("sim: no such refund")

// FailRefund makes the bank fail the refund id after it succeeded, with
// code (ReturnedCode if empty): the ledger shows it failed, its amount is
// refundable again, a lookup under its key answers a decline, and a
// refund.failed event is sent. A refund failed already is left as it is,
// and no second event is sent. It returns the refund as it now stands.
func (s *Sim) FailRefund(ctx context.Context, id, code string) (payment.ProviderRefund, error) {
	if code == "" {
		code = ReturnedCode
	}
	var (
		r                   payment.ProviderRefund
		refundID, paymentID sql.NullString
		changed             bool
	)
	err := s.writer.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sim_refunds SET status = 'failed', failure_code = ? WHERE id = ? AND status = 'succeeded'`, code, id)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed = n == 1
		if err != nil {
			return err
		}
		var ms int64
		err = tx.QueryRowContext(ctx, `SELECT id, idempotency_key, charge_id, amount, currency, created_at, status, refund_id, payment_id
			FROM sim_refunds WHERE id = ?`, id).Scan(&r.ID, &r.IdempotencyKey, &r.ChargeID, &r.Amount, &r.Currency, &ms, &r.Status, &refundID, &paymentID)
		r.CreatedAt = time.UnixMilli(ms).UTC()
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return payment.ProviderRefund{}, ErrNoRefund
	}
	if err != nil {
		return payment.ProviderRefund{}, fmt.Errorf("sim: fail refund: %w", err)
	}
	if changed {
		s.emitRefund(EventRefundFailed, r, refundID.String, paymentID.String, code)
	}
	return r, nil
}

// Refunds returns every refund in the ledger, oldest first, with its
// status: a failed one gave nothing back.
func (s *Sim) Refunds(ctx context.Context) ([]payment.ProviderRefund, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id, idempotency_key, charge_id, amount, currency, created_at, status
		FROM sim_refunds ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("sim: read refunds: %w", err)
	}
	defer rows.Close()
	all := []payment.ProviderRefund{}
	for rows.Next() {
		var r payment.ProviderRefund
		var ms int64
		if err := rows.Scan(&r.ID, &r.IdempotencyKey, &r.ChargeID, &r.Amount, &r.Currency, &ms, &r.Status); err != nil {
			return nil, fmt.Errorf("sim: read refunds: %w", err)
		}
		r.CreatedAt = time.UnixMilli(ms).UTC()
		all = append(all, r)
	}
	return all, rows.Err()
}

func refundHash(req payment.ProviderRefundRequest) string {
	b, _ := json.Marshal([]any{req.ChargeID, req.Amount, req.Currency}) // cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
