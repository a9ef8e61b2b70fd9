package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/oncepay/oncepay/internal/crashpoint"
	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
)

// claimSQL inserts an attempt unless its (scope, idempotency_key) exists.
const claimSQL = `INSERT INTO payment_attempts
	(scope, idempotency_key, id, request_hash, request, amount, currency,
	 status, fence, lease_expires_at, created_at, updated_at, kind, payment_id, details, provider)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
	ON CONFLICT (scope, idempotency_key) DO NOTHING`

// claimPaymentSQL is a payment's claim and its payment row in one statement
// ($17 is the key's SHA-256): no payment row unless the attempt went in.
const claimPaymentSQL = `WITH a AS (` + claimSQL + `
	RETURNING id, scope, amount, currency, status, details, created_at, updated_at)
	INSERT INTO payments (id, scope, key_hash, amount, currency, status, details, created_at, updated_at)
	SELECT id, scope, $17, amount, currency, status, details, created_at, updated_at FROM a`

// expiredKeySQL finds the payment or refund a purged key's record left.
const expiredKeySQL = `SELECT kind, id, payment_id FROM expired_keys WHERE scope = $1 AND key_hash = $2`

// Claim inserts a unless its (scope, idempotency_key) exists; the rows
// affected decide ownership, never a read. Of concurrent claims on one key,
// PostgreSQL makes all but the first wait for its commit, then do nothing.
// The payment or refund a makes is created in the same transaction (a
// payment's row in the claim's statement, a refund in payments.go); a
// refusal rolls it all back, claim included.
//
// The expired-key read comes after the INSERT, not as a NOT EXISTS inside
// it (as SQLite's one writer can): an INSERT that waited for a purge
// deleting the key's record still reads the snapshot it started with, where
// the key is not yet in expired_keys. The next statement's snapshot is newer.
func (db *DB) Claim(ctx context.Context, a *payment.Attempt) (claimed bool, err error) {
	c := *a // what the claim reserved; a is set to it only once committed
	args := []any{c.Scope, c.Key, c.ID, c.RequestHash, c.Request, c.Amount, c.Currency,
		string(c.Status), c.Fence, msOrNull(c.LeaseExpiresAt), ms(c.CreatedAt), ms(c.UpdatedAt),
		string(c.Kind), nullString(c.PaymentID), c.Details, nullString(c.Provider)}
	if c.Kind == payment.KindRefund {
		err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, claimSQL, args...)
			if err != nil || tag.RowsAffected() == 0 {
				return err // a duplicate: the caller reads the row that holds the key
			}
			if err := refuseExpiredKey(ctx, tx, &c); err != nil {
				return err
			}
			err = createRefund(ctx, tx, &c)
			claimed = err == nil
			return err
		})
	} else {
		claimed, err = db.claimPayment(ctx, &c, args)
	}
	if err != nil {
		return false, mapErr(err)
	}
	*a = c
	return claimed, nil
}

// claimPayment is a payment's Claim in two round trips instead of five:
// one pipeline that begins the transaction and holds the claim with its
// payment row and the expired-key read (its own statement, so a newer
// snapshot); then COMMIT, or ROLLBACK for a duplicate or an expired key.
func (db *DB) claimPayment(ctx context.Context, c *payment.Attempt, args []any) (claimed bool, err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release() // a connection left in a transaction is closed, not reused
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	b.Queue(claimPaymentSQL, append(args, payment.KeyHash(c.Key))...)
	b.Queue(expiredKeySQL, c.Scope, payment.KeyHash(c.Key))
	br := conn.SendBatch(ctx, b)
	tx := br.Tx()
	defer tx.Rollback(ctx) // nothing once committed
	var (
		inserted            int64
		expired             bool
		kind, id, paymentID string
	)
	_, err = br.Exec() // BEGIN
	if err == nil {
		var tag pgconn.CommandTag
		tag, err = br.Exec()
		inserted = tag.RowsAffected()
	}
	if err == nil {
		err = br.QueryRow().Scan(&kind, &id, &paymentID)
		expired = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return false, err
	case inserted == 0:
		return false, nil // a duplicate: the caller reads the row that holds the key
	case expired:
		return false, payment.ExpiredKey(c, kind, id, paymentID)
	}
	return true, tx.Commit(ctx)
}

// TakeOver moves an abandoned attempt to a new owner: one guarded UPDATE.
// Under READ COMMITTED a second UPDATE racing for the row waits for the
// first, then re-checks the fence on the new row version and matches
// nothing, so exactly one wins, on one instance or across many.
func (db *DB) TakeOver(ctx context.Context, scope, key string, fence int64, now, leaseUntil time.Time) (newFence int64, ok bool, err error) {
	n, err := db.exec(ctx, `UPDATE payment_attempts
		SET fence = fence + 1, lease_expires_at = $1, updated_at = $2
		WHERE scope = $3 AND idempotency_key = $4 AND status = 'in_progress' AND fence = $5
		  AND (lease_expires_at IS NULL OR lease_expires_at <= $6)`,
		ms(leaseUntil), ms(now), scope, key, fence, ms(now))
	return fence + 1, n == 1 && err == nil, err
}

// recordSQL is the record's UPDATE, guarded by the owner's fence and the
// status, and by the kind ($10) the caller says the attempt is.
const recordSQL = `UPDATE payment_attempts
	SET status = $1, response_status = $2, response_body = $3, charge_id = $4,
	    failure_code = $5, lease_expires_at = NULL, updated_at = $6
	WHERE scope = $7 AND idempotency_key = $8 AND status = 'in_progress' AND fence = $9 AND kind = $10`

// recordPaymentSQL records a payment and settles its payment row in one
// statement, so in one round trip and atomically without a transaction of
// our own; it answers how many attempts it recorded (0: fenced out).
const recordPaymentSQL = `WITH a AS (` + recordSQL + ` RETURNING id),
	p AS (UPDATE payments SET status = $1, charge_id = $4, failure_code = $5, updated_at = $6
		FROM a WHERE payments.id = a.id)
	SELECT count(*) FROM a`

// recordPaymentEventSQL is recordPaymentSQL that also writes the change's
// event ($11...$15) when, and only when, it records.
const recordPaymentEventSQL = `WITH a AS (` + recordSQL + ` RETURNING id),
	p AS (UPDATE payments SET status = $1, charge_id = $4, failure_code = $5, updated_at = $6
		FROM a WHERE payments.id = a.id),
	e AS (INSERT INTO events (scope, type, id, object_id, created_at, body)
		SELECT $7, $11, $12, $13, $14, $15 FROM a)
	SELECT count(*) FROM a`

// Record stores the final outcome, guarded by the owner's fence and the
// status: a late owner cannot overwrite what a takeover or reconcile wrote.
// It settles the payment or refund the attempt made, and writes o.Event,
// atomically with it: a payment's in the same statement (so it has no
// moment written and not yet committed to crash in), a refund's in the
// same transaction.
func (db *DB) Record(ctx context.Context, kind payment.Kind, scope, key string, fence int64, o payment.Outcome, now time.Time) (ok bool, err error) {
	args := []any{string(o.Status), o.ResponseStatus, o.ResponseBody, nullString(o.ChargeID),
		nullString(o.FailureCode), ms(now), scope, key, fence, string(kind)}
	switch kind {
	case payment.KindPayment:
		query := recordPaymentSQL
		if e := o.Event; e != nil {
			query, args = recordPaymentEventSQL, append(args, string(e.Type), e.ID, e.ObjectID, ms(e.CreatedAt), e.Body)
		}
		var n int
		err := db.pool.QueryRow(ctx, query, args...).Scan(&n)
		return n == 1 && err == nil, mapErr(err)
	case payment.KindRefund:
	default:
		return false, fmt.Errorf("record %q: unknown kind %q", key, kind)
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		ok = false
		var (
			id, paymentID string
			amount        int64
		)
		err := tx.QueryRow(ctx, recordSQL+` RETURNING id, payment_id, amount`, args...).Scan(&id, &paymentID, &amount)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // fenced out
		}
		if err != nil {
			return err
		}
		if err := settleRefund(ctx, tx, id, paymentID, amount, o, now); err != nil {
			return err
		}
		if err := insertEvent(ctx, tx, o.Event); err != nil {
			return err
		}
		ok = true
		crashpoint.Hit("in-record") // written, not yet committed
		return nil
	})
	if err != nil {
		return false, mapErr(err)
	}
	return ok, nil
}

// Release drops the owner's lease so that a retry can take over at once.
func (db *DB) Release(ctx context.Context, scope, key string, fence int64, now time.Time) error {
	_, err := db.exec(ctx, `UPDATE payment_attempts SET lease_expires_at = NULL, updated_at = $1
		WHERE scope = $2 AND idempotency_key = $3 AND status = 'in_progress' AND fence = $4`,
		ms(now), scope, key, fence)
	return err
}

const attemptColumns = `scope, idempotency_key, id, request_hash, request, amount, currency,
	status, fence, lease_expires_at, response_status, response_body, charge_id,
	failure_code, created_at, updated_at, kind, payment_id, details, provider`

// Attempt returns the attempt for (scope, key).
func (db *DB) Attempt(ctx context.Context, scope, key string) (*payment.Attempt, error) {
	return attemptOrNotFound(scanAttempt(db.pool.QueryRow(ctx, `SELECT `+attemptColumns+` FROM payment_attempts
		WHERE scope = $1 AND idempotency_key = $2`, scope, key)))
}

// Answer returns what a duplicate of (scope, key) is decided by: five
// columns, not the whole attempt.
func (db *DB) Answer(ctx context.Context, scope, key string) (*payment.Answer, error) {
	cached, gen, err := db.answers.Get(ctx, scope, key)
	if cached != nil || err != nil {
		return cached, mapErr(err)
	}
	var (
		a          payment.Answer
		status     string
		lease      *int64
		respStatus *int32
	)
	err = db.pool.QueryRow(ctx, `SELECT request_hash, status, lease_expires_at, response_status, response_body
		FROM payment_attempts WHERE scope = $1 AND idempotency_key = $2`, scope, key).
		Scan(&a.RequestHash, &status, &lease, &respStatus, &a.ResponseBody)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.ErrNoPayment()
	}
	if err != nil {
		return nil, mapErr(err)
	}
	a.Status, a.LeaseExpiresAt = payment.Status(status), fromMS(lease)
	if respStatus != nil {
		a.ResponseStatus = int(*respStatus)
	}
	db.answers.Put(gen, scope, key, &a)
	return &a, nil
}

// AttemptByID returns the attempt with payment id id, within scope only.
func (db *DB) AttemptByID(ctx context.Context, scope, id string) (*payment.Attempt, error) {
	return attemptOrNotFound(scanAttempt(db.pool.QueryRow(ctx, `SELECT `+attemptColumns+` FROM payment_attempts
		WHERE id = $1 AND scope = $2`, id, scope)))
}

func attemptOrNotFound(a *payment.Attempt, err error) (*payment.Attempt, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, payment.ErrNoPayment()
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return a, nil
}

// queryAll runs query and scans every row with scan.
func queryAll[T any](ctx context.Context, db *DB, scan func(pgx.Row) (*T, error), query string, args ...any) ([]T, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var all []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		all = append(all, *v)
	}
	return all, mapErr(rows.Err())
}

func scanAttempt(row pgx.Row) (*payment.Attempt, error) {
	return scanAttemptAnd(row)
}

// scanAttemptAnd scans an attempt's columns, then extra ones into extra.
func scanAttemptAnd(row pgx.Row, extra ...any) (*payment.Attempt, error) {
	var (
		a                 payment.Attempt
		status            string
		lease             *int64
		respStatus        *int32
		created, updated  int64
		chargeID, failure *string
		kind              string
		paymentID, prov   *string
	)
	dest := []any{&a.Scope, &a.Key, &a.ID, &a.RequestHash, &a.Request, &a.Amount, &a.Currency,
		&status, &a.Fence, &lease, &respStatus, &a.ResponseBody, &chargeID,
		&failure, &created, &updated, &kind, &paymentID, &a.Details, &prov}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	a.Status = payment.Status(status)
	a.LeaseExpiresAt = fromMS(lease)
	if respStatus != nil {
		a.ResponseStatus = int(*respStatus)
	}
	a.ChargeID, a.FailureCode = deref(chargeID), deref(failure)
	a.Kind, a.PaymentID, a.Provider = payment.Kind(kind), deref(paymentID), deref(prov)
	a.CreatedAt, a.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return &a, nil
}

// Counts returns how many attempts are in each status.
func (db *DB) Counts(ctx context.Context) (map[payment.Status]int, error) {
	type count struct {
		status payment.Status
		n      int
	}
	all, err := queryAll(ctx, db, func(row pgx.Row) (*count, error) {
		var c count
		var s string
		err := row.Scan(&s, &c.n)
		c.status = payment.Status(s)
		return &c, err
	}, `SELECT status, count(*) FROM payment_attempts GROUP BY status`)
	counts := map[payment.Status]int{}
	for _, c := range all {
		counts[c.status] = c.n
	}
	return counts, err
}

// staleWhere selects what Attempt.Stale reports: in progress, last updated
// at or before $1, no live lease at $2.
const staleWhere = `status = 'in_progress' AND updated_at <= $1
	AND (lease_expires_at IS NULL OR lease_expires_at <= $2)`

// Stale returns up to limit attempts still in progress, last updated at or
// before updatedBefore, holding no live lease at now, oldest first.
//
// Every instance's reconcile may read the same ones: which of them settles
// an attempt is decided by the fenced TakeOver each does before asking the
// provider, as between a retry and reconcile on one instance. No row lock
// is held across the provider call, so an instance that dies mid-run leaves
// nothing locked: its lease runs out and the next run takes the attempt.
func (db *DB) Stale(ctx context.Context, updatedBefore, now time.Time, limit int) ([]payment.Attempt, error) {
	return queryAll(ctx, db, scanAttempt, `SELECT `+attemptColumns+` FROM payment_attempts
		WHERE `+staleWhere+` ORDER BY updated_at LIMIT $3`, ms(updatedBefore), ms(now), limit)
}

// CountStale counts what Stale would return without a limit.
func (db *DB) CountStale(ctx context.Context, updatedBefore, now time.Time) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM payment_attempts WHERE `+staleWhere,
		ms(updatedBefore), ms(now)).Scan(&n)
	return n, mapErr(err)
}

// Purge deletes up to limit final attempts last updated before before and
// returns how many it deleted, moving each key to expired_keys while its
// payment or refund is kept. Attempts in progress are never deleted. Rows
// another instance's purge is deleting are skipped, not waited for: the
// purges of many instances share the work. A purge that deleted any bumps
// the purge version (the other instances' replay caches read it) and clears
// this instance's replay cache once committed.
func (db *DB) Purge(ctx context.Context, before time.Time, limit int) (int, time.Duration, error) {
	start := time.Now()
	n, err := db.purge(ctx, before, limit)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		// A refund's key moved while another instance purged its payment:
		// the key's row found no payment to reference. Once more: the
		// refund is gone with its payment, so its key has nothing to move.
		n, err = db.purge(ctx, before, limit)
	}
	return n, time.Since(start), mapErr(err)
}

func (db *DB) purge(ctx context.Context, before time.Time, limit int) (int, error) {
	var n, version int64
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// The trigger payment_attempts_expire moves each key to expired_keys.
		tag, err := tx.Exec(ctx, `DELETE FROM payment_attempts WHERE (scope, idempotency_key) IN (
			SELECT scope, idempotency_key FROM payment_attempts
			WHERE status IN ('succeeded', 'failed', 'expired') AND updated_at < $1
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, ms(before), limit)
		if n = tag.RowsAffected(); err != nil || n == 0 {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO settings (name, value) VALUES ('purge_version', '1')
			ON CONFLICT (name) DO UPDATE SET value = (settings.value::bigint + 1)::text
			RETURNING value::bigint`).Scan(&version)
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		db.answers.Clear(version)
	}
	return int(n), nil
}

// ReplayCacheStats returns what the replay cache did, for the metrics.
func (db *DB) ReplayCacheStats() replaycache.Stats { return db.answers.Stats() }

// purgeVersion is the number of purges that deleted attempts, for the
// replay caches of every instance on this database.
func (db *DB) purgeVersion(ctx context.Context) (int64, error) {
	var v int64
	err := db.pool.QueryRow(ctx, `SELECT value::bigint FROM settings WHERE name = 'purge_version'`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// InProgress returns how many attempts are in progress and when the oldest
// was created (zero if none).
func (db *DB) InProgress(ctx context.Context) (n int, oldest time.Time, err error) {
	var min *int64
	err = db.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM payment_attempts WHERE status = 'in_progress'`).Scan(&n, &min)
	return n, fromMS(min), mapErr(err)
}
