package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/oncepay/oncepay/payment"
)

// migrateMerchants brings a database made before merchants existed (an API
// key's id was the scope of its payments) to the schema with merchants:
// each key becomes a merchant of its own, with the key's id and name, so
// every payment keeps its scope and its downstream key, and nothing is lost.
const migrateMerchantsSQL = `
CREATE TABLE merchants (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
INSERT INTO merchants (id, name, created_at) SELECT id, name, created_at FROM api_keys;
ALTER TABLE api_keys RENAME TO api_keys_v0;
CREATE TABLE api_keys (
    id          TEXT    PRIMARY KEY,
    merchant_id TEXT    NOT NULL REFERENCES merchants (id),
    name        TEXT    NOT NULL,
    secret_hash BLOB    NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
INSERT INTO api_keys (id, merchant_id, name, secret_hash, created_at, revoked_at)
    SELECT id, id, name, secret_hash, created_at, revoked_at FROM api_keys_v0;
DROP TABLE api_keys_v0;`

// migrate brings an older database to the schema schema.sql describes,
// before schema.sql itself is applied. A new or current database is left
// as it is; each step runs in one transaction, so a crash leaves the
// database as it was before or after the step, never between.
func migrate(ctx context.Context, w *sql.DB, schema string) error {
	for _, step := range []func(ctx context.Context, tx *sql.Tx, schema string) error{migrateMerchants, migratePayments, migrateExpiredKeys, migrateAttemptProvider, migrateOfflineStatuses, migrateDisputes, migrateFillStage} {
		if err := inTx(ctx, w, schema, step); err != nil {
			return err
		}
	}
	return nil
}

func inTx(ctx context.Context, w *sql.DB, schema string, step func(ctx context.Context, tx *sql.Tx, schema string) error) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := step(ctx, tx, schema); err != nil {
		return err
	}
	return tx.Commit()
}

func migrateMerchants(ctx context.Context, tx *sql.Tx, _ string) error {
	var keys, merchantColumn int
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'api_keys'),
		(SELECT count(*) FROM pragma_table_info('api_keys') WHERE name = 'merchant_id')`).Scan(&keys, &merchantColumn)
	if err != nil {
		return err
	}
	if keys == 0 || merchantColumn == 1 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, migrateMerchantsSQL); err != nil {
		return fmt.Errorf("migrate API keys to merchants: %w", err)
	}
	return nil
}

// migratePayments brings a database made before refunds (the attempt was
// the only record of a payment) to payments that outlive their keys: the
// attempts gain their kind, and every payment attempt gets its payment row,
// with the hash of its key, so a payment made before the upgrade is as
// refundable and as protected from a late retry as one made after.
func migratePayments(ctx context.Context, tx *sql.Tx, schema string) error {
	var attempts, kindColumn int
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'payment_attempts'),
		(SELECT count(*) FROM pragma_table_info('payment_attempts') WHERE name = 'kind')`).Scan(&attempts, &kindColumn)
	if err != nil {
		return err
	}
	if attempts == 0 || kindColumn == 1 {
		return nil
	}
	for _, ddl := range []string{
		`ALTER TABLE payment_attempts ADD COLUMN kind TEXT NOT NULL DEFAULT 'payment' CHECK (kind IN ('payment', 'refund'))`,
		`ALTER TABLE payment_attempts ADD COLUMN payment_id TEXT`,
		`ALTER TABLE payment_attempts ADD COLUMN details BLOB`,
		schema, // the new tables, as a new database gets them
	} {
		if _, err := tx.ExecContext(ctx, ddl); err != nil {
			return fmt.Errorf("migrate payments: %w", err)
		}
	}
	type row struct {
		scope, key, id string
	}
	rows, err := queryAllTx(ctx, tx, `SELECT scope, idempotency_key, id FROM payment_attempts`, func(s scanner) (row, error) {
		var r row
		return r, s.Scan(&r.scope, &r.key, &r.id)
	})
	if err != nil {
		return fmt.Errorf("migrate payments: %w", err)
	}
	ins, err := tx.PrepareContext(ctx, `INSERT INTO payments
		(id, scope, key_hash, amount, currency, status, charge_id, failure_code, details, created_at, updated_at)
		SELECT id, scope, ?, amount, currency, status, charge_id, failure_code,
		       json_remove(request, '$.amount', '$.currency', '$.source'), created_at, updated_at
		FROM payment_attempts WHERE id = ?`)
	if err != nil {
		return err
	}
	defer ins.Close()
	for _, r := range rows {
		if _, err := ins.ExecContext(ctx, payment.KeyHash(r.key), r.id); err != nil {
			return fmt.Errorf("migrate payment %s: %w", r.id, err)
		}
	}
	return nil
}

// migrateExpiredKeysSQL rebuilds payments and refunds without their unique
// (scope, key_hash), from schema.sql (applied in between), and moves the
// keys purge deleted, whose payment or refund is kept, to expired_keys.
//
// The triggers go first: renaming payments would rewrite their bodies (and
// expired_keys' reference) to payments_v1, which schema.sql's IF NOT EXISTS
// would then keep. No database that reaches this step has them yet.
const migrateExpiredKeysSQL = `
DROP TRIGGER IF EXISTS payment_attempts_expire;
DROP TRIGGER IF EXISTS payment_attempts_settle;
DROP INDEX refunds_payment;
ALTER TABLE refunds RENAME TO refunds_v1;
ALTER TABLE payments RENAME TO payments_v1;
%s;
INSERT INTO payments (id, scope, key_hash, amount, currency, status, charge_id, failure_code,
                      amount_refunded, amount_reserved, details, created_at, updated_at)
    SELECT id, scope, key_hash, amount, currency, status, charge_id, failure_code,
           amount_refunded, amount_reserved, details, created_at, updated_at FROM payments_v1;
INSERT INTO refunds (id, scope, payment_id, key_hash, amount, currency, status, provider_refund_id,
                     failure_code, details, created_at, updated_at)
    SELECT id, scope, payment_id, key_hash, amount, currency, status, provider_refund_id,
           failure_code, details, created_at, updated_at FROM refunds_v1;
INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
    SELECT scope, key_hash, 'payment', id, id FROM payments p
    WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = p.id)
    UNION ALL
    SELECT scope, key_hash, 'refund', id, payment_id FROM refunds r
    WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = r.id);
DROP TABLE refunds_v1;
DROP TABLE payments_v1;`

// migrateExpiredKeys brings a database whose payments and refunds told a
// late retry of a purged key by a unique (scope, key_hash) to expired_keys:
// the same refusal, without a random index page written by every claim.
func migrateExpiredKeys(ctx context.Context, tx *sql.Tx, schema string) error {
	var unique int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_index_list('payments') WHERE origin = 'u'`).Scan(&unique)
	if err != nil || unique == 0 {
		return err
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(migrateExpiredKeysSQL, schema)); err != nil {
		return fmt.Errorf("migrate purged keys to expired_keys: %w", err)
	}
	return nil
}

// The status CHECK before offline payments, and after.
const (
	statusCheckV1 = `CHECK (status IN ('in_progress', 'succeeded', 'failed'))`
	statusCheckV2 = `CHECK (status IN ('in_progress', 'succeeded', 'failed', 'queued', 'expired'))`
)

// migrateOfflineStatuses lets attempts and payments of a database made
// before offline payments be queued and expired. A CHECK that allows more
// than before holds for every row already there, so SQLite's documented
// way for it applies: the table's CREATE statement is edited in place
// (writable_schema) and the schema version bumped, in the step's one
// transaction; no row is copied.
func migrateOfflineStatuses(ctx context.Context, tx *sql.Tx, _ string) error {
	var old int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema
		WHERE type = 'table' AND name IN ('payment_attempts', 'payments') AND instr(sql, ?) > 0`, statusCheckV1).Scan(&old)
	if err != nil || old == 0 {
		return err
	}
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA schema_version`).Scan(&version); err != nil {
		return err
	}
	for _, stmt := range []string{
		`PRAGMA writable_schema = ON`,
		fmt.Sprintf(`UPDATE sqlite_schema SET sql = replace(sql, '%s', '%s')
			WHERE type = 'table' AND name IN ('payment_attempts', 'payments')`, quote(statusCheckV1), quote(statusCheckV2)),
		fmt.Sprintf(`PRAGMA schema_version = %d`, version+1),
		`PRAGMA writable_schema = OFF`,
	} {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("migrate statuses for offline payments: %w", err)
		}
	}
	return nil
}

// migrateAttemptProvider gives the attempts of a database made before they
// recorded their provider the provider the database is bound to: the one
// its attempts in progress were made through, since the binding refuses to
// move while any is (BindProvider). A file never bound keeps NULL, and no
// provider's event settles its attempts; reconcile and retries still do.
func migrateAttemptProvider(ctx context.Context, tx *sql.Tx, _ string) error {
	var attempts, column, settings int
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'payment_attempts'),
		(SELECT count(*) FROM pragma_table_info('payment_attempts') WHERE name = 'provider'),
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'settings')`).Scan(&attempts, &column, &settings)
	if err != nil || attempts == 0 || column == 1 {
		return err
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE payment_attempts ADD COLUMN provider TEXT`); err != nil {
		return fmt.Errorf("migrate attempts' provider: %w", err)
	}
	if settings == 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE payment_attempts
		SET provider = (SELECT value FROM settings WHERE name = 'provider')`); err != nil {
		return fmt.Errorf("migrate attempts' provider: %w", err)
	}
	return nil
}

// migrateDisputes gives the payments of a database made before disputes
// their dispute columns, NULL: no payment made before had one recorded.
func migrateDisputes(ctx context.Context, tx *sql.Tx, _ string) error {
	var payments, column int
	err := tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'payments'),
		(SELECT count(*) FROM pragma_table_info('payments') WHERE name = 'dispute_id')`).Scan(&payments, &column)
	if err != nil || payments == 0 || column == 1 {
		return err
	}
	for _, col := range []string{"dispute_id TEXT", "dispute_status TEXT", "dispute_reason TEXT", "dispute_amount INTEGER"} {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE payments ADD COLUMN `+col); err != nil {
			return fmt.Errorf("migrate payments' disputes: %w", err)
		}
	}
	return nil
}

// migrateFillStage moves the expired keys a stopped bench fill left in its
// stage (fill.go) to expired_keys, where a late retry of their keys finds
// them.
func migrateFillStage(ctx context.Context, tx *sql.Tx, _ string) error { return moveFillStage(ctx, tx) }

// quote doubles a SQL string literal's quotes.
func quote(s string) string { return strings.ReplaceAll(s, "'", "''") }

func queryAllTx[T any](ctx context.Context, tx *sql.Tx, query string, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := tx.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var all []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		all = append(all, v)
	}
	return all, rows.Err()
}
