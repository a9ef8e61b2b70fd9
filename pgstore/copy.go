package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// ErrNotEmpty is Import's refusal of a database that already holds
// payments, merchants or API keys.
var ErrNotEmpty = errors.New("the target database is not empty")

// Import writes s into this database in one transaction, which holds the
// tables locked against every other writer while it runs. It refuses a
// database that holds any attempt, merchant or API key: a copy never
// merges. Settings (the provider binding) are taken from s, since its
// attempts in progress belong to s's provider.
func (db *DB) Import(ctx context.Context, s *payment.Snapshot) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE payment_attempts, merchants, api_keys, settings IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var attempts, merchants, keys bool
		if err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM payment_attempts), EXISTS (SELECT 1 FROM merchants), EXISTS (SELECT 1 FROM api_keys)`).
			Scan(&attempts, &merchants, &keys); err != nil {
			return err
		}
		if attempts || merchants || keys {
			return fmt.Errorf("%w (payments: %v, merchants: %v, API keys: %v): copy into a new, empty database",
				ErrNotEmpty, attempts, merchants, keys)
		}
		for name, value := range s.Settings {
			if _, err := tx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ($1, $2)
				ON CONFLICT (name) DO UPDATE SET value = excluded.value`, name, value); err != nil {
				return err
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"merchants"}, []string{"id", "name", "created_at"},
			pgx.CopyFromSlice(len(s.Merchants), func(i int) ([]any, error) {
				m := s.Merchants[i]
				return []any{m.ID, m.Name, ms(m.CreatedAt)}, nil
			})); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"api_keys"}, []string{"id", "merchant_id", "name", "secret_hash", "created_at", "revoked_at"},
			pgx.CopyFromSlice(len(s.APIKeys), func(i int) ([]any, error) {
				k := s.APIKeys[i]
				return []any{k.ID, k.MerchantID, k.Name, k.SecretHash, ms(k.CreatedAt), msOrNull(k.RevokedAt)}, nil
			})); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"payment_attempts"}, []string{"scope", "idempotency_key", "id", "request_hash", "request",
			"amount", "currency", "status", "fence", "lease_expires_at", "response_status", "response_body", "charge_id",
			"failure_code", "created_at", "updated_at"},
			pgx.CopyFromSlice(len(s.Attempts), func(i int) ([]any, error) {
				a := s.Attempts[i]
				var respStatus *int32
				if a.ResponseStatus != 0 {
					v := int32(a.ResponseStatus)
					respStatus = &v
				}
				return []any{a.Scope, a.Key, a.ID, a.RequestHash, a.Request, a.Amount, a.Currency,
					string(a.Status), a.Fence, msOrNull(a.LeaseExpiresAt), respStatus, a.ResponseBody, nullString(a.ChargeID),
					nullString(a.FailureCode), ms(a.CreatedAt), ms(a.UpdatedAt)}, nil
			}))
		return err
	})
	return mapErr(err)
}
