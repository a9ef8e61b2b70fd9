// Package groupcommit batches the writes of concurrent callers into shared
// SQLite transactions: one goroutine takes every write waiting at that
// moment, runs them in one transaction, commits (and so syncs) once, then
// answers each. Each caller still learns from its own statement what it
// did, nobody is answered before the commit holding their write, and a
// failed statement fails only its own write.
package groupcommit

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options bound a batch.
type Options struct {
	// MaxBatch caps how many writes share one transaction. 1 commits every
	// write on its own. Default 256.
	MaxBatch int
	// MaxWait is how long the writer waits for more writes to join a batch
	// that is not full. Default 0: a batch is whatever queued up while the
	// previous commit was syncing, which adds no latency when idle.
	MaxWait time.Duration
	// AloneShare is the most of the writer's time writes alone (a purge's
	// batches) take while other writes come: after one held the writer for
	// h, the next starts h×(1-AloneShare)/AloneShare after it ended if
	// another write committed in between, at once if none did. A write
	// behind an alone one still waits for it, and fewer do. Default
	// DefaultAloneShare; 1 runs them as they come.
	AloneShare float64
}

// DefaultAloneShare is a third: a purge batch that held the writer for h
// waits 2h while payments write. A quarter kept new payments' p99 lower
// beside a purge of a large file, but a purge under a saturating load fell
// behind the keys expiring; a half let their p99 reach 2x (BENCHMARKS.md,
// "A share of the writer").
const DefaultAloneShare = 1.0 / 3

// ErrClosed is returned by writes after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Writer owns a database's writing: db should have one connection, which
// only the Writer uses for writes.
type Writer struct {
	db      *sql.DB
	opts    Options
	ops     chan *writeOp
	commits atomic.Int64 // transactions committed
	writes  atomic.Int64 // writes those transactions held
	queued  atomic.Int64 // writes waiting to be taken
	quit    chan struct{}
	stopped chan struct{}
	once    sync.Once
	// aside are the writes alone taken and not yet run, in the order they
	// came: set aside when one ended a batch being collected, or while the
	// other writes have their share. aloneAt is when the next may start if
	// others wrote since the last (othersWrote). Only run touches them.
	aside       []*writeOp
	aloneAt     time.Time
	othersWrote bool
	// The savepoint statements, parsed once: the driver keeps no statement
	// cache, and parsing them was a fifth of a multi-statement write's CPU.
	// Nil if they could not be prepared; then they are run as text.
	savepointStmt, release, rollbackTo *sql.Stmt
}

// New starts the writer of db.
func New(db *sql.DB, opts Options) *Writer {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.AloneShare <= 0 || opts.AloneShare > 1 {
		opts.AloneShare = DefaultAloneShare
	}
	w := &Writer{db: db, opts: opts, ops: make(chan *writeOp), quit: make(chan struct{}), stopped: make(chan struct{})}
	w.savepointStmt, _ = db.Prepare(`SAVEPOINT op`) // an error leaves it nil: run as text
	w.release, _ = db.Prepare(`RELEASE op`)
	w.rollbackTo, _ = db.Prepare(`ROLLBACK TO op`)
	go w.run()
	return w
}

// Close finishes the writes already handed over and stops the writer; later
// writes get ErrClosed. It does not close db.
func (w *Writer) Close() {
	w.once.Do(func() { close(w.quit) })
	<-w.stopped
}

// writeOp is one caller's write: it runs inside a shared transaction and
// learns its result only after the commit is durable.
type writeOp struct {
	fn func(ctx context.Context, tx *sql.Tx) error
	// oneStatement ops need no savepoint: SQLite undoes a failed statement
	// by itself, leaving the transaction and the other ops' writes whole.
	oneStatement bool
	// alone ops run in a transaction of their own, and learn how long it
	// held the writer (held): from its BEGIN to its COMMIT's end, the
	// checkpoint that COMMIT may run included.
	alone bool
	held  time.Duration
	err   error
	done  chan struct{}
}

// Write runs fn in the writer's next transaction, under a savepoint of its
// own, and returns once that transaction is committed (or has failed). fn's
// error fails only fn. ctx bounds only the wait to be taken: fn runs under
// the batch's context, since one caller's cancellation must not interrupt a
// transaction shared by others.
func (w *Writer) Write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return w.submit(ctx, &writeOp{fn: fn})
}

// WriteAlone runs fn as Write does, but in a transaction of its own, shared
// with no other write, and returns how long that transaction held the
// writer: not the wait to be taken, which is the other writes' time. A
// long maintenance write (a purge batch) sizes itself by it; the writes
// waiting behind it run in the next transaction, and while writes keep
// coming, an alone one waits its turn (Options.AloneShare).
func (w *Writer) WriteAlone(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (held time.Duration, err error) {
	op := &writeOp{fn: fn, alone: true}
	err = w.submit(ctx, op)
	return op.held, err
}

// Exec runs one prepared statement as a write, as Write does, and returns
// the rows it affected; then, if not nil, is called with them after the
// statement has run and before its transaction commits. Most writes are one
// statement, and skipping their savepoint saves the writer two statements
// each.
func (w *Writer) Exec(ctx context.Context, stmt *sql.Stmt, then func(affected int64), args ...any) (affected int64, err error) {
	err = w.submit(ctx, &writeOp{oneStatement: true, fn: func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		if affected, err = res.RowsAffected(); err == nil && then != nil {
			then(affected)
		}
		return err
	}})
	return affected, err
}

func (w *Writer) submit(ctx context.Context, op *writeOp) error {
	if err := ctx.Err(); err != nil { // select would pick at random among ready cases
		return err
	}
	op.done = make(chan struct{})
	w.queued.Add(1)
	select {
	case w.ops <- op:
		w.queued.Add(-1)
	case <-w.quit:
		w.queued.Add(-1)
		return ErrClosed
	case <-ctx.Done():
		w.queued.Add(-1)
		return ctx.Err()
	}
	<-op.done // once handed over, the write may commit: wait to know.
	return op.err
}

// run is the only goroutine that writes. The channel is unbuffered, so
// after quit no write can be handed over and lost.
func (w *Writer) run() {
	defer close(w.stopped)
	for {
		first := w.take()
		if first == nil {
			return
		}
		w.commit(w.collect(first))
		if first.alone {
			w.aloneAt = time.Now().Add(time.Duration(float64(first.held) * (1 - w.opts.AloneShare) / w.opts.AloneShare))
		}
		w.othersWrote = !first.alone
	}
}

// take returns the first write of the next batch, nil after quit with
// nothing set aside. A write alone is set aside while the others have
// their share of the writer (owing); they run meanwhile. One handed over
// runs even after quit.
func (w *Writer) take() *writeOp {
	for {
		if len(w.aside) == 0 {
			select {
			case op := <-w.ops:
				if !op.alone || !w.owing() {
					return op
				}
				w.aside = append(w.aside, op)
			case <-w.quit:
				return nil
			}
			continue
		}
		if w.owing() {
			t := time.NewTimer(time.Until(w.aloneAt))
			select {
			case op := <-w.ops:
				t.Stop()
				if !op.alone {
					return op
				}
				w.aside = append(w.aside, op)
				continue
			case <-t.C:
			case <-w.quit:
				t.Stop()
			}
		}
		op := w.aside[0]
		w.aside = w.aside[1:]
		return op
	}
}

// owing reports whether the other writes still have their share of the
// writer before the next alone one: they wrote since the last, whose
// time is not up.
func (w *Writer) owing() bool { return w.othersWrote && time.Now().Before(w.aloneAt) }

// collect gathers the writes waiting now (and, with MaxWait, shortly) into
// one batch of at most MaxBatch. A write that must run alone ends the
// batch and starts the next.
func (w *Writer) collect(first *writeOp) []*writeOp {
	batch := []*writeOp{first}
	if first.alone {
		return batch
	}
	var deadline <-chan time.Time
	if w.opts.MaxWait > 0 {
		t := time.NewTimer(w.opts.MaxWait)
		defer t.Stop()
		deadline = t.C
	}
	for len(batch) < w.opts.MaxBatch {
		if deadline == nil {
			select {
			case op := <-w.ops:
				if op.alone {
					w.aside = append(w.aside, op)
					return batch
				}
				batch = append(batch, op)
				continue
			default:
				return batch
			}
		}
		select {
		case op := <-w.ops:
			if op.alone {
				w.aside = append(w.aside, op)
				return batch
			}
			batch = append(batch, op)
		case <-deadline:
			return batch
		}
	}
	return batch
}

// commit runs a batch in one transaction. A failed op is undone alone (by
// its savepoint, or by SQLite for one statement); a failed BEGIN or COMMIT,
// or an error that may have aborted the whole transaction (SQLite does so
// on a full disk), fails them all: nobody is told of a write that did not
// commit.
func (w *Writer) commit(batch []*writeOp) {
	defer func() {
		for _, op := range batch {
			close(op.done)
		}
	}()
	ctx := context.Background()
	start := time.Now()
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		failAll(batch, err)
		return
	}
	defer tx.Rollback()
	if len(batch) == 1 { // no savepoint needed: the transaction is the op's own
		if batch[0].err = batch[0].fn(ctx, tx); batch[0].err != nil {
			return
		}
	} else {
		for _, op := range batch {
			var broken bool
			if op.oneStatement {
				op.err = op.fn(ctx, tx)
				broken = op.err != nil && !statementOnly(op.err)
			} else {
				broken, op.err = w.savepoint(ctx, tx, op.fn)
			}
			if broken {
				failAll(batch, op.err)
				return
			}
		}
	}
	err = tx.Commit()
	batch[0].held = time.Since(start) // an alone op's answer, and the share's measure
	if err != nil {
		failAll(batch, err)
		return
	}
	w.commits.Add(1)
	w.writes.Add(int64(len(batch)))
}

// Stats returns how many transactions the writer has committed and how many
// writes they held: writes/commits is the mean batch.
func (w *Writer) Stats() (commits, writes int64) {
	return w.commits.Load(), w.writes.Load()
}

// Queued returns how many writes are waiting for the writer to take them:
// how far behind it is.
func (w *Writer) Queued() int64 { return w.queued.Load() }

// savepoint runs fn under a savepoint and undoes it if fn fails. broken
// reports that the transaction itself is gone.
func (w *Writer) savepoint(ctx context.Context, tx *sql.Tx, fn func(ctx context.Context, tx *sql.Tx) error) (broken bool, err error) {
	if err := w.exec(ctx, tx, w.savepointStmt, `SAVEPOINT op`); err != nil {
		return true, err
	}
	if err := fn(ctx, tx); err != nil {
		if rerr := w.exec(ctx, tx, w.rollbackTo, `ROLLBACK TO op`); rerr != nil {
			return true, err
		}
		if rerr := w.exec(ctx, tx, w.release, `RELEASE op`); rerr != nil {
			return true, err
		}
		return false, err
	}
	if err := w.exec(ctx, tx, w.release, `RELEASE op`); err != nil {
		return true, err
	}
	return false, nil
}

// exec runs a statement of the writer's own in tx: prepared if it could
// be, else as text.
func (w *Writer) exec(ctx context.Context, tx *sql.Tx, stmt *sql.Stmt, query string) error {
	var err error
	if stmt != nil {
		_, err = tx.StmtContext(ctx, stmt).ExecContext(ctx)
	} else {
		_, err = tx.ExecContext(ctx, query)
	}
	return err
}

// statementOnly reports whether a failed statement left its transaction
// intact: a constraint or a datatype error is undone with the statement;
// anything else (a full disk, an I/O error) may have rolled it all back.
func statementOnly(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_RANGE:
		return true
	}
	return false
}

func failAll(batch []*writeOp, err error) {
	for _, op := range batch {
		op.err = err
	}
}
