package sqlitestore

import (
	"context"
	"database/sql"
	"slices"
	"strings"
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
		e.Scope, string(e.Type), e.ID, e.ObjectID, ms(e.CreatedAt), e.Body)
	return err
}

const outboxColumns = `scope, type, id, object_id, created_at, body`

func scanOutboxEvent(row scanner) (*payment.OutboxEvent, error) {
	var (
		e       payment.OutboxEvent
		created int64
	)
	err := row.Scan(&e.Scope, &e.Type, &e.ID, &e.ObjectID, &created, &e.Body)
	e.CreatedAt = time.UnixMilli(created).UTC()
	return &e, err
}

// OutboxEvents returns up to f.Limit+1 events of f.Scope, newest first:
// for one type, a walk of the primary key (scope, type, id) from the page's
// edge; for all, the merge of each type's walk, so no page reads more than
// a page of each type, however many events the merchant has.
func (db *DB) OutboxEvents(ctx context.Context, f payment.OutboxFilter) ([]payment.OutboxEvent, error) {
	q, args := outboxQuery(f)
	es, err := queryAll(ctx, db.r, scanOutboxEvent, q, args...)
	if f.EndingBefore != "" {
		slices.Reverse(es)
	}
	return es, err
}

// outboxQuery is the query of OutboxEvents and its arguments.
func outboxQuery(f payment.OutboxFilter) (string, []any) {
	types := payment.EventTypes
	if f.Type != "" {
		types = []payment.EventType{f.Type}
	}
	edge, order, after := "", ` ORDER BY id DESC`, ""
	switch {
	case f.StartingAfter != "":
		edge, after = ` AND id < ?`, f.StartingAfter
	case f.EndingBefore != "":
		edge, after, order = ` AND id > ?`, f.EndingBefore, ` ORDER BY id`
	}
	var (
		parts []string
		args  []any
	)
	for _, t := range types {
		parts = append(parts, `SELECT * FROM (SELECT `+outboxColumns+` FROM events WHERE scope = ? AND type = ?`+edge+order+` LIMIT ?)`)
		args = append(args, f.Scope, string(t))
		if edge != "" {
			args = append(args, after)
		}
		args = append(args, f.Limit+1)
	}
	return strings.Join(parts, ` UNION ALL `) + order + ` LIMIT ?`, append(args, f.Limit+1)
}

// PurgeOutbox deletes up to limit events made before before, oldest first,
// with their deliveries, but none with a delivery still pending: the
// table's own order is the time's, so a batch reads little more than it
// deletes.
func (db *DB) PurgeOutbox(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	return db.purgeBatch(ctx, func(ctx context.Context, tx *sql.Tx) (int64, error) {
		for _, stmt := range []string{
			`CREATE TEMP TABLE IF NOT EXISTS purged_events (rid INTEGER PRIMARY KEY, id TEXT NOT NULL)`,
			`DELETE FROM purged_events`,
		} {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return 0, err
			}
		}
		edge, err := outboxEdge(ctx, tx, ms(before))
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO purged_events SELECT rowid, id FROM events ev
			WHERE rowid < ? AND created_at < ?
			  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = ev.id AND d.state = 'pending')
			ORDER BY rowid LIMIT ?`, edge, ms(before), limit); err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE event_id IN (SELECT id FROM purged_events)`); err != nil {
			return 0, err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE rowid IN (SELECT rid FROM purged_events)`)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// outboxEdge is the rowid below which every event was made before before:
// the table is in time order (rows are appended as events are made), so
// it bisects the rowids, a lookup each, rather than reading from the
// oldest row on until the first young one, which, with nothing left to
// purge, is the whole table.
func outboxEdge(ctx context.Context, tx *sql.Tx, before int64) (int64, error) {
	return timeEdge(ctx, tx, "events", before)
}

// timeEdge is the rowid below which every row of table (whose rows are
// appended in the order of their created_at) was made before before, found
// by bisecting the rowids: a lookup each.
func timeEdge(ctx context.Context, tx *sql.Tx, table string, before int64) (int64, error) {
	var lo, hi sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT min(rowid) FROM `+table).Scan(&lo); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, `SELECT max(rowid) FROM `+table).Scan(&hi); err != nil || !hi.Valid {
		return 0, err
	}
	// Every row below l is old; no row at or above h is.
	l, h := lo.Int64, hi.Int64+1
	for l < h {
		m := l + (h-l)/2
		var rid, created int64
		if err := tx.QueryRowContext(ctx, `SELECT rowid, created_at FROM `+table+` WHERE rowid >= ? ORDER BY rowid LIMIT 1`, m).Scan(&rid, &created); err != nil {
			return 0, err
		}
		if created < before {
			l = rid + 1
		} else {
			h = m // no row between m and rid, which is young
		}
	}
	return l, nil
}
