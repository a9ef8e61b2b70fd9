// Package sim is the simulated payment provider: a real peer, not a stub. It
// keeps its own SQLite ledger (it plays the bank), dedupes by idempotency key,
// answers lookups by key, and injects the failures oncepay exists to survive:
// latency, a failure before charging and a lost response after charging.
// It also counts every call it receives, and its dedupe can be turned off, so
// tests see what oncepay asked of it and not only what it kept.
// Demos, tests and benchmarks run against it in process or, through Handler,
// as its own server so the faults cross a real socket.
package sim

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/oncepay/oncepay/internal/groupcommit"
	"github.com/oncepay/oncepay/internal/private"
	"github.com/oncepay/oncepay/payment"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Errors Charge and Lookup return besides *payment.DeclineError. To a
// payment.Provider caller every one of them is an unknown outcome.
var (
	// ErrKeyMismatch means the idempotency key already names a charge made
	// with other parameters; nothing new was charged.
	ErrKeyMismatch = fmt.Errorf("sim: idempotency key already used with other parameters: %w", payment.ErrProviderKeyReused)
	// ErrInvalidRequest means the request was malformed; nothing was charged.
	ErrInvalidRequest = errors.New("sim: invalid charge request")
	// ErrFailedBeforeCharge is the simulated failure before charging.
	ErrFailedBeforeCharge = errors.New("sim: simulated failure before charging")
	// ErrLostResponse is the simulated failure after charging: the charge is
	// in the ledger, but the caller is not told.
	ErrLostResponse = errors.New("sim: simulated lost response after charging")
	// ErrLookupFailed is the simulated lookup failure.
	ErrLookupFailed = errors.New("sim: simulated lookup failure")
)

// Sim is the simulated provider. It implements payment.Provider and is safe
// for concurrent use.
type Sim struct {
	db   *sql.DB // the one writer connection
	read *sql.DB // readers; WAL lets them run beside the writer
	// writer batches concurrent charges into shared transactions, as
	// oncepay's store does: one WAL append for many charges.
	writer *groupcommit.Writer
	insert *sql.Stmt // the charge a key names, once
	again  *sql.Stmt // one more charge under a key, when dedupe is off
	byKeyQ *sql.Stmt
	faults atomic.Pointer[Faults]
	// window is how long the bank remembers an idempotency key (0: for
	// ever): past it, a charge under the key is a new charge and a lookup
	// finds nothing, as at Stripe after 24 hours.
	window atomic.Int64
	calls  callLog
	outbox atomic.Pointer[outbox] // nil: no webhooks configured
}

var _ payment.Provider = (*Sim)(nil)

// schema is the ledger. A key's first charge is copy 0, and the primary key
// is the dedupe; with dedupe off, each further charge under the key is the
// next copy, so the ledger shows every time the bank was made to pay.
const schema = `CREATE TABLE IF NOT EXISTS sim_charges (
	idempotency_key TEXT NOT NULL,
	copy            INTEGER NOT NULL DEFAULT 0,
	id              TEXT NOT NULL UNIQUE,
	amount          INTEGER NOT NULL,
	currency        TEXT NOT NULL,
	source          TEXT NOT NULL,
	description     TEXT NOT NULL,
	params_hash     TEXT NOT NULL,
	created_at      INTEGER NOT NULL, -- unix ms
	payment_id      TEXT,             -- the caller's name of the payment, carried in events
	PRIMARY KEY (idempotency_key, copy)
)`

// migrateCopies rebuilds a ledger made before charges had copies (its
// primary key was the idempotency key alone), keeping every charge.
const migrateCopies = `
ALTER TABLE sim_charges RENAME TO sim_charges_v0;
` + schema + `;
INSERT INTO sim_charges (idempotency_key, id, amount, currency, source, description, params_hash, created_at)
	SELECT idempotency_key, id, amount, currency, source, description, params_hash, created_at
	FROM sim_charges_v0 ORDER BY rowid;
DROP TABLE sim_charges_v0;`

// Open opens the ledger at path, creating it if needed, with no faults set.
func Open(path string) (*Sim, error) {
	// The ledger holds card tokens and descriptions: readable by its owner only.
	if err := private.SQLite(path); err != nil {
		return nil, fmt.Errorf("sim: open ledger: %w", err)
	}
	// synchronous(NORMAL) survives a killed process, which is all the bank
	// needs: oncepay's durability is what is measured, not the sim's.
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sim: open ledger: %w", err)
	}
	db.SetMaxOpenConns(1)
	if err := createLedger(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("sim: create ledger: %w", err)
	}
	read, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sim: open ledger: %w", err)
	}
	s := &Sim{db: db, read: read}
	// Parsed once: every charge and lookup runs one of these.
	const columns = `(idempotency_key, id, amount, currency, source, description, params_hash, created_at, payment_id, copy)`
	if s.insert, err = db.Prepare(`INSERT OR IGNORE INTO sim_charges ` + columns + `
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0)`); err == nil {
		s.again, err = db.Prepare(`INSERT INTO sim_charges ` + columns + `
		VALUES (?1, ?, ?, ?, ?, ?, ?, ?, ?,
			(SELECT coalesce(max(copy) + 1, 0) FROM sim_charges WHERE idempotency_key = ?1))`)
	}
	if err == nil {
		s.byKeyQ, err = read.Prepare(`SELECT id, amount, currency, params_hash, created_at
			FROM sim_charges WHERE idempotency_key = ? AND created_at >= ? ORDER BY copy LIMIT 1`)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("sim: prepare: %w", err)
	}
	s.writer = groupcommit.New(db, groupcommit.Options{})
	s.faults.Store(&Faults{})
	return s, nil
}

// createLedger creates the ledger, or brings an older one to this schema.
func createLedger(db *sql.DB) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var tables, copies int
	err = tx.QueryRow(`SELECT
		(SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'sim_charges'),
		(SELECT count(*) FROM pragma_table_info('sim_charges') WHERE name = 'copy')`).Scan(&tables, &copies)
	if err != nil {
		return err
	}
	ddl := schema
	if tables == 1 && copies == 0 {
		ddl = migrateCopies
	}
	if _, err := tx.Exec(ddl); err != nil {
		return err
	}
	if _, err := tx.Exec(refundSchema + ";" + disputeSchema); err != nil {
		return err
	}
	// Columns added after the first ledgers: an older one gets them empty
	// (its refunds all succeeded, its charges name no payment).
	for _, c := range []struct{ table, column, ddl string }{
		{"sim_charges", "payment_id", "TEXT"},
		{"sim_refunds", "status", "TEXT NOT NULL DEFAULT 'succeeded'"},
		{"sim_refunds", "refund_id", "TEXT"},
		{"sim_refunds", "payment_id", "TEXT"},
		{"sim_refunds", "failure_code", "TEXT"},
	} {
		var n int
		if err := tx.QueryRow(`SELECT count(*) FROM pragma_table_info(?) WHERE name = ?`, c.table, c.column).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := tx.Exec(`ALTER TABLE ` + c.table + ` ADD COLUMN ` + c.column + ` ` + c.ddl); err != nil {
				return err
			}
		}
	}
	return tx.Commit()
}

// Close closes the ledger.
func (s *Sim) Close() error {
	if o := s.outbox.Load(); o != nil {
		o.close()
	}
	if s.writer != nil {
		s.writer.Close()
	}
	return errors.Join(s.read.Close(), s.db.Close())
}

// Charge moves money once per idempotency key. It implements payment.Provider.
func (s *Sim) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	f, err := s.arrive(ctx, req.IdempotencyKey, opCharge)
	if err != nil {
		return payment.Charge{}, err
	}
	if err := validate(req); err != nil {
		return payment.Charge{}, err
	}
	if roll(f.FailBeforeCharge) {
		return payment.Charge{}, ErrFailedBeforeCharge
	}
	if d := decline(req.Source); d != nil {
		// A key that already names a charge keeps that meaning: asked again
		// with other parameters it is a mismatch, never a decline.
		if !f.NoDedupe {
			if _, _, err := s.byKey(ctx, req.IdempotencyKey); !errors.Is(err, sql.ErrNoRows) {
				if err != nil {
					return payment.Charge{}, err
				}
				return payment.Charge{}, ErrKeyMismatch
			}
		}
		s.emit(req, payment.Charge{}, d)
		return payment.Charge{}, d
	}

	hash := paramsHash(req)
	c := payment.Charge{
		ID:             "ch_" + strings.ToLower(strconv.FormatInt(time.Now().UnixMicro(), 36)+crand.Text()[:13]),
		IdempotencyKey: req.IdempotencyKey,
		Amount:         req.Amount,
		Currency:       req.Currency,
		// Millisecond precision, as stored, so a replay equals the original.
		CreatedAt: time.UnixMilli(time.Now().UnixMilli()).UTC(),
	}
	// The primary key decides who charges; a read first would race. Without
	// dedupe every call charges.
	insert := s.insert
	if f.NoDedupe {
		insert = s.again
	}
	args := []any{c.IdempotencyKey, c.ID, c.Amount, c.Currency, req.Source, req.Description, hash, c.CreatedAt.UnixMilli(), req.PaymentID}
	n, err := s.writer.Exec(ctx, insert, nil, args...)
	if err != nil {
		return payment.Charge{}, fmt.Errorf("sim: record charge: %w", err)
	}
	if n == 0 {
		// The key is taken: a replay, unless every charge under it is past
		// the key window. Then the key names nothing now, and this is a new
		// charge. Only a taken key pays for the read.
		stored, storedHash, err := s.byKey(ctx, req.IdempotencyKey)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := s.writer.Exec(ctx, s.again, nil, args...); err != nil {
				return payment.Charge{}, fmt.Errorf("sim: record charge: %w", err)
			}
			s.emit(req, c, nil)
		case err != nil:
			return payment.Charge{}, err
		case storedHash != hash:
			return payment.Charge{}, ErrKeyMismatch
		default:
			c = stored // a replay: it was told already
		}
	} else {
		s.emit(req, c, nil) // a new charge
	}
	if roll(f.FailAfterCharge) {
		return payment.Charge{}, ErrLostResponse
	}
	return c, nil
}

// arrive is how every call reaches the simulated bank: it is counted under
// key, then waits the latency the knobs set. It returns the knobs the call
// runs under.
func (s *Sim) arrive(ctx context.Context, key string, o op) (Faults, error) {
	s.calls.add(key, o)
	f := s.Faults()
	return f, sleep(ctx, f.Latency)
}

// arriveLookup is arrive for a lookup, which the knobs may also fail.
func (s *Sim) arriveLookup(ctx context.Context, key string, o op) error {
	f, err := s.arrive(ctx, key, o)
	if err == nil && roll(f.FailLookup) {
		err = ErrLookupFailed
	}
	return err
}

// Lookup reports the charge made under key, if any. It implements
// payment.Provider.
func (s *Sim) Lookup(ctx context.Context, req payment.LookupRequest) (payment.Charge, bool, error) {
	if err := s.arriveLookup(ctx, req.IdempotencyKey, opLookup); err != nil {
		return payment.Charge{}, false, err
	}
	c, _, err := s.byKey(ctx, req.IdempotencyKey)
	if errors.Is(err, sql.ErrNoRows) {
		return payment.Charge{}, false, nil
	}
	if err != nil {
		return payment.Charge{}, false, err
	}
	return c, true, nil
}

// Charges returns the whole ledger, oldest first: what the bank saw.
func (s *Sim) Charges(ctx context.Context) ([]payment.Charge, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id, idempotency_key, amount, currency, created_at
		FROM sim_charges ORDER BY rowid`)
	if err != nil {
		return nil, fmt.Errorf("sim: read ledger: %w", err)
	}
	defer rows.Close()
	charges := []payment.Charge{} // an empty ledger is [], not null, in JSON
	for rows.Next() {
		var c payment.Charge
		var ms int64
		if err := rows.Scan(&c.ID, &c.IdempotencyKey, &c.Amount, &c.Currency, &ms); err != nil {
			return nil, fmt.Errorf("sim: read ledger: %w", err)
		}
		c.CreatedAt = time.UnixMilli(ms).UTC()
		charges = append(charges, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sim: read ledger: %w", err)
	}
	return charges, nil
}

// SetKeyWindow sets how long the bank remembers an idempotency key; 0
// remembers it for ever.
func (s *Sim) SetKeyWindow(d time.Duration) { s.window.Store(int64(max(d, 0))) }

// KeyWindow is how long the bank remembers an idempotency key (0: for ever).
func (s *Sim) KeyWindow() time.Duration { return time.Duration(s.window.Load()) }

// remembered is the oldest creation time (Unix ms) of a charge the bank
// still knows by its key.
func (s *Sim) remembered() int64 {
	if w := s.KeyWindow(); w > 0 {
		return time.Now().Add(-w).UnixMilli()
	}
	return 0
}

// byKey reads the charge under key that the bank still remembers, and its
// parameter hash; the error wraps sql.ErrNoRows if there is none.
func (s *Sim) byKey(ctx context.Context, key string) (payment.Charge, string, error) {
	c := payment.Charge{IdempotencyKey: key}
	var hash string
	var ms int64
	err := s.byKeyQ.QueryRowContext(ctx, key, s.remembered()).Scan(&c.ID, &c.Amount, &c.Currency, &hash, &ms)
	if err != nil {
		return payment.Charge{}, "", fmt.Errorf("sim: read charge: %w", err)
	}
	c.CreatedAt = time.UnixMilli(ms).UTC()
	return c, hash, nil
}

// validate rejects what a provider's API would refuse outright.
func validate(req payment.ChargeRequest) error {
	switch {
	case req.IdempotencyKey == "" || len(req.IdempotencyKey) > 255:
		return fmt.Errorf("%w: idempotency key must be 1 to 255 bytes", ErrInvalidRequest)
	case req.Amount <= 0:
		return fmt.Errorf("%w: amount must be a positive number of minor units", ErrInvalidRequest)
	case len(req.Currency) != 3 || strings.IndexFunc(req.Currency, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0:
		return fmt.Errorf("%w: currency must be three upper-case letters", ErrInvalidRequest)
	}
	return nil
}

// paramsHash fingerprints everything that makes two charges different
// requests; a JSON array keeps field boundaries unambiguous.
func paramsHash(req payment.ChargeRequest) string {
	b, _ := json.Marshal([]any{req.Amount, req.Currency, req.Source, req.Description}) // cannot fail: strings and an integer
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// approved are the test tokens that charge, in the style of Stripe's test
// cards.
var approved = map[string]bool{"tok_visa": true, "tok_mastercard": true, "tok_amex": true}

// declined are the test tokens that decline, with the reason given.
var declined = map[string]payment.DeclineError{
	"tok_chargeDeclined":                  {Code: "card_declined", Message: "Your card was declined."},
	"tok_chargeDeclinedInsufficientFunds": {Code: "insufficient_funds", Message: "Your card has insufficient funds."},
	"tok_chargeDeclinedExpiredCard":       {Code: "expired_card", Message: "Your card has expired."},
}

// decline returns why the bank refuses source, or nil if it charges it. A
// token the bank does not know is refused too.
func decline(source string) *payment.DeclineError {
	if approved[source] {
		return nil
	}
	d, ok := declined[source]
	if !ok {
		d = payment.DeclineError{Code: "invalid_source", Message: "No such token."}
	}
	return &d
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("sim: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}

// roll reports true with probability p.
func roll(p float64) bool {
	return rand.Float64() < p
}
