package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// With a status, newest change first instead (updated_at, then id), along
// payment_attempts_status_updated. A page starts from its cursor, so a
// deep page reads no more than the first; a search reads the id's index
// and the key's in each merchant's part of the primary key.
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
		// "demo": the scope of demo mode (server.DemoScope), which has no
		// merchant row.
		s := arg(f.Search)
		// scope = ANY(ARRAY(...)), not IN (SELECT ...): an array is an
		// index condition, so the key is looked up in each merchant's part
		// of the primary key; IN was a filter beside a condition on the
		// key alone, the second column, which read the whole index.
		where = append(where, `(a.id = `+s+` OR a.idempotency_key = `+s+` AND a.scope = ANY(ARRAY(SELECT id FROM merchants UNION ALL SELECT 'demo')))`)
	}
	at := "a.created_at"
	if f.Status != "" {
		at = "a.updated_at"
	}
	order := ` ORDER BY ` + at + ` DESC, a.id DESC`
	switch {
	case f.Before != nil:
		where = append(where, `(`+at+`, a.id) < (`+arg(ms(f.Before.At))+`, `+arg(f.Before.ID)+`)`)
	case f.After != nil:
		where = append(where, `(`+at+`, a.id) > (`+arg(ms(f.After.At))+`, `+arg(f.After.ID)+`)`)
		order = ` ORDER BY ` + at + `, a.id`
	}
	query := `SELECT ` + listedColumns + ` FROM payment_attempts a LEFT JOIN merchants m ON m.id = a.scope`
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, ` AND `)
	}
	query += order + ` LIMIT ` + arg(f.Limit)
	list, err := queryAll(ctx, db, scanListed, query, args...)
	if f.After != nil {
		slices.Reverse(list)
	}
	return list, err
}

// CountsUpTo counts the attempts in each status, each up to most, each
// along its part of payment_attempts_status_updated.
func (db *DB) CountsUpTo(ctx context.Context, most int) (map[payment.Status]int, error) {
	counts := map[payment.Status]int{}
	for _, st := range []payment.Status{payment.InProgress, payment.Succeeded, payment.Failed, payment.Queued, payment.Expired} {
		var n int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM payment_attempts WHERE status = $1 LIMIT $2) s`, string(st), most).Scan(&n); err != nil {
			return nil, mapErr(err)
		}
		if n > 0 {
			counts[st] = n
		}
	}
	return counts, nil
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
