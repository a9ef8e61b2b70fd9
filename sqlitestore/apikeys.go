package sqlitestore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.KeyStore = (*DB)(nil)

// secretPrefix marks oncepay secrets, so a leaked one is recognisable.
const secretPrefix = "opk_"

// CreateAPIKey makes a key named name and returns it with its secret, which
// is not stored and cannot be shown again.
func (db *DB) CreateAPIKey(ctx context.Context, name string, now time.Time) (payment.APIKey, string, error) {
	k := payment.APIKey{ID: "key_" + strings.ToLower(rand.Text()[:16]), Name: name, CreatedAt: now.UTC().Truncate(time.Millisecond)}
	secret := secretPrefix + rand.Text() + rand.Text() // 260 random bits
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, name, secret_hash, created_at) VALUES (?, ?, ?, ?)`,
			k.ID, k.Name, hashSecret(secret), ms(k.CreatedAt))
		return err
	})
	if err != nil {
		return payment.APIKey{}, "", err
	}
	return k, secret, nil
}

// APIKeys lists every key, revoked ones included, oldest first.
func (db *DB) APIKeys(ctx context.Context) ([]payment.APIKey, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT id, name, created_at, revoked_at FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var keys []payment.APIKey
	for rows.Next() {
		var (
			k       payment.APIKey
			created int64
			revoked sql.NullInt64
		)
		if err := rows.Scan(&k.ID, &k.Name, &created, &revoked); err != nil {
			return nil, err
		}
		k.CreatedAt, k.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
		keys = append(keys, k)
	}
	return keys, mapErr(rows.Err())
}

// RevokeAPIKey revokes the key id; its requests get 401 from then on.
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
		return payment.Errorf(payment.ENOTFOUND, "No live API key %q.", id)
	}
	return err
}

// Authenticate returns the scope (key id) of a live secret.
func (db *DB) Authenticate(ctx context.Context, secret string) (string, error) {
	if !strings.HasPrefix(secret, secretPrefix) {
		return "", payment.Errorf(payment.EUNAUTHORIZED, "Unknown or revoked API key.")
	}
	var id string
	err := db.r.QueryRowContext(ctx, `SELECT id FROM api_keys WHERE secret_hash = ? AND revoked_at IS NULL`,
		hashSecret(secret)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", payment.Errorf(payment.EUNAUTHORIZED, "Unknown or revoked API key.")
	}
	if err != nil {
		return "", mapErr(err)
	}
	return id, nil
}

func hashSecret(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}
