package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/oncepay/oncepay/payment"
)

var _ payment.OutboxStore = (*DB)(nil)

// insertEvent writes e, a change's event, in tx, the change's own
// transaction; nil writes nothing.
func (db *DB) insertEvent(ctx context.Context, tx *sql.Tx, e *payment.OutboxEvent) error {
	if e == nil {
		return nil
	}
	_, err := tx.StmtContext(ctx, db.stmt.insertEvent).ExecContext(ctx,
		e.Scope, e.ID, string(e.Type), e.ObjectID, ms(e.CreatedAt), e.Body)
	return err
}

const outboxColumns = `scope, id, type, object_id, created_at, body`

func scanOutboxEvent(row scanner) (*payment.OutboxEvent, error) {
	var (
		e       payment.OutboxEvent
		created int64
	)
	err := row.Scan(&e.Scope, &e.ID, &e.Type, &e.ObjectID, &created, &e.Body)
	e.CreatedAt = time.UnixMilli(created).UTC()
	return &e, err
}

// OutboxEvents returns up to f.Limit+1 events of f.Scope, newest first, by
// the primary key (scope, id), or the index (scope, type, id) for one type:
// ids lead with their time.
func (db *DB) OutboxEvents(ctx context.Context, f payment.OutboxFilter) ([]payment.OutboxEvent, error) {
	q, args := `SELECT `+outboxColumns+` FROM events WHERE scope = ?`, []any{f.Scope}
	if f.Type != "" {
		q, args = q+` AND type = ?`, append(args, string(f.Type))
	}
	order := ` ORDER BY id DESC`
	switch {
	case f.StartingAfter != "":
		q, args = q+` AND id < ?`, append(args, f.StartingAfter)
	case f.EndingBefore != "":
		q, args, order = q+` AND id > ?`, append(args, f.EndingBefore), ` ORDER BY id`
	}
	es, err := queryAll(ctx, db.r, scanOutboxEvent, q+order+` LIMIT ?`, append(args, f.Limit+1)...)
	if f.EndingBefore != "" {
		slices.Reverse(es)
	}
	return es, err
}
