package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/private/privatetest"
	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
)

// MustOpen opens a store on a fresh file in t.TempDir.
func MustOpen(tb testing.TB, opts Options) *DB {
	tb.Helper()
	return mustOpenPath(tb, filepath.Join(tb.TempDir(), "oncepay.db"), opts)
}

func mustOpenPath(tb testing.TB, path string, opts Options) *DB {
	tb.Helper()
	schema, err := os.ReadFile("../schema.sql")
	if err != nil {
		tb.Fatal(err)
	}
	db, err := Open(context.Background(), path, string(schema), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newAttempt is an attempt of scope "s", as the contract's tests make them.
var newAttempt = storetest.NewAttempt

// The store contract, as every store keeps it.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		db := MustOpen(t, Options{})
		return storetest.Harness{
			Store:       db,
			HoldWrites:  func(t *testing.T) func() { return holdWriter(t, db) },
			WaitBlocked: func(t *testing.T, n int) { waitQueued(t, db, int64(n)) },
			Pair: func(t *testing.T, now func() time.Time) (a, b payment.Database) {
				path := filepath.Join(t.TempDir(), "oncepay.db")
				return mustOpenPath(t, path, Options{Now: now}), mustOpenPath(t, path, Options{Now: now})
			},
			Exec: func(t *testing.T, sql string) {
				if _, err := db.w.Exec(sql); err != nil {
					t.Fatal(err)
				}
			},
			InFlight: func(t *testing.T, sql string) func() { return inFlight(t, db, sql) },
		}
	})
}

// holdWriter occupies the store's one writer until release is called: the
// writes that come meanwhile queue behind it.
func holdWriter(t *testing.T, db *DB) (release func()) {
	t.Helper()
	held, done := make(chan struct{}), make(chan struct{})
	go func() {
		db.write(context.Background(), func(context.Context, *sql.Tx) error {
			close(held)
			<-done
			return nil
		})
	}()
	<-held
	var once sync.Once
	release = func() { once.Do(func() { close(done) }) }
	t.Cleanup(release)
	return release
}

// inFlight runs sql in a write of the store's one writer and holds it
// there, not committed, until commit is called: every write that comes
// meanwhile queues behind it.
func inFlight(t *testing.T, db *DB, query string) (commit func()) {
	t.Helper()
	written, done := make(chan error, 1), make(chan struct{})
	go func() {
		db.write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, query)
			written <- err
			if err == nil {
				<-done
			}
			return err
		})
	}()
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	commit = func() { once.Do(func() { close(done) }) }
	t.Cleanup(commit)
	return commit
}

// waitQueued waits until n writes queue for the writer.
func waitQueued(t *testing.T, db *DB, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for db.writer.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("writes queued = %d after 10s, want %d", db.writer.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Group commit: concurrent writes share transactions, and a write that
// fails (here, a constraint violation) fails alone.
func TestGroupCommitIsolatesFailures(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{MaxWait: 20 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			errs[i] = db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
				id := fmt.Sprintf("mer_%d", i)
				if i%4 == 0 {
					id = "mer_dup" // all but the first of these violate the primary key
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO merchants (id, name, created_at) VALUES (?, 'n', 0)`, id)
				return err
			})
		})
	}
	wg.Wait()
	var failed int
	for i, err := range errs {
		if err != nil {
			if i%4 != 0 {
				t.Errorf("write %d failed: %v", i, err)
			}
			failed++
		}
	}
	merchants, err := db.Merchants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := 40 - failed; len(merchants) != want || failed != 9 {
		t.Errorf("rows = %d with %d failed, want %d rows and 9 failed", len(merchants), failed, want)
	}
	if commits, writes := db.WriteStats(); commits >= writes {
		t.Errorf("commits = %d for %d writes, want batches of more than one", commits, writes)
	}
}

// What a write reports is durable: it is seen by a fresh connection, and a
// batch whose transaction broke reports failure for every write in it.
func TestWriteVisibleAfterReturn(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	db := mustOpenPath(t, path, Options{})
	if ok, err := db.Claim(ctx, newAttempt("k", t0, time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var n int
	if err := other.QueryRow(`SELECT count(*) FROM payment_attempts`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows seen by another connection = %d (%v), want 1", n, err)
	}
	var mode string
	db.w.QueryRow(`PRAGMA synchronous`).Scan(&mode)
	if mode != "2" {
		t.Errorf("synchronous = %s, want 2 (FULL)", mode)
	}
}

func TestCloseDrainsAndRefuses(t *testing.T) {
	db := MustOpen(t, Options{})
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			_, err := db.Claim(context.Background(), newAttempt(fmt.Sprint(i), t0, time.Minute))
			if err != nil && !errors.Is(err, ErrClosed) {
				t.Errorf("claim during close: %v", err)
			}
		})
	}
	db.Close()
	wg.Wait()
	if _, err := db.Claim(context.Background(), newAttempt("after", t0, time.Minute)); !errors.Is(err, ErrClosed) {
		t.Errorf("claim after Close = %v, want ErrClosed", err)
	}
}

// A backup taken while writes go on is a complete, consistent database.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	for i := range 100 {
		db.Claim(ctx, newAttempt(fmt.Sprint("before-", i), t0, time.Minute))
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				db.Claim(ctx, newAttempt(fmt.Sprint("during-", i), t0, time.Minute))
			}
		}
	})
	to := filepath.Join(t.TempDir(), "backup.db")
	err := db.Backup(ctx, to)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	copyDB := mustOpenPath(t, to, Options{})
	var ok string
	copyDB.r.QueryRow(`PRAGMA integrity_check`).Scan(&ok)
	counts, err := copyDB.Counts(ctx)
	if ok != "ok" || err != nil || counts[payment.InProgress] < 100 {
		t.Errorf("backup: integrity %q, counts %v (%v); want ok and at least the 100 rows before", ok, counts, err)
	}
	if fi, err := os.Stat(to); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file mode = %v (%v), want 600", fi.Mode().Perm(), err)
	}
	if err := db.Backup(ctx, to); err == nil {
		t.Errorf("Backup over an existing file succeeded")
	}
}

// Unless told otherwise, a write waits for another process holding the file
// (an operator's CLI, a backup) rather than failing at once; told a short
// wait, it fails as unavailable after it.
func TestBusyTimeout(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	waits := mustOpenPath(t, path, Options{})
	impatient := mustOpenPath(t, path, Options{BusyTimeout: 50 * time.Millisecond})
	lock := func(hold time.Duration) (locked, released chan struct{}) {
		locked, released = make(chan struct{}), make(chan struct{})
		go func() {
			defer close(released)
			other, err := sql.Open("sqlite", path)
			if err != nil {
				t.Error(err)
				return
			}
			defer other.Close()
			conn, err := other.Conn(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
				t.Error(err)
				return
			}
			close(locked)
			time.Sleep(hold)
			conn.ExecContext(ctx, `ROLLBACK`)
		}()
		<-locked
		return locked, released
	}
	_, released := lock(time.Second)
	if ok, err := impatient.Claim(ctx, newAttempt("impatient", t0, time.Minute)); ok || payment.ErrorCode(err) != payment.EUNAVAILABLE {
		t.Errorf("claim under a lock held longer than its 50ms busy timeout = %v, %v, want unavailable", ok, err)
	}
	<-released
	_, released = lock(time.Second)
	if ok, err := waits.Claim(ctx, newAttempt("patient", t0, time.Minute)); !ok || err != nil {
		t.Errorf("claim under a lock held 1s, default busy timeout = %v, %v, want it to wait and win", ok, err)
	}
	<-released
}

// A database made before merchants (the API key's id was the scope) is
// migrated when opened: each key becomes a merchant with the key's id and
// name, and still authenticates to that scope; opening it again changes
// nothing.
func TestMigrateKeysToMerchants(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Exec(`CREATE TABLE api_keys (
		id          TEXT    PRIMARY KEY,
		name        TEXT    NOT NULL,
		secret_hash BLOB    NOT NULL UNIQUE,
		created_at  INTEGER NOT NULL,
		revoked_at  INTEGER
	);
	INSERT INTO api_keys VALUES ('key_live', 'Shop', ?, 1000, NULL), ('key_gone', 'Old', ?, 2000, 3000)`,
		payment.HashSecret("opk_live"), payment.HashSecret("opk_gone"))
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		db := mustOpenPath(t, path, Options{})
		merchants, err := db.Merchants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(merchants) != 2 || merchants[0].ID != "key_live" || merchants[0].Name != "Shop" || merchants[0].LiveKeys != 1 ||
			merchants[1].ID != "key_gone" || merchants[1].LiveKeys != 0 {
			t.Errorf("merchants = %+v, want key_live (Shop, 1 live key) and key_gone (no live key)", merchants)
		}
		if scope, err := db.Authenticate(ctx, "opk_live"); scope != "key_live" || err != nil {
			t.Errorf("Authenticate(the old live secret) = %q, %v, want its old scope", scope, err)
		}
		if _, err := db.Authenticate(ctx, "opk_gone"); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
			t.Errorf("Authenticate(the old revoked secret) = %v, want unauthorized", err)
		}
		db.Close()
	}
}

// Single-statement writes share transactions without savepoints: a failing
// statement (here a CHECK violation) is undone alone by SQLite, with what
// its trigger did (a payment's record settles its payment row).
func TestGroupCommitOneStatementFailsAlone(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{MaxWait: 20 * time.Millisecond})
	ids := make([]string, 40)
	for i := range ids {
		a := newAttempt(fmt.Sprint(i), t0, time.Minute)
		db.Claim(ctx, a)
		ids[i] = a.ID
	}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			status := payment.Succeeded
			if i%4 == 0 {
				status = "bogus" // violates the CHECK on status
			}
			_, errs[i] = db.Record(ctx, payment.KindPayment, "s", fmt.Sprint(i), 1, payment.Outcome{Status: status, ResponseStatus: 201, ResponseBody: []byte("{}")}, t0)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i%4 == 0) {
			t.Errorf("record %d: err = %v, want an error only for the bogus ones", i, err)
		}
	}
	counts, _ := db.Counts(ctx)
	if counts[payment.Succeeded] != 30 || counts[payment.InProgress] != 10 {
		t.Errorf("counts = %v, want 30 succeeded and the 10 bogus ones still in progress", counts)
	}
	for i, id := range ids {
		want := payment.Succeeded
		if i%4 == 0 {
			want = payment.InProgress
		}
		if p, err := db.Payment(ctx, "s", id); err != nil || p.Status != want {
			t.Errorf("payment %d = %v, %v, want %s", i, p, err, want)
		}
	}
	if commits, writes := db.WriteStats(); commits >= writes {
		t.Errorf("commits = %d for %d writes, want batches of more than one", commits, writes)
	}
}

// The database, its WAL and shared memory are readable by their owner
// only, under the usual umask 022; a database left readable by others is
// made private when opened again.
func TestFilesPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oncepay.db")
	n := 0
	privatetest.SQLite(t, path, func() func() {
		db := mustOpenPath(t, path, Options{})
		n++
		if ok, err := db.Claim(context.Background(), newAttempt(fmt.Sprint("k", n), t0, time.Minute)); !ok || err != nil {
			t.Fatal(ok, err)
		}
		return func() { db.Close() }
	})
}

func schemaSQL(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../schema.sql")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// A migration that cannot apply stops the start, and leaves the database as
// it was: no half-migrated file is served.
func TestMigrationFailureStopsOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oncepay.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	// Keys from before merchants, beside a merchants table the migration
	// does not expect: its CREATE TABLE fails.
	_, err = old.Exec(`CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL, secret_hash BLOB NOT NULL UNIQUE,
		created_at INTEGER NOT NULL, revoked_at INTEGER);
	INSERT INTO api_keys VALUES ('key_1', 'Shop', x'00', 1000, NULL);
	CREATE TABLE merchants (id TEXT PRIMARY KEY)`)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile("../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if db, err := Open(context.Background(), path, string(schema), Options{}); err == nil {
		db.Close()
		t.Fatal("Open of a database whose migration fails succeeded")
	}
	var keys, merchantColumn int
	err = old.QueryRow(`SELECT (SELECT count(*) FROM api_keys),
		(SELECT count(*) FROM pragma_table_info('api_keys') WHERE name = 'merchant_id')`).Scan(&keys, &merchantColumn)
	old.Close()
	if err != nil || keys != 1 || merchantColumn != 0 {
		t.Errorf("after the failed migration: %d keys, merchant_id column %d, %v; want the key kept, the table as it was", keys, merchantColumn, err)
	}
}

// A database made before payments outlived their keys is migrated at
// open: every attempt gets its payment, refundable and kept past the key.
func TestMigratePaymentsFromAttempts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Exec(`CREATE TABLE payment_attempts (
		scope TEXT NOT NULL, idempotency_key TEXT NOT NULL, id TEXT NOT NULL UNIQUE,
		request_hash BLOB NOT NULL, request BLOB NOT NULL, amount INTEGER NOT NULL, currency TEXT NOT NULL,
		status TEXT NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed')), fence INTEGER NOT NULL,
		lease_expires_at INTEGER, response_status INTEGER, response_body BLOB, charge_id TEXT, failure_code TEXT,
		created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, PRIMARY KEY (scope, idempotency_key));
	INSERT INTO payment_attempts VALUES ('s', 'k', 'pay_OLD', x'00', '{"amount":1000,"currency":"EUR","source":"tok_visa"}',
		1000, 'EUR', 'succeeded', 1, NULL, 201, '{}', 'ch_old', NULL, 1000, 1000)`)
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := mustOpenPath(t, path, Options{})
	p, err := db.Payment(ctx, "s", "pay_OLD")
	if err != nil || p.Status != payment.Succeeded || p.ChargeID != "ch_old" || p.Refundable() != 1000 {
		t.Fatalf("the old attempt's payment = %+v, %v; want succeeded, ch_old, 1000 refundable", p, err)
	}
	if a, err := db.Attempt(ctx, "s", "k"); err != nil || a.Kind != payment.KindPayment {
		t.Errorf("the old attempt = %+v, %v; want a payment attempt", a, err)
	}
}

// A database made before attempts recorded their provider gives each the
// provider it is bound to; a file never bound leaves them unknown.
func TestMigrateAttemptsProvider(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		bound, want string
	}{{"http://bank:1", "http://bank:1"}, {"", ""}} {
		path := filepath.Join(t.TempDir(), "oncepay.db")
		db := mustOpenPath(t, path, Options{})
		if tc.bound != "" {
			if err := db.BindProvider(ctx, tc.bound); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range []string{"paid", "in-flight"} {
			if ok, err := db.Claim(ctx, newAttempt(k, t0, time.Minute)); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
		db.Record(ctx, payment.KindPayment, "s", "paid", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}"), ChargeID: "ch_1"}, t0)
		if _, err := db.w.Exec(`ALTER TABLE payment_attempts DROP COLUMN provider`); err != nil { // the layout of then
			t.Fatal(err)
		}
		db.Close()
		db = mustOpenPath(t, path, Options{})
		for _, k := range []string{"paid", "in-flight"} {
			if a, err := db.Attempt(ctx, "s", k); err != nil || a.Provider != tc.want {
				t.Errorf("bound to %q: %s after the migration = %+v, %v; want provider %q", tc.bound, k, a, err, tc.want)
			}
		}
	}
}

// The file an oncepay with a unique (scope, key_hash) on payments and
// refunds made (../server/testdata/made-by-ea45566: a payment and a refund
// of it whose keys were purged, a live payment) opens without those
// indexes, its two purged keys in expired_keys, every row kept.
// server.TestMigrateDatabaseMadeBeforeExpiredKeys has what the API says.
func TestMigrateToExpiredKeys(t *testing.T) {
	b, err := os.ReadFile("../server/testdata/made-by-ea45566/oncepay.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "oncepay.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db := mustOpenPath(t, path, Options{})
	var unique, payments, refunds int
	var expired string
	err = db.r.QueryRow(`SELECT
		(SELECT count(*) FROM pragma_index_list('payments') WHERE origin = 'u') +
		(SELECT count(*) FROM pragma_index_list('refunds') WHERE origin = 'u'),
		(SELECT count(*) FROM payments), (SELECT count(*) FROM refunds),
		(SELECT group_concat(kind || ' ' || id, ', ') FROM (SELECT kind, id FROM expired_keys ORDER BY kind))`).Scan(&unique, &payments, &refunds, &expired)
	if err != nil {
		t.Fatal(err)
	}
	if unique != 0 || payments != 2 || refunds != 1 ||
		expired != "payment pay_HONV7TQRFCR3LSSKBLWH6KEBWU, refund re_HONV7TSRPJVGN4SVIW7AW7VVTE" {
		t.Errorf("after the migration: %d unique indexes, %d payments, %d refunds, expired keys %q; want 0, 2, 1 and the purged payment's and refund's",
			unique, payments, refunds, expired)
	}
	var refundsIndex int
	if err := db.r.QueryRow(`SELECT count(*) FROM pragma_index_list('refunds') WHERE name = 'refunds_payment'`).Scan(&refundsIndex); err != nil || refundsIndex != 1 {
		t.Errorf("refunds_payment index: %d, %v; want it back", refundsIndex, err)
	}
}

// A database made before offline payments is migrated at open: its
// attempts and payments take the statuses queued and expired, a payment
// made before the upgrade can be queued, and nothing is copied or lost.
func TestMigrateOfflineStatuses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oncepay.db")
	schema, err := os.ReadFile("../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	older := strings.ReplaceAll(string(schema), statusCheckV2, statusCheckV1)
	if older == string(schema) {
		t.Fatal("schema.sql has no status CHECK to make older")
	}
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Exec(older)
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	db := mustOpenPath(t, path, Options{})
	a := newAttempt("k", time.Now(), time.Minute)
	if ok, err := db.Claim(ctx, a); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if err := db.SetOfflineLimits(ctx, "s", &payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 1000, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if v, err := db.Queue(ctx, "s", "k", 1, payment.QueuedOutcome(*a), false, time.Now()); v != payment.QueueAccepted || err != nil {
		t.Fatalf("Queue on a migrated database = %s, %v", v, err)
	}
	var n int
	if err := db.r.QueryRow(`SELECT count(*) FROM sqlite_schema
		WHERE name IN ('payment_attempts', 'payments') AND instr(sql, ?) > 0`, statusCheckV1).Scan(&n); err != nil || n != 0 {
		t.Errorf("tables with the old CHECK = %d, %v, want 0", n, err)
	}
	var check string
	if err := db.r.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check = %q, %v", check, err)
	}
}

// A file made before the admin list's index (the oldest kept,
// made-by-d4adef9) gets it at open, and the list walks it instead of
// sorting the table.
func TestOlderFileGetsTheAdminIndex(t *testing.T) {
	b, err := os.ReadFile("../server/testdata/made-by-d4adef9/oncepay.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "oncepay.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	db := mustOpenPath(t, path, Options{})
	var n int
	if err := db.r.QueryRow(`SELECT count(*) FROM pragma_index_list('payment_attempts') WHERE name = 'payment_attempts_created'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("payment_attempts_created: %d, %v; want it made at open", n, err)
	}
	var plan []string
	rows, err := db.r.Query(`EXPLAIN QUERY PLAN SELECT id FROM payment_attempts ORDER BY created_at DESC, id DESC LIMIT 50`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if got := strings.Join(plan, "; "); !strings.Contains(got, "USING INDEX payment_attempts_created") || strings.Contains(got, "TEMP B-TREE FOR ORDER BY") {
		t.Errorf("the admin list's plan = %q, want a walk of payment_attempts_created, no sort of the table", got)
	}
	list, err := db.ListAttempts(context.Background(), payment.AttemptFilter{Limit: 50})
	if err != nil || len(list) != 4 {
		t.Fatalf("ListAttempts = %d attempts, %v; want the file's four", len(list), err)
	}
	for i := 1; i < len(list); i++ {
		if list[i].CreatedAt.After(list[i-1].CreatedAt) {
			t.Errorf("ListAttempts: %s (%v) after %s (%v), want newest first", list[i].ID, list[i].CreatedAt, list[i-1].ID, list[i-1].CreatedAt)
		}
	}
}

// NoCheckpoint leaves checkpoints to a replicator: the writer's automatic
// checkpoint is off, and only with the option.
func TestNoCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want int
	}{
		{Options{}, 1000},
		{Options{NoCheckpoint: true}, 0},
	} {
		db := MustOpen(t, tc.opts)
		var got int
		if err := db.w.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("NoCheckpoint %v: wal_autocheckpoint = %d, want %d", tc.opts.NoCheckpoint, got, tc.want)
		}
	}
}

// BulkLoad tunes the writer's connection alone, and only until Close: the
// load's connection has a large cache, its statement journals in memory, no
// fsync per commit and checkpoints (NoCheckpoint or not); after Close the
// WAL is folded into the file, and the file opens as durable as any.
func TestBulkLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oncepay.db")
	db := mustOpenPath(t, path, Options{BulkLoad: true, NoCheckpoint: true})
	for name, want := range map[string]int64{"synchronous": 0, "temp_store": 2,
		"cache_size": -BulkCacheBytes / 1024, "wal_autocheckpoint": 1000} {
		if got := pragma(t, db, name); got != want {
			t.Errorf("BulkLoad: %s = %d, want %d", name, got, want)
		}
	}
	fillUnpurged(t, db, 600)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		t.Errorf("after Close the WAL holds %d bytes, want it checkpointed", fi.Size())
	}
	db = mustOpenPath(t, path, Options{})
	for name, want := range map[string]int64{"synchronous": 2, "auto_vacuum": autoVacuumIncremental} {
		if got := pragma(t, db, name); got != want {
			t.Errorf("reopened: %s = %d, want %d", name, got, want)
		}
	}
	var mode string
	var payments int
	if err := db.r.QueryRow(`SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT count(*) FROM payments)`).Scan(&mode, &payments); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || payments != 600 {
		t.Errorf("reopened: journal_mode %s, %d payments; want wal, 600", mode, payments)
	}
}

// A restored file is marked until serve has settled it, and no lease in it
// outlives the restore: their holders ran on the machine that was lost.
func TestMarkRestored(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	if note, _, err := db.Restored(ctx); err != nil || note != "" {
		t.Fatalf("Restored before any restore = %q, %v, want none", note, err)
	}
	for k, claimed := range map[string]time.Time{"live": t0, "expired": t0.Add(-2 * time.Minute)} {
		if ok, err := db.Claim(ctx, newAttempt(k, claimed, time.Minute)); !ok || err != nil {
			t.Fatalf("claim %s = %v, %v", k, ok, err)
		}
	}
	restoredAt := t0.Add(time.Second)
	if err := db.MarkRestored(ctx, "file:///replica up to then", restoredAt); err != nil {
		t.Fatal(err)
	}
	note, at, err := db.Restored(ctx)
	if err != nil || note != "file:///replica up to then" || !at.Equal(restoredAt) {
		t.Errorf("Restored = %q, %v, %v, want the note and %v", note, at, err, restoredAt)
	}
	for k, want := range map[string]time.Time{"live": restoredAt, "expired": t0.Add(-time.Minute)} {
		a, err := db.Attempt(ctx, "s", k)
		if err != nil {
			t.Fatal(err)
		}
		if !a.LeaseExpiresAt.Equal(want) {
			t.Errorf("%s: lease until %v, want %v", k, a.LeaseExpiresAt, want)
		}
	}
	if err := db.ClearRestored(ctx); err != nil {
		t.Fatal(err)
	}
	if note, _, err := db.Restored(ctx); err != nil || note != "" {
		t.Errorf("Restored after ClearRestored = %q, %v, want none", note, err)
	}
}

// A merchant's events are listed by walks of the outbox's primary key,
// one a type, never a scan or a sort of the merchant's events.
func TestOutboxListWalksThePrimaryKey(t *testing.T) {
	db := MustOpen(t, Options{})
	for _, f := range []payment.OutboxFilter{
		{Scope: "s", Limit: 10},
		{Scope: "s", Limit: 10, StartingAfter: "evt_1"},
		{Scope: "s", Limit: 10, EndingBefore: "evt_1", Type: payment.EventPaymentFailed},
	} {
		q, args := outboxQuery(f)
		rows, err := db.r.Query(`EXPLAIN QUERY PLAN `+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(detail, " events") {
				plan = append(plan, detail)
			}
		}
		rows.Close()
		want := len(payment.EventTypes)
		if f.Type != "" {
			want = 1
		}
		if len(plan) != want {
			t.Errorf("%+v: plan %q, want %d searches of events", f, plan, want)
		}
		for _, step := range plan {
			if !strings.HasPrefix(step, "SEARCH events USING INDEX sqlite_autoindex_events_1 (scope=? AND type=?") {
				t.Errorf("%+v: plan step %q, want a search of the primary key", f, step)
			}
		}
	}
}
