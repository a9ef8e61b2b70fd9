package pgstore

import (
	"context"
	"encoding/json"
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
// database that holds any attempt, payment, webhook event, merchant or API
// key: a copy never
// merges. Settings (the provider binding) are taken from s, since its
// attempts in progress belong to s's provider.
func (db *DB) Import(ctx context.Context, s *payment.Snapshot) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE payment_attempts, payments, refunds, expired_keys, webhook_events, merchants, api_keys, settings,
			events, endpoints, deliveries IN EXCLUSIVE MODE`); err != nil {
			return err
		}
		var attempts, payments, events, merchants, keys, outbox, endpoints bool
		if err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM payment_attempts), EXISTS (SELECT 1 FROM payments), EXISTS (SELECT 1 FROM webhook_events),
			EXISTS (SELECT 1 FROM merchants), EXISTS (SELECT 1 FROM api_keys), EXISTS (SELECT 1 FROM events), EXISTS (SELECT 1 FROM endpoints)`).
			Scan(&attempts, &payments, &events, &merchants, &keys, &outbox, &endpoints); err != nil {
			return err
		}
		if attempts || payments || events || merchants || keys || outbox || endpoints {
			return fmt.Errorf("%w (attempts: %v, payments: %v, webhook events: %v, merchants: %v, API keys: %v, merchant events: %v, endpoints: %v): copy into a new, empty database",
				ErrNotEmpty, attempts, payments, events, merchants, keys, outbox, endpoints)
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
		if err := copyPayments(ctx, tx, s); err != nil {
			return err
		}
		// expired_keys is what the attempts no longer hold: every kept
		// payment or refund without its key's record.
		if _, err := tx.Exec(ctx, `INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
			SELECT p.scope, p.key_hash, 'payment', p.id, p.id FROM payments p
			WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = p.id)
			UNION ALL
			SELECT r.scope, r.key_hash, 'refund', r.id, r.payment_id FROM refunds r
			WHERE NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.id = r.id)`); err != nil {
			return err
		}
		if err := copyInbox(ctx, tx, s); err != nil {
			return err
		}
		return importOutbox(ctx, tx, s)
	})
	return mapErr(err)
}

// importOutbox copies the merchants' events, then their endpoints, then
// the deliveries as they stood: in that order, so the trigger that makes
// an event's deliveries finds no endpoint yet and makes none of its own.
func importOutbox(ctx context.Context, tx pgx.Tx, s *payment.Snapshot) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"}, []string{"scope", "type", "id", "object_id", "created_at", "body"},
		pgx.CopyFromSlice(len(s.Outbox), func(i int) ([]any, error) {
			e := s.Outbox[i]
			return []any{e.Scope, string(e.Type), e.ID, e.ObjectID, ms(e.CreatedAt), e.Body}, nil
		})); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"endpoints"}, []string{"id", "scope", "url", "types", "secret", "previous_secret",
		"previous_until", "created_at", "failing_since", "disabled_at", "disabled_reason"},
		pgx.CopyFromSlice(len(s.Endpoints), func(i int) ([]any, error) {
			e := s.Endpoints[i]
			return []any{e.ID, e.Scope, e.URL, joinTypes(e.Types), e.Secret, nullString(e.PreviousSecret), msOrNull(e.PreviousUntil),
				ms(e.CreatedAt), msOrNull(e.FailingSince), msOrNull(e.DisabledAt), nullString(e.DisabledReason)}, nil
		})); err != nil {
		return err
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"deliveries"}, []string{"event_id", "endpoint_id", "scope", "event_type", "state", "fence",
		"lease_expires_at", "tries", "next_at", "last_status", "last_error", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(s.Deliveries), func(i int) ([]any, error) {
			d := s.Deliveries[i]
			var status *int32
			if d.LastStatus != 0 {
				v := int32(d.LastStatus)
				status = &v
			}
			return []any{d.EventID, d.EndpointID, d.Scope, string(d.EventType), string(d.State), d.Fence, msOrNull(d.LeaseExpiresAt),
				d.Tries, ms(d.NextAt), status, nullString(d.LastError), ms(d.CreatedAt), ms(d.UpdatedAt)}, nil
		}))
	return err
}

// copyPayments copies s's attempts, payments and refunds into tx.
func copyPayments(ctx context.Context, tx pgx.Tx, s *payment.Snapshot) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"payment_attempts"}, []string{"scope", "idempotency_key", "id", "request_hash", "request",
		"amount", "currency", "status", "fence", "lease_expires_at", "response_status", "response_body", "charge_id",
		"failure_code", "created_at", "updated_at", "kind", "payment_id", "details", "provider"},
		pgx.CopyFromSlice(len(s.Attempts), func(i int) ([]any, error) {
			a := s.Attempts[i]
			var respStatus *int32
			if a.ResponseStatus != 0 {
				v := int32(a.ResponseStatus)
				respStatus = &v
			}
			return []any{a.Scope, a.Key, a.ID, a.RequestHash, a.Request, a.Amount, a.Currency,
				string(a.Status), a.Fence, msOrNull(a.LeaseExpiresAt), respStatus, a.ResponseBody, nullString(a.ChargeID),
				nullString(a.FailureCode), ms(a.CreatedAt), ms(a.UpdatedAt), string(a.Kind), nullString(a.PaymentID), a.Details,
				nullString(a.Provider)}, nil
		})); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"payments"}, []string{"id", "scope", "key_hash", "amount", "currency", "status",
		"charge_id", "failure_code", "amount_refunded", "amount_reserved", "details", "created_at", "updated_at",
		"dispute_id", "dispute_status", "dispute_reason", "dispute_amount"},
		pgx.CopyFromSlice(len(s.Payments), func(i int) ([]any, error) {
			p := s.Payments[i]
			var dID, dStatus, dReason *string
			var dAmount *int64
			if d := p.Dispute; d != nil {
				dID, dStatus, dReason, dAmount = &d.ID, &d.Status, nullString(d.Reason), &d.Amount
			}
			return []any{p.ID, p.Scope, p.KeyHash, p.Amount, p.Currency, string(p.Status),
				nullString(p.ChargeID), nullString(p.FailureCode), p.AmountRefunded, p.AmountReserved, p.Details,
				ms(p.CreatedAt), ms(p.UpdatedAt), dID, dStatus, dReason, dAmount}, nil
		})); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"refunds"}, []string{"id", "scope", "payment_id", "key_hash", "amount", "currency",
		"status", "provider_refund_id", "failure_code", "details", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(s.Refunds), func(i int) ([]any, error) {
			r := s.Refunds[i]
			return []any{r.ID, r.Scope, r.PaymentID, r.KeyHash, r.Amount, r.Currency, string(r.Status),
				nullString(r.ProviderRefundID), nullString(r.FailureCode), r.Details, ms(r.CreatedAt), ms(r.UpdatedAt)}, nil
		})); err != nil {
		return err
	}
	return nil
}

// copyInbox copies s's provider events into tx.
func copyInbox(ctx context.Context, tx pgx.Tx, s *payment.Snapshot) error {
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"webhook_events"}, []string{"provider", "event_id", "type", "event", "payment_id",
		"state", "attempts", "fence", "lease_expires_at", "result", "last_error", "received_at", "updated_at"},
		pgx.CopyFromSlice(len(s.Events), func(i int) ([]any, error) {
			e := s.Events[i]
			body, err := json.Marshal(e.Event)
			return []any{e.Provider, e.ID, e.Type, body, nullString(e.PaymentID), string(e.State), e.Attempts, e.Fence,
				msOrNull(e.LeaseExpiresAt), nullString(e.Result), nullString(e.LastError), ms(e.ReceivedAt), ms(e.UpdatedAt)}, err
		})); err != nil {
		return err
	}
	return nil
}
