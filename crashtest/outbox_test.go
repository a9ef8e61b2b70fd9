package crashtest

import (
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/pgstore"
)

// outboxBooks are the outbox's side of the books: every payment's and
// refund's status, and the types of the events about each, oldest first.
type outboxBooks struct {
	status map[string]string   // payment or refund id: its status
	events map[string][]string // payment or refund id: its events' types
	count  int
}

func (o outboxBooks) String() string {
	return fmt.Sprintf("%d events of %d payments and refunds", o.count, len(o.status))
}

// readOutbox reads every payment's and refund's status and every event.
func readOutbox(t *testing.T, dbPath string) outboxBooks {
	t.Helper()
	o := outboxBooks{status: map[string]string{}, events: map[string][]string{}}
	const (
		objects = `SELECT id, status FROM payments UNION ALL SELECT id, status FROM refunds`
		events  = `SELECT object_id, type FROM events ORDER BY id`
	)
	addObject := func(id, status string) { o.status[id] = status }
	addEvent := func(object, typ string) {
		o.events[object] = append(o.events[object], typ)
		o.count++
	}
	if pgstore.IsURL(dbPath) {
		readPostgres(t, dbPath, objects, func(rows pgx.Rows) error {
			var id, status string
			err := rows.Scan(&id, &status)
			addObject(id, status)
			return err
		})
		readPostgres(t, dbPath, events, func(rows pgx.Rows) error {
			var object, typ string
			err := rows.Scan(&object, &typ)
			addEvent(object, typ)
			return err
		})
		return o
	}
	db := openReadOnly(t, dbPath)
	defer db.Close()
	query(t, db, objects, func(rows *sql.Rows) error {
		var id, status string
		err := rows.Scan(&id, &status)
		addObject(id, status)
		return err
	})
	query(t, db, events, func(rows *sql.Rows) error {
		var object, typ string
		err := rows.Scan(&object, &typ)
		addEvent(object, typ)
		return err
	})
	return o
}

// checkOutbox fails the test unless every state change of every payment and
// refund has exactly one event, whatever the kills did: a payment in
// progress has none; a final or queued one has the event of its status,
// after one payment.queued if it waited in the forward queue; a refund has
// the event of its status once final. No event is about nothing.
func checkOutbox(t *testing.T, dbPath string) outboxBooks {
	t.Helper()
	o := readOutbox(t, dbPath)
	for id, status := range o.status {
		prefix := "payment."
		if strings.HasPrefix(id, "re_") {
			prefix = "refund."
		}
		got := o.events[id]
		var want [][]string
		switch {
		case status == "in_progress":
			want = [][]string{nil}
		case prefix == "refund.":
			want = [][]string{{prefix + status}}
		case status == "queued":
			want = [][]string{{"payment.queued"}}
		case status == "expired":
			want = [][]string{{"payment.queued", "payment.expired"}}
		default:
			want = [][]string{{prefix + status}, {"payment.queued", prefix + status}}
		}
		if !slices.ContainsFunc(want, func(w []string) bool { return slices.Equal(got, w) }) {
			t.Errorf("%s, %s: events %v, want one of %v", id, status, got, want)
		}
	}
	for id, types := range o.events {
		if _, ok := o.status[id]; !ok {
			t.Errorf("events %v about %s, which is neither a payment nor a refund", types, id)
		}
	}
	return o
}
