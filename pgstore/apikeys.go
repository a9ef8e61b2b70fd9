package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// CreateMerchant makes a merchant named name.
func (db *DB) CreateMerchant(ctx context.Context, name string, now time.Time) (payment.Merchant, error) {
	m := payment.NewMerchant(name, now)
	if _, err := db.exec(ctx, `INSERT INTO merchants (id, name, created_at) VALUES ($1, $2, $3)`, m.ID, m.Name, ms(m.CreatedAt)); err != nil {
		return payment.Merchant{}, err
	}
	return m, nil
}

// Merchants lists every merchant with its number of live keys, oldest first.
func (db *DB) Merchants(ctx context.Context) ([]payment.Merchant, error) {
	return queryAll(ctx, db, func(row pgx.Row) (*payment.Merchant, error) {
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
	n, err := db.exec(ctx, `INSERT INTO api_keys (id, merchant_id, name, secret_hash, created_at)
		SELECT $1, id, $2, $3, $4 FROM merchants WHERE id = $5`,
		k.ID, k.Name, payment.HashSecret(secret), ms(k.CreatedAt), merchantID)
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
	return queryAll(ctx, db, func(row pgx.Row) (*payment.APIKey, error) {
		var (
			k       payment.APIKey
			created int64
			revoked *int64
		)
		err := row.Scan(&k.ID, &k.MerchantID, &k.Name, &created, &revoked)
		k.CreatedAt, k.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
		return &k, err
	}, `SELECT id, merchant_id, name, created_at, revoked_at FROM api_keys ORDER BY created_at, id`)
}

// RevokeAPIKey revokes the key id; its requests get 401 from then on.
func (db *DB) RevokeAPIKey(ctx context.Context, id string, now time.Time) error {
	n, err := db.exec(ctx, `UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, ms(now), id)
	if err == nil && n == 0 {
		return payment.ErrNoLiveKey(id)
	}
	return err
}

// Authenticate returns the scope of a live secret: its merchant's id.
func (db *DB) Authenticate(ctx context.Context, secret string) (string, error) {
	if !payment.LooksLikeSecret(secret) {
		return "", payment.ErrUnauthorized()
	}
	var merchant string
	err := db.pool.QueryRow(ctx, `SELECT merchant_id FROM api_keys WHERE secret_hash = $1 AND revoked_at IS NULL`,
		payment.HashSecret(secret)).Scan(&merchant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", payment.ErrUnauthorized()
	}
	if err != nil {
		return "", mapErr(err)
	}
	return merchant, nil
}
