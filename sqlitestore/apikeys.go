package sqlitestore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.KeyStore = (*DB)(nil)

// CreateMerchant makes a merchant named name.
func (db *DB) CreateMerchant(ctx context.Context, name string, now time.Time) (payment.Merchant, error) {
	m := payment.NewMerchant(name, now)
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO merchants (id, name, created_at) VALUES (?, ?, ?)`, m.ID, m.Name, ms(m.CreatedAt))
		return err
	})
	if err != nil {
		return payment.Merchant{}, err
	}
	return m, nil
}

// Merchants lists every merchant with its number of live keys, oldest first.
func (db *DB) Merchants(ctx context.Context) ([]payment.Merchant, error) {
	return queryAll(ctx, db.r, func(row scanner) (*payment.Merchant, error) {
		var (
			m       payment.Merchant
			created int64
		)
		err := row.Scan(&m.ID, &m.Name, &created, &m.LiveKeys)
		m.CreatedAt = time.UnixMilli(created).UTC()
		return &m, err
	}, `SELECT m.id, m.name, m.created_at,
		(SELECT count(*) FROM api_keys k WHERE k.merchant_id = m.id AND k.revoked_at IS NULL)
		FROM merchants m ORDER BY m.created_at, m.id`)
}

// CreateAPIKey makes a key named name for the merchant merchantID and
// returns it with its secret, which is not stored and cannot be shown again.
// An unknown merchant is an ENOTFOUND error.
func (db *DB) CreateAPIKey(ctx context.Context, merchantID, name string, now time.Time) (payment.APIKey, string, error) {
	k, secret := payment.NewAPIKey(merchantID, name, now)
	var n int64
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, merchant_id, name, secret_hash, created_at)
			SELECT ?, id, ?, ?, ? FROM merchants WHERE id = ?`,
			k.ID, k.Name, payment.HashSecret(secret), ms(k.CreatedAt), merchantID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		err = payment.ErrNoMerchant(merchantID)
	}
	if err != nil {
		return payment.APIKey{}, "", err
	}
	return k, secret, nil
}

// APIKeys lists every key, revoked ones included, oldest first.
func (db *DB) APIKeys(ctx context.Context) ([]payment.APIKey, error) {
	return queryAll(ctx, db.r, func(row scanner) (*payment.APIKey, error) {
		var (
			k       payment.APIKey
			created int64
			revoked sql.NullInt64
		)
		err := row.Scan(&k.ID, &k.MerchantID, &k.Name, &created, &revoked)
		k.CreatedAt, k.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
		return &k, err
	}, `SELECT id, merchant_id, name, created_at, revoked_at FROM api_keys ORDER BY created_at, id`)
}

// RevokeAPIKey revokes the key id; its requests get 401 from then on. The
// merchant's other keys, payments and idempotency keys are untouched.
func (db *DB) RevokeAPIKey(ctx context.Context, id string, now time.Time) error {
	var n int64
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(now), id)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err == nil && n == 0 {
		return payment.ErrNoLiveKey(id)
	}
	if err == nil {
		db.keys.invalidate() // committed: from now on this process refuses the key
	}
	return err
}

// Authenticate returns the scope of a live secret: its merchant's id. It
// answers from the view of the live keys (see KeyViewTTL); a secret the view
// does not know is looked up in the table, so a key just made by another
// process works at once.
func (db *DB) Authenticate(ctx context.Context, secret string) (string, error) {
	if !payment.LooksLikeSecret(secret) {
		return "", payment.ErrUnauthorized()
	}
	hash := sha256.Sum256([]byte(secret))
	merchant, ok, err := db.keys.lookup(ctx, hash, db.liveKeys)
	if err != nil {
		return "", mapErr(err)
	}
	if ok {
		return merchant, nil
	}
	err = db.stmt.authenticate.QueryRowContext(ctx, hash[:]).Scan(&merchant)
	if errors.Is(err, sql.ErrNoRows) {
		return "", payment.ErrUnauthorized()
	}
	if err != nil {
		return "", mapErr(err)
	}
	return merchant, nil
}

// liveKeys reads the hashes of every live key and their merchants.
func (db *DB) liveKeys(ctx context.Context) (map[[sha256.Size]byte]string, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT secret_hash, merchant_id FROM api_keys WHERE revoked_at IS NULL`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	live := map[[sha256.Size]byte]string{}
	for rows.Next() {
		var (
			hash     []byte
			merchant string
		)
		if err := rows.Scan(&hash, &merchant); err != nil {
			return nil, err
		}
		if len(hash) == sha256.Size {
			live[[sha256.Size]byte(hash)] = merchant
		}
	}
	return live, rows.Err()
}
