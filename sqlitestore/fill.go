package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/oncepay/oncepay/payment"
)

// Fill appends s's attempts, payments, refunds, inbox and outbox events in
// one transaction, and the keys of its payments and refunds that have no
// attempt in s to the fill's stage, which FinishFill moves to expired_keys,
// as the purge would have moved them: rows payment.Fill made, for oncepay
// bench fill. It checks nothing: it is for building a large database to
// measure, not for moving real payments.
func (db *DB) Fill(ctx context.Context, s *payment.Snapshot) error {
	return db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		kept := make(map[string]bool, len(s.Attempts))
		for _, a := range s.Attempts {
			kept[a.ID] = true
		}
		if _, err := tx.ExecContext(ctx, fillStageSQL); err != nil {
			return err
		}
		return fillRows(ctx, tx, s, kept)
	})
}

// The fill's stage: the keys Fill expires, appended in the fill's order to
// a table with no index, and moved into expired_keys once, sorted by its
// primary key (FinishFill). Inserted batch by batch, they were random
// leaves of that key (a hash): every batch wrote thousands of leaves to the
// WAL and the checkpoint wrote them again, and a fill slowed from 2,000 to
// 1,200 payments/s on its way to 10 million (BENCHMARKS.md).
const fillStageSQL = `CREATE TABLE IF NOT EXISTS fill_expired_keys (
    scope TEXT NOT NULL, key_hash BLOB NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL, payment_id TEXT NOT NULL)`

// FinishFill moves the fill's stage into expired_keys; bench fill calls it
// after its last batch. Open moves a stage left by a fill that was stopped,
// so a key is never in neither place while its payment lives.
func (db *DB) FinishFill(ctx context.Context) error {
	_, err := db.writer.WriteAlone(ctx, moveFillStage)
	return mapErr(err)
}

// moveFillStage moves the fill's stage, if there is one, into expired_keys
// in its primary key's order, each leaf written once, and gives the stage's
// pages back to the file system. expired_keys' other indexes are dropped
// first and made again after, by a sort of their own: in that order their
// entries would land at random.
func moveFillStage(ctx context.Context, tx *sql.Tx) error {
	var staged int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'fill_expired_keys'`).Scan(&staged)
	if err != nil || staged == 0 {
		return err
	}
	type index struct{ name, sql string }
	indexes, err := queryAllTx(ctx, tx, `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'expired_keys' AND sql IS NOT NULL`,
		func(r scanner) (ix index, err error) { return ix, r.Scan(&ix.name, &ix.sql) })
	if err != nil {
		return err
	}
	stmts := []string{}
	for _, ix := range indexes {
		stmts = append(stmts, `DROP INDEX "`+ix.name+`"`)
	}
	stmts = append(stmts, `INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
		SELECT scope, key_hash, kind, id, payment_id FROM fill_expired_keys ORDER BY scope, key_hash`)
	for _, ix := range indexes {
		stmts = append(stmts, ix.sql)
	}
	// The stage's pages given back: the file is what the rows need.
	for _, q := range append(stmts, `DROP TABLE fill_expired_keys`, `PRAGMA incremental_vacuum`) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("move the fill's expired keys: %w", err)
		}
	}
	return nil
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
			if err := exec(`INSERT INTO fill_expired_keys (scope, key_hash, kind, id, payment_id) VALUES (?, ?, 'payment', ?, ?)`,
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
			if err := exec(`INSERT INTO fill_expired_keys (scope, key_hash, kind, id, payment_id) VALUES (?, ?, 'refund', ?, ?)`,
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
