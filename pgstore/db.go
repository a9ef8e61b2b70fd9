// Package pgstore keeps oncepay's attempts, merchants and API keys in
// PostgreSQL, so that any number of oncepay instances can share one
// database. It means what sqlitestore means, statement for statement: the
// claim is an INSERT ... ON CONFLICT DO NOTHING whose rows affected decide,
// and every later write is one guarded UPDATE.
package pgstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
)

// Schema is the schema Open applies: schema.sql beside this file.
//
//go:embed schema.sql
var Schema string

// schemaLock is the advisory lock key under which an instance applies the
// schema: two instances starting together would race on CREATE TABLE.
const schemaLock = 0x6f6e6365706179 // "oncepay"

// DB is oncepay's PostgreSQL database, through a pool of connections.
type DB struct {
	pool *pgxpool.Pool
	// answers are the final answers replays were given, so a replay reads
	// no table; nil if Options.ReplayCacheBytes is negative.
	answers *replaycache.Cache
}

// Options tune a store. The zero value is the production setting.
type Options struct {
	// ReplayCacheBytes bounds the memory of the final answers kept for
	// replays (package replaycache). Default replaycache.DefaultBytes;
	// negative keeps none. Another instance's purge is seen within
	// replaycache.TTL.
	ReplayCacheBytes int
	// Now is the clock the replay cache ages by. Default time.Now.
	Now func() time.Time
	// Tracer, if set, is told of every statement the store runs (a test
	// EXPLAINs them).
	Tracer pgx.QueryTracer
}

var (
	_ payment.Database = (*DB)(nil)
	_ payment.Store    = (*DB)(nil)
)

// IsURL reports whether dsn names a PostgreSQL database rather than a
// SQLite file.
func IsURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// Open connects to the database at url (postgres://...) and applies the
// schema. A url without pool_max_conns gets a pool of 4 connections per
// core, at least 8; without connect_timeout, 5s, so a database that is
// down answers 503 soon rather than holding requests.
func Open(ctx context.Context, url string, opts Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", errors.New(redact(err.Error(), url)))
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(8, 4*runtime.GOMAXPROCS(0)))
	}
	if !strings.Contains(url, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if opts.ReplayCacheBytes == 0 {
		opts.ReplayCacheBytes = replaycache.DefaultBytes
	}
	db := &DB{pool: pool}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	db.answers = replaycache.New(opts.ReplayCacheBytes, db.purgeVersion, opts.Now)
	if err := db.applySchema(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("apply schema to %s@%s/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return db, nil
}

// redact removes the password of url from a message that quotes url.
func redact(msg, url string) string {
	if i, j := strings.Index(url, "://"), strings.LastIndex(url, "@"); i >= 0 && j > i {
		if k := strings.Index(url[i+3:j], ":"); k >= 0 {
			return strings.ReplaceAll(msg, url[i+3+k+1:j], "xxxxx")
		}
	}
	return msg
}

// applySchema applies Schema in one transaction under an advisory lock.
// Its statements are idempotent; a later change of the schema adds its
// migration here, before Schema, as sqlitestore's migrate does.
func (db *DB) applySchema(ctx context.Context) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, Schema)
		return err
	})
}

// Close closes every connection of the pool.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// exec runs one write statement, in a transaction of its own, and returns
// the rows it affected.
func (db *DB) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := db.pool.Exec(ctx, query, args...)
	if err != nil {
		return 0, mapErr(err)
	}
	return tag.RowsAffected(), nil
}

// mapErr turns what the environment causes into EUNAVAILABLE, which clients
// see as 503 with Retry-After: a database that is down, restarting, out of
// connections or disk, a connection lost, a serialization failure. Server
// errors are matched by SQLSTATE class, never by message. A connection lost
// after a statement was sent is an unknown outcome, never a success: the
// caller sees an error, and the guarded writes make the retry safe.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The request was cancelled before it finished; retry with the same key.", Err: err}
	}
	// A connection that could not be made wraps whatever refused it, a
	// server error among them (too many clients, not accepting
	// connections): unavailable, whatever the server said.
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The database cannot be reached; retry shortly.", Err: err}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if unavailableState(pe.Code) {
			return &payment.Error{Code: payment.EUNAVAILABLE, Message: "The database is busy or unavailable; retry shortly.", Err: err}
		}
		return err
	}
	if lostConnection(err) {
		msg := "The database connection was lost; retry shortly with the same key."
		if !pgconn.SafeToRetry(err) {
			msg = "The database connection was lost before the write was confirmed; retry with the same key to learn the outcome."
		}
		return &payment.Error{Code: payment.EUNAVAILABLE, Message: msg, Err: err}
	}
	return err
}

// unavailableState reports whether SQLSTATE code says the database cannot
// do the work now but may soon.
func unavailableState(code string) bool {
	switch code {
	case "55P03", // lock_not_available
		"25006": // read_only_sql_transaction: a standby, mid-failover
		return true
	}
	switch code[:2] {
	case "08", // connection exception
		"40", // transaction rollback: serialization failure, deadlock
		"53", // insufficient resources: disk full, too many connections
		"57", // operator intervention: shutdown, cannot connect now, cancelled
		"58": // system error: I/O
		return true
	}
	return false
}

// lostConnection reports whether err (not a server error) is a connection
// that failed or could not be made.
func lostConnection(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "closed pool")
}

// BindProvider records which payment provider this database's payments go
// to, and refuses another while any attempt is in progress, as sqlitestore
// does. The settings row is locked for the check, so instances starting
// together with different providers cannot both move it.
func (db *DB) BindProvider(ctx context.Context, provider string) error {
	var (
		bound      string
		inProgress int
	)
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO settings (name, value) VALUES ('provider', $1) ON CONFLICT DO NOTHING`, provider); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT value FROM settings WHERE name = 'provider' FOR UPDATE`).Scan(&bound); err != nil {
			return err
		}
		if bound == provider {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM payment_attempts WHERE status IN ('in_progress', 'queued')`).Scan(&inProgress); err != nil {
			return err
		}
		if inProgress > 0 {
			return nil
		}
		_, err := tx.Exec(ctx, `UPDATE settings SET value = $1 WHERE name = 'provider'`, provider)
		return err
	})
	if err != nil {
		return mapErr(err)
	}
	if bound != provider && inProgress > 0 {
		return payment.ProviderBound(bound, provider, inProgress)
	}
	return nil
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// msOrNull is t in milliseconds, NULL for the zero time.
func msOrNull(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}

func fromMS(v *int64) time.Time {
	if v == nil {
		return time.Time{}
	}
	return time.UnixMilli(*v).UTC()
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// deref is *s, "" for NULL.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
