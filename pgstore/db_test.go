package pgstore

import (
	"context"
	"errors"
	neturl "net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
)

// mustOpen opens a store on a new database of the test server with a pool
// of at most maxConns connections.
func mustOpen(tb testing.TB, maxConns int) (*DB, string) {
	tb.Helper()
	url := pgtest.URL(tb)
	u, err := neturl.Parse(url)
	if err != nil {
		tb.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(maxConns))
	u.RawQuery = q.Encode()
	return mustOpenURL(tb, u.String(), Options{}), url
}

func mustOpenURL(tb testing.TB, url string, opts Options) *DB {
	tb.Helper()
	db, err := Open(context.Background(), url, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// The store contract, as every store keeps it. Writes are held by table
// locks another connection takes, which every INSERT and UPDATE of
// attempts, payments, refunds and events waits for; the pool has a
// connection for each racer.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		db, url := mustOpen(t, storetest.Races+8)
		return storetest.Harness{
			Store:       db,
			HoldWrites:  func(t *testing.T) func() { return holdWrites(t, url) },
			WaitBlocked: func(t *testing.T, n int) { waitBlocked(t, db, n) },
			Pair: func(t *testing.T, now func() time.Time) (a, b payment.Database) {
				url := pgtest.URL(t)
				return mustOpenURL(t, url, Options{Now: now}), mustOpenURL(t, url, Options{Now: now})
			},
			Exec: func(t *testing.T, sql string) {
				if _, err := db.pool.Exec(context.Background(), sql); err != nil {
					t.Fatal(err)
				}
			},
			InFlight: func(t *testing.T, sql string) func() {
				tx := otherInstance(t, url)
				if _, err := tx.Exec(context.Background(), sql); err != nil {
					t.Fatal(err)
				}
				var once sync.Once
				commit := func() {
					once.Do(func() {
						if err := tx.Commit(context.Background()); err != nil {
							t.Error(err)
						}
					})
				}
				t.Cleanup(commit)
				return commit
			},
		}
	})
}

func holdWrites(t *testing.T, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+heldTables+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(ctx)
			conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}

// heldTables are the tables holdWrites locks.
const heldTables = `payment_attempts, payments, refunds, webhook_events`

// waitBlocked waits until n statements wait for a lock.
func waitBlocked(t *testing.T, db *DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		// Every backend of this database waiting for a lock: on a held
		// table, or on a row another waiter locked first (the offline
		// limits' row, which serializes a merchant's queue).
		err := db.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes waiting = %d after 10s, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Instances starting together on a new database each apply the schema:
// the advisory lock makes them take turns, and none fails.
func TestOpenConcurrently(t *testing.T) {
	url := pgtest.URL(t)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			db, err := Open(context.Background(), url, Options{})
			if err == nil {
				db.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
}

// A server that is down, a backend killed under a connection, and a
// serialization failure are all unavailable (503 with Retry-After), never
// an internal error; a statement the server refuses for a bug is not.
func TestErrorsMapToUnavailable(t *testing.T) {
	ctx := context.Background()
	db, url := mustOpen(t, 1)
	if _, err := db.Attempt(ctx, "s", "k"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Fatalf("Attempt: %v", err)
	}
	// Kill the pool's one backend, as a restart or a failover does.
	pgtest.Exec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	// The pool pings a connection idle for over a second before using it;
	// this one is not, so the dead connection fails a statement once.
	claimed := false
	for try := 0; try < 3 && !claimed; try++ {
		ok, err := db.Claim(ctx, storetest.NewAttempt("k", time.Now(), time.Minute))
		if err != nil && payment.ErrorCode(err) != payment.EUNAVAILABLE {
			t.Fatalf("Claim after the backend was killed: %v, want unavailable", err)
		}
		claimed = ok
	}
	if !claimed {
		t.Fatal("Claim did not recover after the backend was killed")
	}

	down, err := Open(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", Options{})
	if err == nil {
		down.Close()
		t.Fatal("Open of a server that is not there succeeded")
	}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{&pgconn.PgError{Code: "40001"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "40P01"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "57P01"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "53300"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "08006"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "25006"}, payment.EUNAVAILABLE},
		{&pgconn.PgError{Code: "23505"}, payment.EINTERNAL},
		{&pgconn.PgError{Code: "42601"}, payment.EINTERNAL},
		{err, payment.EUNAVAILABLE},
		{context.Canceled, payment.EUNAVAILABLE},
		{errors.New("a bug"), payment.EINTERNAL},
	} {
		if got := payment.ErrorCode(mapErr(tt.err)); got != tt.want {
			t.Errorf("mapErr(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

// A database made before attempts recorded their provider gives each the
// provider it is bound to, once: a later start changes nothing.
func TestMigrateAttemptsProvider(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	db := mustOpenURL(t, url, Options{})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if err := db.BindProvider(ctx, "http://bank:1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Claim(ctx, storetest.NewAttempt("in-flight", t0, time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := db.pool.Exec(ctx, `ALTER TABLE payment_attempts DROP COLUMN provider`); err != nil { // the layout of then
		t.Fatal(err)
	}
	db = mustOpenURL(t, url, Options{})
	if a, err := db.Attempt(ctx, "s", "in-flight"); err != nil || a.Provider != "http://bank:1" {
		t.Errorf("after the migration = %+v, %v; want the bound provider", a, err)
	}
	later := storetest.NewAttempt("later", t0, time.Minute)
	later.Provider = ""
	if ok, err := db.Claim(ctx, later); !ok || err != nil {
		t.Fatal(ok, err)
	}
	db = mustOpenURL(t, url, Options{})
	if a, err := db.Attempt(ctx, "s", "later"); err != nil || a.Provider != "" {
		t.Errorf("an attempt claimed with no provider after the next start = %+v, %v; want none, the migration done once", a, err)
	}
}

// A database made before expired_keys (payments and refunds told a late
// retry by a unique (scope, key_hash)) loses those constraints at the next
// start, and its purged keys move to expired_keys: the late retry of each
// is still refused.
func TestMigrateToExpiredKeys(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	db := mustOpenURL(t, url, Options{})
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	paid := storetest.NewAttempt("old", t0, time.Minute)
	if ok, err := db.Claim(ctx, paid); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "old", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}"), ChargeID: "ch_1"}, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n, _, err := db.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	id := paid.ID
	refund := payment.NewRefundAttempt("s", "old-refund", payment.RefundRequest{PaymentID: id, Amount: 100}, t0, time.Minute)
	if ok, err := db.Claim(ctx, &refund); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// The layout of then: the constraints, no trigger, nothing in
	// expired_keys, and the refund's key purged too.
	for _, ddl := range []string{
		`DELETE FROM payment_attempts WHERE idempotency_key = 'old-refund'`,
		`DROP TRIGGER payment_attempts_expire ON payment_attempts`,
		`DELETE FROM expired_keys`,
		`ALTER TABLE payments ADD CONSTRAINT payments_scope_key_hash_key UNIQUE (scope, key_hash)`,
		`ALTER TABLE refunds ADD CONSTRAINT refunds_scope_key_hash_key UNIQUE (scope, key_hash)`,
	} {
		if _, err := db.pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	db = mustOpenURL(t, url, Options{})
	var constraints int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE conname IN ('payments_scope_key_hash_key', 'refunds_scope_key_hash_key')`).Scan(&constraints); err != nil || constraints != 0 {
		t.Errorf("constraints after the migration: %d, %v; want none", constraints, err)
	}
	for _, a := range []*payment.Attempt{storetest.NewAttempt("old", t0, time.Minute), storetest.NewAttempt("old-refund", t0, time.Minute)} {
		if ok, err := db.Claim(ctx, a); ok || payment.ErrorCode(err) != payment.EKEYEXPIRED {
			t.Errorf("late retry of %s after the migration = %v, %v, want refused as expired", a.Key, ok, err)
		}
	}

	// A database made the day expired_keys came had no foreign key: it
	// gains one, and loses the rows that outlived their payment.
	for _, q := range []string{
		`ALTER TABLE expired_keys DROP CONSTRAINT expired_keys_payment_id_fkey`,
		`INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id) VALUES ('s', 'x', 'payment', 'pay_gone', 'pay_gone')`,
	} {
		if _, err := db.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db = mustOpenURL(t, url, Options{})
	var fk, orphans int
	if err := db.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_constraint WHERE conname = 'expired_keys_payment_id_fkey'),
		(SELECT count(*) FROM expired_keys WHERE payment_id = 'pay_gone')`).Scan(&fk, &orphans); err != nil || fk != 1 || orphans != 0 {
		t.Errorf("after the next start: foreign key %d, rows without a payment %d, %v; want 1 and 0", fk, orphans, err)
	}
}

// One instance purges a refund's key while another purges the refund's
// payment: the key's expired_keys row never outlives the payment (which
// would refuse the key forever, naming a refund that is gone). The first
// instance's transaction is held open after its DELETE; the other's purge
// skips the payment it references, and takes it, key and all, once that
// transaction commits.
func TestPurgeOfARefundKeyRacingItsPaymentsPurge(t *testing.T) {
	ctx := context.Background()
	db, url := mustOpen(t, 8)
	paidRefundedAndPurged(t, db)
	tx := otherInstance(t, url) // the first instance's purge, in flight
	if _, err := tx.Exec(ctx, `DELETE FROM payment_attempts WHERE idempotency_key = 'ref'`); err != nil {
		t.Fatal(err)
	}
	if n, _, err := db.PurgePayments(ctx, raceT0.Add(2*time.Hour), 10); n != 0 || err != nil {
		t.Fatalf("PurgePayments while the refund key's purge is in flight = %d, %v, want 0: skipped", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _, err := db.PurgePayments(ctx, raceT0.Add(2*time.Hour), 10); n != 1 || err != nil {
		t.Fatalf("PurgePayments after = %d, %v, want 1", n, err)
	}
	keysForgotten(t, db)
}

// The same race the other way: the payment's purge is in flight when the
// refund key's purge comes; the key's move finds the payment gone once it
// commits, and the purge tries its batch once more instead of failing.
func TestPurgeOfARefundKeyAfterItsPaymentsPurge(t *testing.T) {
	ctx := context.Background()
	db, url := mustOpen(t, 8)
	paid := paidRefundedAndPurged(t, db)
	tx := otherInstance(t, url) // the other instance's payment purge, in flight
	for _, q := range []string{`DELETE FROM refunds WHERE payment_id = $1`, `DELETE FROM payments WHERE id = $1`} {
		if _, err := tx.Exec(ctx, q, paid.ID); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result)
	go func() {
		n, _, err := db.Purge(ctx, raceT0.Add(2*time.Hour), 10)
		done <- result{n, err}
	}()
	// The refund key's move waits on the payment's row.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting int
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refund key's purge never waited on the payment's purge")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.n != 1 || r.err != nil {
		t.Fatalf("Purge of the refund's key = %d, %v, want 1: its batch tried once more", r.n, r.err)
	}
	keysForgotten(t, db)
}

var raceT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// otherInstance begins a transaction on a connection of its own to the
// database at url, as another instance's would be.
func otherInstance(t *testing.T, url string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// paidRefundedAndPurged makes a payment under key "pay" and a refund of it
// under "ref", an hour later, and purges the payment's key only.
func paidRefundedAndPurged(t *testing.T, db *DB) *payment.Attempt {
	t.Helper()
	ctx := context.Background()
	settle := func(a *payment.Attempt, at time.Time) {
		t.Helper()
		a.CreatedAt, a.UpdatedAt = at, at
		if ok, err := db.Claim(ctx, a); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := db.Record(ctx, a.Kind, "s", a.Key, 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, at); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	paid := storetest.NewAttempt("pay", raceT0, time.Minute)
	settle(paid, raceT0)
	refund := payment.NewRefundAttempt("s", "ref", payment.RefundRequest{PaymentID: paid.ID, Amount: 100}, raceT0, time.Minute)
	settle(&refund, raceT0.Add(time.Hour))
	if n, _, err := db.Purge(ctx, raceT0.Add(time.Minute), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	return paid
}

// keysForgotten checks that both keys of paidRefundedAndPurged, their
// payment purged, make new payments.
func keysForgotten(t *testing.T, db *DB) {
	t.Helper()
	for _, key := range []string{"pay", "ref"} {
		if ok, err := db.Claim(context.Background(), storetest.NewAttempt(key, raceT0.Add(3*time.Hour), time.Minute)); !ok || err != nil {
			t.Errorf("Claim(%s) after its payment's purge = %v, %v, want a new payment: the key forgotten", key, ok, err)
		}
	}
}

// A claim of a key whose record another instance is purging waits for that
// purge's transaction, then finds the key expired and refuses it: the
// expired-key read is a statement after the INSERT, with a snapshot taken
// once the INSERT's wait is over (a NOT EXISTS inside the INSERT would read
// the snapshot from before the wait and let the key be claimed again).
func TestClaimWaitingForAPurgeOfItsKey(t *testing.T) {
	ctx := context.Background()
	db, url := mustOpen(t, 8)
	paid := storetest.NewAttempt("k", raceT0, time.Minute)
	if ok, err := db.Claim(ctx, paid); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, raceT0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	tx := otherInstance(t, url) // the other instance's purge, in flight
	if _, err := tx.Exec(ctx, `DELETE FROM payment_attempts WHERE idempotency_key = 'k'`); err != nil {
		t.Fatal(err)
	}
	done := claimWaiting(t, db, storetest.NewAttempt("k", raceT0.Add(time.Hour), time.Minute))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.ok || payment.ErrorCode(r.err) != payment.EKEYEXPIRED {
		t.Errorf("Claim after the purge committed = %v, %v, want refused as expired", r.ok, r.err)
	}
	if _, err := db.Attempt(ctx, "s", "k"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Attempt after the refused claim: %v, want none", err)
	}
}

// The same race for a refund's key: the late retry of a refund whose key
// another instance is purging waits for that purge, then is refused as
// expired, naming the refund, and reserves nothing; nor is the key claimed
// by the retry after. A refund's claim that read expired_keys before its
// INSERT would read it before the wait, find the key not yet moved, and
// refund the money a second time.
func TestRefundClaimWaitingForAPurgeOfItsKey(t *testing.T) {
	ctx := context.Background()
	db, url := mustOpen(t, 8)
	paid := paidRefundedAndPurged(t, db)
	refunds, err := db.Refunds(ctx, "s", paid.ID)
	if err != nil || len(refunds) != 1 {
		t.Fatalf("Refunds = %+v, %v, want the one", refunds, err)
	}
	tx := otherInstance(t, url) // the other instance's purge of the refund's key, in flight
	if _, err := tx.Exec(ctx, `DELETE FROM payment_attempts WHERE idempotency_key = 'ref'`); err != nil {
		t.Fatal(err)
	}
	retry := func(at time.Time) *payment.Attempt {
		a := payment.NewRefundAttempt("s", "ref", payment.RefundRequest{PaymentID: paid.ID, Amount: 100}, at, time.Minute)
		return &a
	}
	done := claimWaiting(t, db, retry(raceT0.Add(2*time.Hour)))
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	expired := func(what string, r claimResult) {
		t.Helper()
		var pe *payment.Error
		if r.ok || payment.ErrorCode(r.err) != payment.EKEYEXPIRED || !errors.As(r.err, &pe) ||
			pe.RefundID != refunds[0].ID || pe.PaymentID != paid.ID {
			t.Errorf("%s = %v, %v, want refused as expired, naming refund %s", what, r.ok, r.err, refunds[0].ID)
		}
	}
	expired("the retry that waited for the purge", <-done)
	ok, err := db.Claim(ctx, retry(raceT0.Add(3*time.Hour)))
	expired("a retry after it", claimResult{ok, err})
	if _, err := db.Attempt(ctx, "s", "ref"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Attempt after the refused retries: %v, want none", err)
	}
	p, err := db.Payment(ctx, "s", paid.ID)
	if err != nil || p.AmountRefunded != 100 || p.AmountReserved != 0 {
		t.Errorf("payment after the refused retries = %+v, %v, want 100 refunded, nothing reserved", p, err)
	}
	if rs, err := db.Refunds(ctx, "s", paid.ID); err != nil || len(rs) != 1 {
		t.Errorf("Refunds after the refused retries = %d, %v, want the one", len(rs), err)
	}
}

type claimResult struct {
	ok  bool
	err error
}

// claimWaiting starts db.Claim(a) and returns once the claim waits for a
// lock another transaction holds; the claim's result comes on the channel.
// A claim that returns without waiting fails the test.
func claimWaiting(t *testing.T, db *DB, a *payment.Attempt) <-chan claimResult {
	t.Helper()
	ctx := context.Background()
	done := make(chan claimResult, 1)
	go func() {
		ok, err := db.Claim(ctx, a)
		done <- claimResult{ok, err}
	}()
	for waiting := 0; waiting == 0; {
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-done:
			t.Fatalf("Claim(%s) did not wait for the other transaction: %v, %v", a.Key, r.ok, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return done
}
