package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	_, err := tx.Exec(ctx, `INSERT INTO events (scope, type, id, object_id, created_at, body) VALUES ($1, $2, $3, $4, $5, $6)`,
		e.Scope, string(e.Type), e.ID, e.ObjectID, ms(e.CreatedAt), e.Body)
	return err
}

const outboxColumns = `scope, type, id, object_id, created_at, body`

func scanOutboxEvent(row pgx.Row) (*payment.OutboxEvent, error) {
	var (
		e       payment.OutboxEvent
		typ     string
		created int64
	)
	err := row.Scan(&e.Scope, &typ, &e.ID, &e.ObjectID, &created, &e.Body)
	e.Type, e.CreatedAt = payment.EventType(typ), time.UnixMilli(created).UTC()
	return &e, err
}

// OutboxEvents returns up to f.Limit+1 events of f.Scope, newest first:
// a walk of the primary key (scope, type, id) for one type, the merge of
// each type's walk for all.
func (db *DB) OutboxEvents(ctx context.Context, f payment.OutboxFilter) ([]payment.OutboxEvent, error) {
	types := payment.EventTypes
	if f.Type != "" {
		types = []payment.EventType{f.Type}
	}
	args := []any{f.Scope, f.Limit + 1}
	edge, order := "", ` ORDER BY id DESC`
	switch {
	case f.StartingAfter != "":
		edge, args = ` AND id < $3`, append(args, f.StartingAfter)
	case f.EndingBefore != "":
		edge, order, args = ` AND id > $3`, ` ORDER BY id`, append(args, f.EndingBefore)
	}
	var parts []string
	for _, t := range types {
		args = append(args, string(t))
		parts = append(parts, fmt.Sprintf(`(SELECT `+outboxColumns+` FROM events WHERE scope = $1 AND type = $%d`+edge+order+` LIMIT $2)`, len(args)))
	}
	q := `SELECT * FROM (` + strings.Join(parts, ` UNION ALL `) + `) e` + order + ` LIMIT $2`
	es, err := queryAll(ctx, db, scanOutboxEvent, q, args...)
	if f.EndingBefore != "" {
		slices.Reverse(es)
	}
	return es, err
}

// PurgeOutbox deletes up to limit events made before before, with their
// deliveries, but none with a delivery still pending, skipping any another
// instance's purge holds.
func (db *DB) PurgeOutbox(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	start := time.Now()
	n, err := db.exec(ctx, `WITH v AS (
			SELECT scope, type, id FROM events ev
			WHERE created_at < $1
			  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = ev.id AND d.state = 'pending')
			LIMIT $2 FOR UPDATE SKIP LOCKED),
		d AS (DELETE FROM deliveries WHERE event_id IN (SELECT id FROM v))
		DELETE FROM events WHERE (scope, type, id) IN (SELECT scope, type, id FROM v)`, ms(before), limit)
	return int(n), time.Since(start), err
}
