package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"

	"github.com/oncepay/oncepay/payment"
)

// Fill appends s's attempts, payments, refunds, inbox and outbox events in
// one transaction, and the keys of its payments and refunds that have no
// attempt in s to expired_keys, as the purge would have moved them: rows
// payment.Fill made, for oncepay bench fill. It checks nothing: it is for
// building a large database to measure, not for moving real payments.
func (db *DB) Fill(ctx context.Context, s *payment.Snapshot) error {
	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		kept := make(map[string]bool, len(s.Attempts))
		for _, a := range s.Attempts {
			kept[a.ID] = true
		}
		return fillRows(ctx, tx, s, kept)
	})
}

func fillRows(ctx context.Context, tx *sql.Tx, s *payment.Snapshot, kept map[string]bool) error {
	stmts := map[string]*sql.Stmt{}
	prep := func(q string) (*sql.Stmt, error) {
		if st, ok := stmts[q]; ok {
			return st, nil
		}
		st, err := tx.PrepareContext(ctx, q)
		stmts[q] = st
		return st, err
	}
	defer func() {
		for _, st := range stmts {
			if st != nil {
				st.Close()
			}
		}
	}()
	exec := func(q string, args ...any) error {
		st, err := prep(q)
		if err != nil {
			return err
		}
		_, err = st.ExecContext(ctx, args...)
		return err
	}
	for _, a := range s.Attempts {
		var respStatus sql.NullInt64
		if a.ResponseStatus != 0 {
			respStatus = sql.NullInt64{Int64: int64(a.ResponseStatus), Valid: true}
		}
		var lease sql.NullInt64
		if !a.LeaseExpiresAt.IsZero() {
			lease = sql.NullInt64{Int64: ms(a.LeaseExpiresAt), Valid: true}
		}
		if err := exec(`INSERT INTO payment_attempts (`+attemptColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			a.Scope, a.Key, a.ID, a.RequestHash, a.Request, a.Amount, a.Currency, a.Status, a.Fence, lease, respStatus,
			a.ResponseBody, nullString(a.ChargeID), nullString(a.FailureCode), ms(a.CreatedAt), ms(a.UpdatedAt),
			a.Kind, nullString(a.PaymentID), a.Details, nullString(a.Provider)); err != nil {
			return err
		}
	}
	for _, p := range s.Payments {
		if err := exec(`INSERT INTO payments (id, scope, key_hash, amount, currency, status, charge_id, failure_code,
			amount_refunded, amount_reserved, details, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.ID, p.Scope, p.KeyHash, p.Amount, p.Currency, p.Status, nullString(p.ChargeID), nullString(p.FailureCode),
			p.AmountRefunded, p.AmountReserved, p.Details, ms(p.CreatedAt), ms(p.UpdatedAt)); err != nil {
			return err
		}
		if !kept[p.ID] {
			if err := exec(`INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id) VALUES (?, ?, 'payment', ?, ?)`,
				p.Scope, p.KeyHash, p.ID, p.ID); err != nil {
				return err
			}
		}
	}
	for _, r := range s.Refunds {
		if err := exec(`INSERT INTO refunds (id, scope, payment_id, key_hash, amount, currency, status, provider_refund_id,
			failure_code, details, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.Scope, r.PaymentID, r.KeyHash, r.Amount, r.Currency, r.Status, nullString(r.ProviderRefundID),
			nullString(r.FailureCode), r.Details, ms(r.CreatedAt), ms(r.UpdatedAt)); err != nil {
			return err
		}
		if !kept[r.ID] {
			if err := exec(`INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id) VALUES (?, ?, 'refund', ?, ?)`,
				r.Scope, r.KeyHash, r.ID, r.PaymentID); err != nil {
				return err
			}
		}
	}
	for _, e := range s.Events {
		body, err := json.Marshal(e.Event)
		if err != nil {
			return err
		}
		if err := exec(`INSERT INTO webhook_events (provider, event_id, type, event, payment_id, state, attempts, fence,
			lease_expires_at, result, last_error, received_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?)`,
			e.Provider, e.ID, e.Type, body, nullString(e.PaymentID), e.State, e.Attempts, e.Fence,
			nullString(e.Result), nullString(e.LastError), ms(e.ReceivedAt), ms(e.UpdatedAt)); err != nil {
			return err
		}
	}
	for _, e := range s.Outbox {
		if err := exec(insertEventSQL, e.Scope, string(e.Type), e.ID, e.ObjectID, ms(e.CreatedAt), e.Body); err != nil {
			return err
		}
	}
	return nil
}
