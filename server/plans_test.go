package server_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/sqlitestore"
	_ "modernc.org/sqlite"
)

// largeTables are the tables that grow with payments: a page or a purge
// batch that reads one of them whole gets slower every day.
var largeTables = []string{"payment_attempts", "payments", "refunds", "expired_keys", "webhook_events", "events", "deliveries", "forward_queue"}

// plans holds the query plan of every statement a store ran, by statement.
type plans struct {
	mu    sync.Mutex
	plans map[string][]string
	args  map[string][]any // PostgreSQL: the arguments it ran with, to EXPLAIN later
	// PostgreSQL: the first column of each index of a large table.
	leading map[string]string
}

func newPlans() *plans {
	return &plans{plans: map[string][]string{}, args: map[string][]any{}, leading: map[string]string{}}
}

func (p *plans) seen(q string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.plans[q]
	return ok
}

func (p *plans) add(q string, plan []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans[q] = plan
}

// explained reports whether q is a statement whose plan says how it reads.
func explained(q string) bool {
	q = strings.ToUpper(strings.TrimSpace(q))
	for _, verb := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"} {
		if strings.HasPrefix(q, verb) {
			return true
		}
	}
	return false
}

// explainDriver is modernc's SQLite driver that first asks SQLite for the
// plan of every statement it is given (EXPLAIN QUERY PLAN), on the same
// connection, with the same arguments, so temporary tables are there too.
type explainDriver struct {
	base  driver.Driver
	plans *plans
}

var (
	sqlitePlans     = newPlans()
	registerExplain sync.Once
)

func (d explainDriver) Open(name string) (driver.Conn, error) {
	c, err := d.base.Open(name)
	if err != nil {
		return nil, err
	}
	return &explainConn{Conn: c, plans: d.plans}, nil
}

type explainConn struct {
	driver.Conn
	plans *plans
}

func (c *explainConn) explain(ctx context.Context, q string, args []driver.NamedValue) {
	if !explained(q) || c.plans.seen(q) {
		return
	}
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args)
	if err != nil {
		c.plans.add(q, []string{"EXPLAIN failed: " + err.Error()})
		return
	}
	defer rows.Close()
	var plan []string
	row := make([]driver.Value, len(rows.Columns()))
	for rows.Next(row) == nil {
		plan = append(plan, fmt.Sprint(row[len(row)-1]))
	}
	c.plans.add(q, plan)
}

// PrepareContext explains a prepared statement when it first runs, with
// its arguments.
func (c *explainConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return &explainStmt{Stmt: s, c: c, q: q}, nil
}

type explainStmt struct {
	driver.Stmt
	c *explainConn
	q string
}

func (s *explainStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.explain(ctx, s.q, args)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *explainStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.explain(ctx, s.q, args)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

func (c *explainConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.explain(ctx, q, args)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *explainConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.explain(ctx, q, args)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *explainConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// pgTracer records every statement the PostgreSQL store runs, with its
// arguments, to EXPLAIN once the test is done.
type pgTracer struct{ plans *plans }

func (t pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if explained(data.SQL) {
		t.plans.mu.Lock()
		if _, ok := t.plans.args[data.SQL]; !ok {
			t.plans.args[data.SQL] = data.Args
		}
		t.plans.mu.Unlock()
	}
	return ctx
}

func (pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// No page, list or purge batch reads a table that grows with payments
// whole: every statement behind the admin pages (the list, its status
// filter, its search by key, payment id and charge id, an attempt's page,
// the inbox, the queue, the endpoints), GET /v1/payments, /v1/events and
// /v1/attempts with each filter and page direction, the metrics, and a
// purge run of every kind is planned on an index. SQLite's plan may not
// SCAN a large table; PostgreSQL's, with sequential scans disabled so that
// a small table's plan shows whether an index could serve it, may not
// Seq Scan one, nor give an index of one a condition that leaves out the
// index's first column (which reads the whole index).
func TestNoFullScanBehindAnyPage(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			var (
				o  = envOptions{auth: true, adminToken: strings.Repeat("a", 32), postgres: st.postgres}
				ps = newPlans()
			)
			if st.postgres {
				o.pgOp = pgstore.Options{Tracer: pgTracer{ps}}
			} else {
				registerExplain.Do(func() {
					db, _ := sql.Open("sqlite", "")
					sql.Register("sqlite-explain", explainDriver{base: db.Driver(), plans: sqlitePlans})
					db.Close()
				})
				ps = sqlitePlans
				o.storeOp = sqlitestore.Options{Driver: "sqlite-explain"}
			}
			e := newEnv(t, o)
			drivePages(t, e, o.adminToken)
			if st.postgres {
				explainPostgres(t, e, ps)
			}
			checkPlans(t, ps, st.postgres)
		})
	}
}

// drivePages makes a little of everything, then reads every page and runs
// every purge.
func drivePages(t *testing.T, e *env, token string) {
	_, secret := e.apiKey("Shop")
	auth := []string{"Authorization", "Bearer " + secret}
	admin := []string{"Authorization", "Bearer " + token}
	var ids []string
	for i := range 5 {
		ids = append(ids, e.paid(fmt.Sprintf("plan-%d", i), auth...))
	}
	e.pay("plan-declined", `{"amount":1000,"currency":"EUR","source":"tok_chargeDeclined"}`, auth...)
	if r := e.refund(ids[0], "plan-refund", `{"amount":100}`, auth...); r.Status != 201 {
		t.Fatalf("refund = %d %s", r.Status, r.Body)
	}
	a, err := e.DB.Attempt(context.Background(), e.scopeOf(t, ids[1], secret), "plan-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		"/admin", "/admin?status=succeeded", "/admin?status=in_progress", "/admin?q=plan-", "/admin?q=" + ids[1],
		"/admin?q=" + a.ChargeID, "/admin?status=failed&q=plan-", "/admin/attempts/" + ids[1], "/admin/events",
		"/admin/events?state=processed", "/admin/queue", "/admin/endpoints",
		"/v1/attempts", "/v1/attempts?status=succeeded", "/metrics",
	} {
		if r := e.do("GET", path, nil, admin...); r.Status != 200 && r.Status != 404 {
			t.Errorf("GET %s = %d %.200s", path, r.Status, r.Body)
		}
	}
	for _, path := range []string{
		"/v1/payments", "/v1/payments?status=succeeded", "/v1/payments?limit=2&starting_after=" + ids[3],
		"/v1/payments?limit=2&ending_before=" + ids[1], "/v1/payments/" + ids[0], "/v1/payments/" + ids[0] + "/refunds",
		"/v1/events", "/v1/events?type=payment.succeeded", "/v1/events?limit=1",
	} {
		if r := e.do("GET", path, nil, auth...); r.Status != 200 {
			t.Errorf("GET %s = %d %.200s", path, r.Status, r.Body)
		}
	}
	var list struct{ Data []struct{ ID string } }
	if err := json.Unmarshal(e.do("GET", "/v1/events?limit=2", nil, auth...).Body, &list); err != nil || len(list.Data) != 2 {
		t.Fatalf("events: %v %v", err, list)
	}
	e.do("GET", "/v1/events?limit=1&starting_after="+list.Data[0].ID, nil, auth...)
	e.do("GET", "/v1/events?limit=1&ending_before="+list.Data[1].ID, nil, auth...)
	// A purge of every kind, run as if far in the future, so each loop
	// deletes and comes back for more.
	p, err := payment.NewPurger(payment.Purger{Store: e.DB, Retention: time.Hour, PaymentRetention: 2 * time.Hour, BatchSize: 2,
		Now: func() time.Time { return time.Now().Add(24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// explainPostgres EXPLAINs every statement the tracer saw, with its
// arguments, with sequential scans off.
func explainPostgres(t *testing.T, e *env, ps *plans) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	// Each index's first column: a condition that does not name it reads
	// the whole index (checkPlans).
	rows, err := conn.Query(ctx, `SELECT i.indexrelid::regclass::text, a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid::regclass::text = ANY($1)`, largeTables)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var index, column string
		if err := rows.Scan(&index, &column); err != nil {
			t.Fatal(err)
		}
		ps.leading[index] = column
	}
	rows.Close()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for q, args := range ps.args {
		rows, err := conn.Query(ctx, "EXPLAIN "+q, args...)
		if err != nil {
			ps.plans[q] = []string{"EXPLAIN failed: " + err.Error()}
			continue
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		ps.plans[q] = plan
	}
}

// fullScanAllowed are statements (a part of their text) that may read a
// large table whole, each with the reason.
var fullScanAllowed = map[string]string{
	// The offline queue holds what merchants' offline limits allow (a
	// total per merchant and currency), and each row leaves it once
	// forwarded: it does not grow with payments.
	"FROM forward_queue GROUP BY currency": "bounded by the offline limits",
}

// orderedWalk reports whether line is SQLite's walk of an index in the
// order q asks for, with no filter and a LIMIT: it stops after the page
// (the first page of a list, newest first), however large the table.
func orderedWalk(q, line string) bool {
	q = strings.ToUpper(oneLine(q))
	return !strings.Contains(q, " WHERE ") && strings.Contains(q, " ORDER BY ") && strings.HasSuffix(q, " LIMIT ?") &&
		strings.Contains(line, " USING INDEX ")
}

func checkPlans(t *testing.T, ps *plans, postgres bool) {
	t.Helper()
	scan := regexp.MustCompile(`^SCAN (\w+)`)
	if postgres {
		scan = regexp.MustCompile(`Seq Scan on (\w+)`)
	}
	var queries []string
	for q := range ps.plans {
		queries = append(queries, q)
	}
	sort.Strings(queries)
	indexScan := regexp.MustCompile(`Index (?:Only )?Scan (?:Backward )?(?:using|on) (\w+)`)
	for _, q := range queries {
		plan := ps.plans[q]
		index := "" // the index the line before scans, if any
		for _, line := range plan {
			// An index condition that does not name the index's first
			// column reads the whole index, as a Seq Scan would the table.
			if col, ok := ps.leading[index]; ok && strings.HasPrefix(strings.TrimSpace(line), "Index Cond:") &&
				!regexp.MustCompile(`\b`+col+`\b`).MatchString(line) {
				t.Errorf("whole index %s read (no condition on %s):\n%s\nplan:\n  %s", index, col, oneLine(q), strings.Join(plan, "\n  "))
			}
			index = ""
			if m := indexScan.FindStringSubmatch(line); m != nil {
				index = m[1]
			}
			if strings.HasPrefix(line, "EXPLAIN failed") {
				t.Errorf("%s\n%s", line, q)
			}
			m := scan.FindStringSubmatch(strings.TrimSpace(line))
			if m == nil || !large(m[1], postgres) {
				continue
			}
			if allowedScan(q) || orderedWalk(q, line) {
				continue
			}
			t.Errorf("full scan of %s:\n%s\nplan:\n  %s", m[1], oneLine(q), strings.Join(plan, "\n  "))
		}
	}
	if testing.Verbose() {
		for _, q := range queries {
			t.Logf("%s\n  %s", oneLine(q), strings.Join(ps.plans[q], "\n  "))
		}
	}
}

// smallTables are the tables (and temporary tables and aliases) that do not
// grow with payments: SQLite's plans name a table by its alias, so what is
// not known small is taken for large.
var smallTables = []string{"merchants", "m", "api_keys", "settings", "endpoints", "e", "offline_limits",
	"purged_attempts", "purged_payments", "purged_events", "sqlite_schema", "sqlite_master", "CONSTANT"}

func large(table string, postgres bool) bool {
	if postgres {
		return slices.Contains(largeTables, table)
	}
	return !slices.Contains(smallTables, table) && !strings.HasPrefix(table, "pragma_")
}

func oneLine(q string) string { return strings.Join(strings.Fields(q), " ") }

func allowedScan(q string) bool {
	for s := range fullScanAllowed {
		if strings.Contains(oneLine(q), s) {
			return true
		}
	}
	return false
}
