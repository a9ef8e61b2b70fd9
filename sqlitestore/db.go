// Package sqlitestore keeps oncepay's attempts and API keys in one SQLite
// file. It is the only package that speaks SQL to oncepay's database.
package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"time"

	"github.com/oncepay/oncepay/internal/groupcommit"
	"github.com/oncepay/oncepay/internal/private"
	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Options tune the write path. The zero value is the production setting.
type Options struct {
	// MaxBatch caps how many writes share one transaction and one fsync
	// (group commit). 1 commits every write on its own. Default 256.
	MaxBatch int
	// MaxWait is how long the writer waits for more writes to join a batch
	// that is not full. Default 0: a batch is whatever queued up while the
	// previous commit was syncing, which adds no latency when idle.
	MaxWait time.Duration
	// BusyTimeout is how long a write waits for another process holding the
	// file (an operator's CLI) before failing as unavailable. Default 5s.
	BusyTimeout time.Duration
	// Now is the clock the view of the API keys and the replay cache age
	// by. Default time.Now.
	Now func() time.Time
	// ReplayCacheBytes bounds the memory of the final answers kept for
	// replays (package replaycache). Default replaycache.DefaultBytes;
	// negative keeps none.
	ReplayCacheBytes int
	// NoCheckpoint keeps the writer from checkpointing the WAL
	// (wal_autocheckpoint(0)): a replicator that must read every frame
	// before it reaches the database file (package replica) checkpoints
	// instead, after it has copied them.
	NoCheckpoint bool
	// BulkLoad tunes the writer's own connection for a one-shot bulk load
	// (oncepay bench fill) into a file nothing else uses: a page cache of
	// BulkCacheBytes, so a batch's pages are not spilled to the WAL and
	// read back before its commit; no fsync per commit (synchronous=OFF)
	// (its statement journals are in memory, as every writer's); and the
	// writer checkpoints the WAL as it goes, whatever NoCheckpoint says,
	// so it does not grow with the load. Close puts synchronous back to
	// FULL and then checkpoints the whole WAL into the file, synced. These
	// are the connection's settings, not the file's: the next Open is
	// durable as ever. A power loss during the load may leave a file to
	// delete.
	BulkLoad bool
	// Driver is the database/sql driver name the store opens the file with.
	// Default "sqlite" (modernc.org/sqlite); a test wraps it to see every
	// statement the store runs.
	Driver string
}

// DB is oncepay's SQLite database: one writer connection fed by a group
// commit loop, and a pool of read-only connections.
type DB struct {
	w, r   *sql.DB
	writer *groupcommit.Writer // the only writer on w
	dsn    string              // the writer's, for Backup and Vacuum
	bulk   bool                // Options.BulkLoad
	path   string              // the file
	driver string              // Options.Driver
	stmt   statements
	keys   *keyView // the live API keys, so a request reads no table to authenticate
	// answers are the final answers replays were given, so a replay reads
	// no table either; nil if Options.ReplayCacheBytes is negative.
	answers *replaycache.Cache
}

// BulkCacheBytes is the writer's page cache under Options.BulkLoad: the
// fill's move of its expired keys builds expired_keys' primary key (1.4 GB
// at ten million payments, measured) and makes its index by payment again,
// and both fit in it.
const BulkCacheBytes = 2 << 30

// ErrClosed is returned by writes after Close.
var ErrClosed = &payment.Error{Code: payment.EUNAVAILABLE, Message: "The service is shutting down; retry shortly."}

// Open opens (creating if needed) the database at path and applies schema.
func Open(ctx context.Context, path, schema string, opts Options) (*DB, error) {
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Driver == "" {
		opts.Driver = "sqlite"
	}
	fi, err := os.Stat(path)
	fresh := errors.Is(err, fs.ErrNotExist) || err == nil && fi.Size() == 0
	// The file holds payments and API key hashes: readable by its owner only.
	if err := private.SQLite(path); err != nil {
		return nil, err
	}
	// busy_timeout first, so the other pragmas wait for a lock too.
	// synchronous=FULL: a claim or a record, once answered, survives power loss.
	pragmas := func(autoVacuum bool) url.Values {
		q := url.Values{}
		q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()))
		if autoVacuum {
			// Before WAL: a new file takes it only until then (an older one
			// waits for a VACUUM: sqlitestore/vacuum.go). Only the writer of
			// a new file sets it: setting it writes the file's header even
			// where it holds already, and a connection whose commit finds
			// the WAL past its threshold checkpoints it, behind a
			// replicator's back.
			q.Add("_pragma", "auto_vacuum(INCREMENTAL)")
		}
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(FULL)")
		q.Set("_txlock", "immediate")
		return q
	}
	wq := pragmas(fresh)
	if opts.BulkLoad {
		wq.Add("_pragma", fmt.Sprintf("cache_size(%d)", -BulkCacheBytes/1024))
		wq.Add("_pragma", "synchronous(OFF)") // after synchronous(FULL): the last one holds
		opts.NoCheckpoint = false
	}
	dsn := path + "?" + wq.Encode()
	if opts.NoCheckpoint {
		// The writer's alone: the readers never commit, so never checkpoint.
		dsn += "&_pragma=wal_autocheckpoint%280%29"
	}
	// The writer's journal of each savepoint (every write of a group
	// commit has one) stays in memory: on disk it spilled to a temporary
	// file past 64 KiB, opened, written and deleted by every batch: 15-21%
	// of the store's CPU per new payment (BENCHMARKS.md). The writer only:
	// VACUUM and VACUUM INTO (dsn) would build their whole copy in memory.
	w, err := sql.Open(opts.Driver, dsn+"&_pragma=temp_store%28MEMORY%29")
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := migrate(ctx, w, schema); err != nil {
		w.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	if _, err := w.ExecContext(ctx, schema); err != nil {
		w.Close()
		return nil, fmt.Errorf("apply schema to %s: %w", path, err)
	}

	q := pragmas(false)
	q.Add("_pragma", "query_only(1)")
	r, err := sql.Open(opts.Driver, path+"?"+q.Encode())
	if err != nil {
		w.Close()
		return nil, err
	}
	n := max(4, 2*runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)

	stmt, err := prepare(ctx, w, r)
	if err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	db := &DB{w: w, r: r, dsn: dsn, path: path, bulk: opts.BulkLoad, driver: opts.Driver, stmt: stmt, keys: &keyView{now: opts.Now},
		writer: groupcommit.New(w, groupcommit.Options{MaxBatch: opts.MaxBatch, MaxWait: opts.MaxWait})}
	if opts.ReplayCacheBytes == 0 {
		opts.ReplayCacheBytes = replaycache.DefaultBytes
	}
	db.answers = replaycache.New(opts.ReplayCacheBytes, db.purgeVersion, opts.Now)
	return db, nil
}

// Close finishes the writes already queued, then closes the database.
func (db *DB) Close() error {
	db.writer.Close()
	var err error
	if db.bulk {
		// Durable again before the last checkpoint, so that one syncs
		// the file.
		_, err = db.w.Exec(`PRAGMA synchronous = FULL`)
		if err == nil {
			_, err = db.w.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
		}
	}
	return errors.Join(err, db.w.Close(), db.r.Close())
}

// write runs fn in a shared transaction under its own savepoint; see
// groupcommit.Writer.Write.
func (db *DB) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return mapErr(db.writer.Write(ctx, fn))
}

// exec runs one prepared write statement in a shared transaction and
// returns the rows it affected; then, if set, is given them before the
// commit.
func (db *DB) exec(ctx context.Context, stmt *sql.Stmt, then func(affected int64), args ...any) (int64, error) {
	n, err := db.writer.Exec(ctx, stmt, then, args...)
	return n, mapErr(err)
}

// WriteStats returns how many transactions the writer has committed and how
// many writes they held: writes/commits is the mean group-commit batch.
func (db *DB) WriteStats() (commits, writes int64) { return db.writer.Stats() }

// WritesQueued returns how many writes wait for the writer to take them.
func (db *DB) WritesQueued() int64 { return db.writer.Queued() }

// mapErr turns what the environment causes (a busy or full database, an I/O
// error) into EUNAVAILABLE, which clients see as 503 with Retry-After.
// SQLite errors are matched by their primary result code.
func mapErr(err error) error {
	switch {
	case errors.Is(err, groupcommit.ErrClosed):
		return ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up (a client that hung up): not a bug, and nothing
		// was written, so the answer, if anyone reads it, is to retry.
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The request was cancelled before it finished; retry with the same key.", Err: err}
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The database is busy; retry shortly.", Err: err}
	case sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN,
		sqlite3.SQLITE_READONLY, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_PROTOCOL:
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The database cannot take writes right now; retry shortly.", Err: err}
	}
	return err
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// Backup writes a consistent, compacted copy of the live database to path
// (VACUUM INTO), which must not exist. It reads one snapshot, so writers go
// on meanwhile; the copy is a single file with no -wal beside it.
func (db *DB) Backup(ctx context.Context, path string) error {
	// Its own connection: the readers are query_only, which forbids
	// VACUUM INTO, and the writer must not wait for a copy.
	// Created first, empty and private (VACUUM INTO fills an empty file),
	// and never over an existing one.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, private.Mode)
	if err != nil {
		return err
	}
	f.Close()
	c, err := sql.Open(db.driver, db.dsn)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err = c.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		os.Remove(path) // no half-written copy left to be mistaken for a backup
		return mapErr(err)
	}
	return nil
}

// BindProvider records which payment provider this database's payments go
// to, and refuses another while any attempt is in progress: reconcile or a
// takeover asking the wrong provider "was this charged?" would hear "no" and
// settle a real charge as not completed. With nothing in progress the
// binding moves to the new provider, as when a provider's address changes.
func (db *DB) BindProvider(ctx context.Context, provider string) error {
	var bound string
	var inProgress int
	err := db.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO settings (name, value) VALUES ('provider', ?)`, provider); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'provider'`).Scan(&bound); err != nil {
			return err
		}
		if bound == provider {
			return nil
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM payment_attempts WHERE status IN ('in_progress', 'queued')`).Scan(&inProgress); err != nil {
			return err
		}
		if inProgress > 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, `UPDATE settings SET value = ? WHERE name = 'provider'`, provider)
		return err
	})
	if err != nil {
		return err
	}
	if bound != provider && inProgress > 0 {
		return payment.ProviderBound(bound, provider, inProgress)
	}
	return nil
}

var _ payment.Database = (*DB)(nil)

// Export reads the whole database in one read transaction, a consistent
// snapshot while writers go on: what "oncepay copy" moves elsewhere.
func (db *DB) Export(ctx context.Context) (*payment.Snapshot, error) {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, mapErr(err)
	}
	defer tx.Rollback()
	s := &payment.Snapshot{Settings: map[string]string{}}
	rows, err := tx.QueryContext(ctx, `SELECT `+attemptColumns+` FROM payment_attempts ORDER BY created_at, scope, idempotency_key`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Attempts, err = scanRows(rows, scanAttempt); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+paymentColumns+`
		FROM payments p LEFT JOIN payment_attempts a ON a.id = p.id ORDER BY p.created_at, p.id`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Payments, err = scanRows(rows, scanPayment); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+refundColumns+`, r.key_hash
		FROM refunds r LEFT JOIN payment_attempts a ON a.id = r.id ORDER BY r.created_at, r.id`)
	if err != nil {
		return nil, mapErr(err)
	}
	s.Refunds, err = scanRows(rows, func(row scanner) (*payment.StoredRefund, error) {
		var r payment.StoredRefund
		err := scanRefundInto(row, &r.Refund, &r.KeyHash)
		return &r, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+eventColumns+` FROM webhook_events ORDER BY received_at, provider, event_id`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Events, err = scanRows(rows, scanEvent); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT id, name, created_at FROM merchants ORDER BY created_at, id`)
	if err != nil {
		return nil, mapErr(err)
	}
	s.Merchants, err = scanRows(rows, func(row scanner) (*payment.Merchant, error) {
		var (
			m       payment.Merchant
			created int64
		)
		err := row.Scan(&m.ID, &m.Name, &created)
		m.CreatedAt = time.UnixMilli(created).UTC()
		return &m, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT id, merchant_id, name, secret_hash, created_at, revoked_at FROM api_keys ORDER BY created_at, id`)
	if err != nil {
		return nil, mapErr(err)
	}
	s.APIKeys, err = scanRows(rows, func(row scanner) (*payment.StoredAPIKey, error) {
		var (
			k       payment.StoredAPIKey
			created int64
			revoked sql.NullInt64
		)
		err := row.Scan(&k.ID, &k.MerchantID, &k.Name, &k.SecretHash, &created, &revoked)
		k.CreatedAt, k.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
		return &k, err
	})
	if err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+outboxColumns+` FROM events ORDER BY rowid`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Outbox, err = scanRows(rows, scanOutboxEvent); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+endpointColumns+` FROM endpoints e ORDER BY e.created_at, e.id`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Endpoints, err = scanRows(rows, func(row scanner) (*payment.Endpoint, error) {
		var e payment.Endpoint
		return &e, scanEndpoint(row, &e)
	}); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries d ORDER BY d.created_at, d.event_id, d.endpoint_id`)
	if err != nil {
		return nil, mapErr(err)
	}
	if s.Deliveries, err = scanRows(rows, func(row scanner) (*payment.OutboxDelivery, error) {
		var d payment.OutboxDelivery
		return &d, scanDelivery(row, &d)
	}); err != nil {
		return nil, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT name, value FROM settings`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, err
		}
		s.Settings[name] = value
	}
	return s, mapErr(rows.Err())
}
