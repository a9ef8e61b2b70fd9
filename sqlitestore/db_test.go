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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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

func newAttempt(key string, now time.Time, lease time.Duration) *payment.Attempt {
	req := payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"}
	a := payment.NewAttempt("s", key, req, now, lease)
	return &a
}

// Of many concurrent claims on one key exactly one wins, and the others are
// told so by their own statement, not by an error. The writer is held until
// every claim waits for it, so each has done whatever it does before its
// write while the key is still free: a claim decided by a read would let
// them all win, every time.
func TestClaimOnceUnderConcurrency(t *testing.T) {
	const claims = 50
	db := MustOpen(t, Options{})
	release := holdWriter(t, db)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range claims {
		wg.Go(func() {
			ok, err := db.Claim(context.Background(), newAttempt("k", t0, time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	waitQueued(t, db, claims)
	release()
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Errorf("claims won = %d, want 1", got)
	}
	if _, err := db.Attempt(context.Background(), "s", "k"); err != nil {
		t.Errorf("Attempt after the claims: %v", err)
	}
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

// The record is guarded twice: by the owner's fence, so an owner whose
// attempt was taken over writes nothing while the new owner still works,
// and by the status, so nothing overwrites a final answer, not even the
// owner that wrote it. Each refused Record affects no row and says so.
func TestRecordGuards(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	if ok, err := db.Claim(ctx, newAttempt("k", t0, time.Minute)); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(2*time.Minute), t0.Add(3*time.Minute)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	late := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("late\n"), FailureCode: "card_declined"}
	if ok, err := db.Record(ctx, "s", "k", 1, late, t0.Add(2*time.Minute)); ok || err != nil {
		t.Fatalf("Record by the fenced-out owner, new owner still working = %v, %v, want false", ok, err)
	}
	if got := mustAttempt(t, db, "k"); got.Status != payment.InProgress || got.ResponseBody != nil || got.Fence != 2 {
		t.Fatalf("attempt = %s %q fence %d, want in progress, nothing stored, fence 2", got.Status, got.ResponseBody, got.Fence)
	}
	first := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("first\n"), ChargeID: "ch_1"}
	if ok, err := db.Record(ctx, "s", "k", 2, first, t0.Add(2*time.Minute)); !ok || err != nil {
		t.Fatalf("new owner's Record = %v, %v", ok, err)
	}
	again := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("again\n")}
	if ok, err := db.Record(ctx, "s", "k", 2, again, t0.Add(3*time.Minute)); ok || err != nil {
		t.Fatalf("second Record by the same owner = %v, %v, want false", ok, err)
	}
	got := mustAttempt(t, db, "k")
	if got.Status != payment.Succeeded || string(got.ResponseBody) != "first\n" || got.ChargeID != "ch_1" || !got.UpdatedAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("attempt = %s %q %s updated %v, want the first record's", got.Status, got.ResponseBody, got.ChargeID, got.UpdatedAt)
	}
}

func mustAttempt(t *testing.T, db *DB, key string) *payment.Attempt {
	t.Helper()
	a, err := db.Attempt(context.Background(), "s", key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A late owner's Record cannot overwrite what the owner that took over wrote.
func TestRecordFencedAfterTakeOver(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	a := newAttempt("k", t0, time.Minute)
	if ok, err := db.Claim(ctx, a); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(30*time.Second), t0.Add(2*time.Minute)); ok || err != nil {
		t.Fatalf("TakeOver of a live lease = %v, %v, want false", ok, err)
	}
	fence, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(2*time.Minute), t0.Add(3*time.Minute))
	if !ok || err != nil || fence != 2 {
		t.Fatalf("TakeOver of an expired lease = %d, %v, %v, want 2, true", fence, ok, err)
	}
	if _, ok, _ := db.TakeOver(ctx, "s", "k", 1, t0.Add(4*time.Minute), t0.Add(5*time.Minute)); ok {
		t.Fatalf("second TakeOver with the stale fence succeeded")
	}
	newOwner := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("new\n"), ChargeID: "ch_new"}
	if ok, err := db.Record(ctx, "s", "k", 2, newOwner, t0.Add(2*time.Minute)); !ok || err != nil {
		t.Fatalf("new owner's Record = %v, %v", ok, err)
	}
	late := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("late\n")}
	if ok, err := db.Record(ctx, "s", "k", 1, late, t0.Add(3*time.Minute)); ok || err != nil {
		t.Fatalf("late owner's Record = %v, %v, want false", ok, err)
	}
	got, err := db.Attempt(ctx, "s", "k")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != payment.Succeeded || string(got.ResponseBody) != "new\n" || got.ChargeID != "ch_new" {
		t.Errorf("attempt = %s %q %s, want the new owner's succeeded", got.Status, got.ResponseBody, got.ChargeID)
	}
}

// Release lets a retry take over at once, and only the owner can release.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	db.Claim(ctx, newAttempt("k", t0, time.Hour))
	if err := db.Release(ctx, "s", "k", 7, t0); err != nil { // not the owner's fence: no effect
		t.Fatal(err)
	}
	if _, ok, _ := db.TakeOver(ctx, "s", "k", 1, t0, t0.Add(time.Minute)); ok {
		t.Fatalf("TakeOver after a foreign Release succeeded")
	}
	db.Release(ctx, "s", "k", 1, t0)
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0, t0.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("TakeOver after Release = %v, %v, want true", ok, err)
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

// A database stays bound to its provider while payments are in flight there.
func TestBindProvider(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{})
	if err := db.BindProvider(ctx, "http://bank:1"); err != nil {
		t.Fatal(err)
	}
	if err := db.BindProvider(ctx, "http://bank:1"); err != nil {
		t.Errorf("same provider again: %v", err)
	}
	db.Claim(ctx, newAttempt("k", t0, time.Minute))
	if err := db.BindProvider(ctx, "sim"); err == nil || !strings.Contains(err.Error(), "http://bank:1") {
		t.Errorf("another provider with an attempt in progress = %v, want a refusal naming the bound one", err)
	}
	db.Record(ctx, "s", "k", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, t0)
	if err := db.BindProvider(ctx, "http://bank:2"); err != nil {
		t.Errorf("another provider with nothing in progress = %v, want the binding moved", err)
	}
	db.Claim(ctx, newAttempt("k2", t0, time.Minute))
	if err := db.BindProvider(ctx, "http://bank:1"); err == nil || !strings.Contains(err.Error(), "http://bank:2") {
		t.Errorf("back to the first provider with an attempt in progress = %v, want a refusal naming the one it moved to", err)
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
		hashSecret("opk_live"), hashSecret("opk_gone"))
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
// statement (here a CHECK violation) is undone alone by SQLite.
func TestGroupCommitOneStatementFailsAlone(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t, Options{MaxWait: 20 * time.Millisecond})
	for i := range 40 {
		db.Claim(ctx, newAttempt(fmt.Sprint(i), t0, time.Minute))
	}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			status := payment.Succeeded
			if i%4 == 0 {
				status = "bogus" // violates the CHECK on status
			}
			_, errs[i] = db.Record(ctx, "s", fmt.Sprint(i), 1, payment.Outcome{Status: status, ResponseStatus: 201, ResponseBody: []byte("{}")}, t0)
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
	if commits, writes := db.WriteStats(); commits >= writes {
		t.Errorf("commits = %d for %d writes, want batches of more than one", commits, writes)
	}
}

// A caller that gave up is not an internal error: nothing was written.
func TestCancelledIsUnavailable(t *testing.T) {
	db := MustOpen(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := db.Attempt(ctx, "s", "k"); payment.ErrorCode(err) != payment.EUNAVAILABLE {
		t.Errorf("Attempt with a cancelled context: code %q (%v), want %q", payment.ErrorCode(err), err, payment.EUNAVAILABLE)
	}
	if _, err := db.Claim(ctx, newAttempt("k", t0, time.Minute)); payment.ErrorCode(err) != payment.EUNAVAILABLE {
		t.Errorf("Claim with a cancelled context: code %q (%v), want %q", payment.ErrorCode(err), err, payment.EUNAVAILABLE)
	}
	if _, err := db.Authenticate(ctx, "opk_x"); payment.ErrorCode(err) == payment.EINTERNAL {
		t.Errorf("Authenticate with a cancelled context: %v, want no internal error", err)
	}
}

// The database, its WAL and shared memory are readable by their owner
// only, under the usual umask 022; a database left readable by others is
// made private when opened again.
func TestFilesPrivate(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	path := filepath.Join(t.TempDir(), "oncepay.db")
	files := []string{path, path + "-wal", path + "-shm"}
	checkModes := func(when string) {
		t.Helper()
		for _, p := range files {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if mode := fi.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s: %s mode = %o, want 600", when, filepath.Base(p), mode)
			}
		}
	}
	db, err := Open(context.Background(), path, schemaSQL(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := db.Claim(context.Background(), newAttempt("k", t0, time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	checkModes("created")
	db.Close()

	for _, p := range files {
		os.Chmod(p, 0o644) // the -wal and -shm may be gone after a clean close
	}
	db = mustOpenPath(t, path, Options{})
	if ok, err := db.Claim(context.Background(), newAttempt("k2", t0, time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	checkModes("reopened")
}

func schemaSQL(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../schema.sql")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
