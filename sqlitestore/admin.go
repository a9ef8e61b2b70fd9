package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.AdminStore = (*DB)(nil)

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
	if f.Status != "" {
		where = append(where, `a.status = ?`)
		args = append(args, f.Status)
	}
	if f.Search != "" {
		where = append(where, `(a.idempotency_key >= ? AND a.idempotency_key < ? OR a.id = ? OR a.charge_id = ?)`)
		args = append(args, f.Search, f.Search+"\U0010FFFF", f.Search, f.Search)
	}
	query := `SELECT ` + listedColumns + ` FROM payment_attempts a LEFT JOIN merchants m ON m.id = a.scope`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += ` ORDER BY a.created_at DESC, a.id DESC LIMIT ? OFFSET ?` // payment_attempts_created
	return queryAll(ctx, db.r, scanListed, query, append(args, f.Limit, f.Offset)...)
}

// AttemptByPaymentID returns the attempt with payment id id, in any scope.
func (db *DB) AttemptByPaymentID(ctx context.Context, id string) (*payment.ListedAttempt, error) {
	l, err := scanListed(db.r.QueryRowContext(ctx, `SELECT `+listedColumns+`
		FROM payment_attempts a LEFT JOIN merchants m ON m.id = a.scope WHERE a.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, payment.ErrNoAttempt()
	}
	return l, mapErr(err)
}

func scanListed(row scanner) (*payment.ListedAttempt, error) {
	var merchant string
	a, err := scanAttempt(extraScanner{row, &merchant})
	if err != nil {
		return nil, err
	}
	return &payment.ListedAttempt{Attempt: *a, Merchant: merchant}, nil
}

// extraScanner scans one more column after those scanAttempt asks for.
type extraScanner struct {
	row   scanner
	extra any
}

func (s extraScanner) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra)...) }
