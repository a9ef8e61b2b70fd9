package groupcommit_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/groupcommit"
	_ "modernc.org/sqlite"
)

// open returns a one-connection database with a table t(k PRIMARY KEY, v
// CHECK v >= 0) and its writer.
func open(t *testing.T, opts groupcommit.Options) (*sql.DB, *groupcommit.Writer) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "gc.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL CHECK (v >= 0))`); err != nil {
		t.Fatal(err)
	}
	w := groupcommit.New(db, opts)
	t.Cleanup(func() { w.Close(); db.Close() })
	return db, w
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Concurrent writes share commits; a failing statement or a failing
// multi-statement write is undone alone, the others commit.
func TestFailuresStayAlone(t *testing.T) {
	db, w := open(t, groupcommit.Options{MaxWait: 20 * time.Millisecond})
	insert, err := db.Prepare(`INSERT INTO t (k, v) VALUES (?, ?)`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 60)
	for i := range errs {
		wg.Go(func() {
			switch i % 3 {
			case 0: // one statement, valid
				_, errs[i] = w.Exec(context.Background(), insert, nil, fmt.Sprint("one-", i), i)
			case 1: // one statement violating the CHECK
				_, errs[i] = w.Exec(context.Background(), insert, nil, fmt.Sprint("bad-", i), -1)
			case 2: // two statements, the second failing: the first must be undone too
				errs[i] = w.Write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, 1)`, fmt.Sprint("half-", i)); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, -1)`, fmt.Sprint("other-", i))
					return err
				})
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err == nil) != (i%3 == 0) {
			t.Errorf("write %d: err = %v, want an error only for the failing kinds", i, err)
		}
	}
	if n := count(t, db); n != 20 {
		t.Errorf("rows = %d, want the 20 valid ones (no half of a failed write)", n)
	}
	if commits, writes := w.Stats(); commits >= writes {
		t.Errorf("commits = %d for %d writes, want batches", commits, writes)
	}
}

// A caller whose context is already done is refused before its write is
// handed over, so it cannot commit behind its back.
func TestCancelledBeforeHandover(t *testing.T) {
	db, w := open(t, groupcommit.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		err := w.Write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, 1)`, time.Now().String())
			return err
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Write with a cancelled context = %v, want context.Canceled", err)
		}
	}
	if n := count(t, db); n != 0 {
		t.Errorf("rows = %d, want 0", n)
	}
}

// Close finishes what was handed over and refuses the rest.
func TestCloseDrains(t *testing.T) {
	db, w := open(t, groupcommit.Options{})
	insert, err := db.Prepare(`INSERT INTO t (k, v) VALUES (?, 1)`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 100 {
		wg.Go(func() {
			_, err := w.Exec(context.Background(), insert, nil, fmt.Sprint(i))
			if err != nil && !errors.Is(err, groupcommit.ErrClosed) {
				t.Errorf("write %d: %v", i, err)
			}
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		})
	}
	w.Close()
	wg.Wait()
	if n := count(t, db); n != ok {
		t.Errorf("rows = %d, writes told they committed = %d: every answer must match the database", n, ok)
	}
}

// A write made alone shares its transaction with no other write, and its
// held time is its own transaction's, not the wait behind the writes
// before it.
func TestWriteAlone(t *testing.T) {
	db, w := open(t, groupcommit.Options{})
	insert, err := db.Prepare(`INSERT INTO t (k, v) VALUES (?, 1)`)
	if err != nil {
		t.Fatal(err)
	}
	const blocked = 500 * time.Millisecond
	taken, queued := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // holds the writer until the others queue up, then blocked more
		w.Write(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			close(taken)
			<-queued
			time.Sleep(blocked)
			return nil
		})
	})
	<-taken
	for i := range 4 {
		wg.Go(func() {
			if _, err := w.Exec(context.Background(), insert, nil, fmt.Sprint("shared-", i)); err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		})
	}
	var held, total time.Duration
	wg.Go(func() {
		start := time.Now()
		var err error
		held, err = w.WriteAlone(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			time.Sleep(20 * time.Millisecond)
			_, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES ('alone', 1)`)
			return err
		})
		total = time.Since(start)
		if err != nil {
			t.Errorf("WriteAlone: %v", err)
		}
	})
	for w.Queued() < 5 {
		time.Sleep(time.Millisecond)
	}
	close(queued)
	wg.Wait()
	if n := count(t, db); n != 5 {
		t.Errorf("rows = %d, want 5", n)
	}
	// The blocker's, the alone write's, and one or two of the other four.
	if commits, writes := w.Stats(); commits < 3 || writes != 6 {
		t.Errorf("commits = %d for %d writes, want at least 3 for 6: the alone write in a transaction of its own", commits, writes)
	}
	if held < 20*time.Millisecond || held > total-blocked {
		t.Errorf("held = %s of %s from the call, want at least its own 20ms and not the %s it waited", held, total, blocked)
	}
}

// aloneShare runs writes alone of 10 ms each for 600 ms, beside four
// writers of their own writes if busy, and returns the part of that time
// the alone writes held the writer.
func aloneShare(t *testing.T, w *groupcommit.Writer, db *sql.DB, busy bool) float64 {
	t.Helper()
	insert, err := db.Prepare(`INSERT INTO t (k, v) VALUES (?, 1)`)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	writers := 0
	if busy {
		writers = 4
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := w.Exec(context.Background(), insert, nil, fmt.Sprint(busy, "-", g, "-", i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var held time.Duration
	start := time.Now()
	for i := 0; time.Since(start) < 600*time.Millisecond; i++ {
		h, err := w.WriteAlone(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			time.Sleep(10 * time.Millisecond)
			_, err := tx.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (?, 1)`, fmt.Sprint("alone-", busy, "-", i))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		held += h
	}
	share := float64(held) / float64(time.Since(start))
	close(stop)
	wg.Wait()
	return share
}

// While other writes keep coming, writes alone (a purge's batches) hold
// the writer for at most their share of the time (the default, a third,
// as sqlitestore runs it); with none coming, they run one after another.
func TestAloneWritesTakeTheirShare(t *testing.T) {
	db, w := open(t, groupcommit.Options{})
	if share := aloneShare(t, w, db, true); share > groupcommit.DefaultAloneShare+0.05 {
		t.Errorf("beside other writes, the writes alone held the writer %.2f of the time, want at most %.2f", share, groupcommit.DefaultAloneShare)
	}
	if share := aloneShare(t, w, db, false); share < 0.6 {
		t.Errorf("alone on the writer, the writes alone held it %.2f of the time, want them run one after another", share)
	}
}
