package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
)

// The SQL of sqlitestore/outbox.go, statement for statement.

var _ payment.OutboxStore = (*DB)(nil)

// insertEvent writes e, a change's event, in tx, the change's own
// transaction; nil writes nothing.
func insertEvent(ctx context.Context, tx pgx.Tx, e *payment.OutboxEvent) error {
	if e == nil {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO events (scope, id, type, object_id, created_at, body) VALUES ($1, $2, $3, $4, $5, $6)`,
		e.Scope, e.ID, string(e.Type), e.ObjectID, ms(e.CreatedAt), e.Body)
	return err
}

const outboxColumns = `scope, id, type, object_id, created_at, body`

func scanOutboxEvent(row pgx.Row) (*payment.OutboxEvent, error) {
	var (
		e       payment.OutboxEvent
		typ     string
		created int64
	)
	err := row.Scan(&e.Scope, &e.ID, &typ, &e.ObjectID, &created, &e.Body)
	e.Type, e.CreatedAt = payment.EventType(typ), time.UnixMilli(created).UTC()
	return &e, err
}

// OutboxEvents returns up to f.Limit+1 events of f.Scope, newest first, by
// the primary key (scope, id), or the index (scope, type, id) for one type.
func (db *DB) OutboxEvents(ctx context.Context, f payment.OutboxFilter) ([]payment.OutboxEvent, error) {
	q, args := `SELECT `+outboxColumns+` FROM events WHERE scope = $1`, []any{f.Scope}
	if f.Type != "" {
		args = append(args, string(f.Type))
		q += fmt.Sprintf(` AND type = $%d`, len(args))
	}
	order := ` ORDER BY id DESC`
	switch {
	case f.StartingAfter != "":
		args = append(args, f.StartingAfter)
		q += fmt.Sprintf(` AND id < $%d`, len(args))
	case f.EndingBefore != "":
		args = append(args, f.EndingBefore)
		q, order = q+fmt.Sprintf(` AND id > $%d`, len(args)), ` ORDER BY id`
	}
	args = append(args, f.Limit+1)
	es, err := queryAll(ctx, db, scanOutboxEvent, q+order+fmt.Sprintf(` LIMIT $%d`, len(args)), args...)
	if f.EndingBefore != "" {
		slices.Reverse(es)
	}
	return es, err
}
