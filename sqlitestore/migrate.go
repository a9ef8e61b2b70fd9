package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
)

// migrateMerchants brings a database made before merchants existed (an API
// key's id was the scope of its payments) to the schema with merchants:
// each key becomes a merchant of its own, with the key's id and name, so
// every payment keeps its scope and its downstream key, and nothing is lost.
const migrateMerchants = `
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
func migrate(ctx context.Context, w *sql.DB) error {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var keys, merchantColumn int
	err = tx.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'api_keys'),
		(SELECT count(*) FROM pragma_table_info('api_keys') WHERE name = 'merchant_id')`).Scan(&keys, &merchantColumn)
	if err != nil {
		return err
	}
	if keys == 0 || merchantColumn == 1 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, migrateMerchants); err != nil {
		return fmt.Errorf("migrate API keys to merchants: %w", err)
	}
	return tx.Commit()
}
