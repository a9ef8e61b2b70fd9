package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
)

// The hot statements, parsed once at Open: the driver keeps no statement
// cache, and parsing was an eighth of a payment's CPU.
const (
	// claimSQL inserts the attempt unless its key is taken, or was and is
	// now in expired_keys: the winner's claim is one statement, and a claim
	// that inserts nothing reads expired_keys again to say which (?16 is the
	// key's SHA-256).
	claimSQL = `INSERT OR IGNORE INTO payment_attempts
		(scope, idempotency_key, id, request_hash, request, amount, currency,
		 status, fence, lease_expires_at, created_at, updated_at, kind, payment_id, details, provider)
		SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?17
		WHERE NOT EXISTS (SELECT 1 FROM expired_keys WHERE scope = ?1 AND key_hash = ?16)`

	// takeOverSQL moves an abandoned attempt to a new owner: of two racing
	// for it, exactly one matches.
	takeOverSQL = `UPDATE payment_attempts
		SET fence = fence + 1, lease_expires_at = ?, updated_at = ?
		WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ?
		  AND (lease_expires_at IS NULL OR lease_expires_at <= ?)`

	// The records, guarded by the owner's fence. A payment's is one
	// statement: the trigger payment_attempts_settle (schema.sql) settles its
	// payment row. A refund's returns what settleRefund needs.
	recordSQL = `UPDATE payment_attempts
		SET status = ?, response_status = ?, response_body = ?, charge_id = ?,
		    failure_code = ?, lease_expires_at = NULL, updated_at = ?
		WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ? AND kind = `
	recordPaymentSQL = recordSQL + `'payment'`
	recordRefundSQL  = recordSQL + `'refund' RETURNING id, payment_id, amount`

	releaseSQL = `UPDATE payment_attempts SET lease_expires_at = NULL, updated_at = ?
		WHERE scope = ? AND idempotency_key = ? AND status = 'in_progress' AND fence = ?`

	attemptSQL = `SELECT ` + attemptColumns + ` FROM payment_attempts
		WHERE scope = ? AND idempotency_key = ?`

	answerSQL = `SELECT request_hash, status, lease_expires_at, response_status, response_body
		FROM payment_attempts WHERE scope = ? AND idempotency_key = ?`

	// expiredKeySQL finds the payment or refund a purged key's record left.
	expiredKeySQL = `SELECT kind, id, payment_id FROM expired_keys WHERE scope = ? AND key_hash = ?`

	createPaymentSQL = `INSERT INTO payments
		(id, scope, key_hash, amount, currency, status, details, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

	// insertEventSQL puts a change's event in the outbox, in the change's
	// own transaction (outbox.go).
	insertEventSQL = `INSERT INTO events (scope, type, id, object_id, created_at, body) VALUES (?, ?, ?, ?, ?, ?)`

	// authenticateSQL finds a key the view of the live keys does not hold.
	authenticateSQL = `SELECT merchant_id FROM api_keys WHERE secret_hash = ? AND revoked_at IS NULL`
)

// statements are prepared on the writer's one connection (before the
// writer goroutine holds it in a transaction) and on the read pool.
type statements struct {
	claim, takeOver, recordPayment, recordRefund, release *sql.Stmt // writer
	expiredKey, createPayment                             *sql.Stmt // writer, in a claim's write
	insertEvent                                           *sql.Stmt // writer, in a change's write
	attempt, answer, authenticate                         *sql.Stmt // readers
}

func prepare(ctx context.Context, w, r *sql.DB) (statements, error) {
	var s statements
	for _, p := range []struct {
		db    *sql.DB
		query string
		stmt  **sql.Stmt
	}{
		{w, claimSQL, &s.claim},
		{w, takeOverSQL, &s.takeOver},
		{w, recordPaymentSQL, &s.recordPayment},
		{w, recordRefundSQL, &s.recordRefund},
		{w, releaseSQL, &s.release},
		{w, expiredKeySQL, &s.expiredKey},
		{w, createPaymentSQL, &s.createPayment},
		{w, insertEventSQL, &s.insertEvent},
		{r, attemptSQL, &s.attempt},
		{r, answerSQL, &s.answer},
		{r, authenticateSQL, &s.authenticate},
	} {
		stmt, err := p.db.PrepareContext(ctx, p.query)
		if err != nil {
			return s, fmt.Errorf("prepare %.40q: %w", p.query, err)
		}
		*p.stmt = stmt
	}
	return s, nil
}
