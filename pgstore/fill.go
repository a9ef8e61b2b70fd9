package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// Fill appends s's attempts, payments, refunds, inbox and outbox events in
// one transaction, and the keys of its payments and refunds that have no
// attempt in s to the fill's stage, which FinishFill moves to expired_keys,
// as the purge would have moved them: rows payment.Fill made, for oncepay
// bench fill. It checks nothing: it is for
// building a large database to measure, not for moving real payments.
func (db *DB) Fill(ctx context.Context, s *payment.Snapshot) error {
	kept := make(map[string]bool, len(s.Attempts))
	for _, a := range s.Attempts {
		kept[a.ID] = true
	}
	var expired [][]any
	for _, p := range s.Payments {
		if !kept[p.ID] {
			expired = append(expired, []any{p.Scope, p.KeyHash, "payment", p.ID, p.ID})
		}
	}
	for _, r := range s.Refunds {
		if !kept[r.ID] {
			expired = append(expired, []any{r.Scope, r.KeyHash, "refund", r.ID, r.PaymentID})
		}
	}
	return mapErr(pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if err := copyPayments(ctx, tx, s); err != nil {
			return err
		}
		// The stage: expired_keys' columns and NOT NULLs, no key nor index.
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fill_expired_keys (LIKE expired_keys)`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"fill_expired_keys"}, []string{"scope", "key_hash", "kind", "id", "payment_id"},
			pgx.CopyFromRows(expired)); err != nil {
			return err
		}
		if err := copyInbox(ctx, tx, s); err != nil {
			return err
		}
		// s has no endpoints nor deliveries: the events alone.
		return importOutbox(ctx, tx, s)
	}))
}

// FinishFill moves the fill's stage into expired_keys, in key order: the
// schema's block that does it at every start (schema.sql) runs now. bench
// fill calls it after its last batch.
func (db *DB) FinishFill(ctx context.Context) error { return mapErr(db.applySchema(ctx)) }
