package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// listedColumns are attemptColumns of a joined with its merchant's name.
const listedColumns = `a.scope, a.idempotency_key, a.id, a.request_hash, a.request, a.amount, a.currency,
	a.status, a.fence, a.lease_expires_at, a.response_status, a.response_body, a.charge_id,
	a.failure_code, a.created_at, a.updated_at, a.kind, a.payment_id, a.details, a.provider, coalesce(m.name, a.scope)`

// ListAttempts returns attempts of every merchant, newest first: by
// created_at, then id, a total order, so equal times never shuffle between
// reads. Not by id alone: every refund's re_ id sorts above every pay_ id.
func (db *DB) ListAttempts(ctx context.Context, f payment.AttemptFilter) ([]payment.ListedAttempt, error) {
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Status != "" {
		where = append(where, `a.status = `+arg(string(f.Status)))
	}
	if f.Search != "" {
		s := arg(f.Search)
		where = append(where, `(starts_with(a.idempotency_key, `+s+`) OR a.id = `+s+` OR a.charge_id = `+s+`)`)
	}
	query := `SELECT ` + listedColumns + ` FROM payment_attempts a LEFT JOIN merchants m ON m.id = a.scope`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY a.created_at DESC, a.id DESC LIMIT ` + arg(f.Limit) + ` OFFSET ` + arg(f.Offset) // payment_attempts_created
	return queryAll(ctx, db, scanListed, query, args...)
}

// AttemptByPaymentID returns the attempt with payment id id, in any scope.
func (db *DB) AttemptByPaymentID(ctx context.Context, id string) (*payment.ListedAttempt, error) {
	l, err := scanListed(db.pool.QueryRow(ctx, `SELECT `+listedColumns+`
		FROM payment_attempts a LEFT JOIN merchants m ON m.id = a.scope WHERE a.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.ErrNoAttempt()
	}
	return l, mapErr(err)
}

func scanListed(row pgx.Row) (*payment.ListedAttempt, error) {
	var merchant string
	a, err := scanAttemptAnd(row, &merchant)
	if err != nil {
		return nil, err
	}
	return &payment.ListedAttempt{Attempt: *a, Merchant: merchant}, nil
}
