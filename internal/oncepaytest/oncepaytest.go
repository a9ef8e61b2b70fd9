// Package oncepaytest builds a real oncepay for tests: SQLite files in a
// temporary directory (or a PostgreSQL database of the test's own), the
// simulated provider with its own ledger file, and the payment flow over
// them. Only the provider is simulated.
package oncepaytest

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/sqlitestore"
)

// Options shape an Env. The zero value is a healthy oncepay on fresh files.
type Options struct {
	Dir    string // reuse the files of an earlier Env (a restart); default a new t.TempDir
	Faults sim.Faults
	Now    func() time.Time // default time.Now
	Lease  time.Duration    // default 30s
	Store  sqlitestore.Options
	// PGStore are the options of the PostgreSQL store, with Postgres.
	PGStore pgstore.Options
	// Postgres, if set, is the URL of the PostgreSQL database to use instead
	// of SQLite (pgtest.URL makes one); Store is then ignored.
	Postgres string
	Log      io.Writer // JSON logs; default discarded
}

// Env is an open oncepay.
type Env struct {
	Dir        string
	DB         payment.Database
	Sim        *sim.Sim
	Service    *payment.Service
	Reconciler *payment.Reconciler // stale after 5m, as in production
	Forwarder  *payment.Forwarder
	Log        *slog.Logger
	closed     bool
}

// Open opens an Env and closes it when the test ends.
func Open(tb testing.TB, o Options) *Env {
	tb.Helper()
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Lease == 0 {
		o.Lease = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	var (
		db  payment.Database
		err error
	)
	if o.Postgres != "" {
		db, err = pgstore.Open(context.Background(), o.Postgres, o.PGStore)
	} else {
		db, err = sqlitestore.Open(context.Background(), filepath.Join(o.Dir, "oncepay.db"), Schema(tb), o.Store)
	}
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	s, err := sim.Open(filepath.Join(o.Dir, "sim.db"))
	if err != nil {
		tb.Fatalf("open sim: %v", err)
	}
	if err := s.SetFaults(o.Faults); err != nil {
		tb.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(o.Log, nil))
	svc := &payment.Service{Store: db, Provider: s, ProviderName: "sim", Log: log, Now: o.Now, ProviderTimeout: 5 * time.Second, Lease: o.Lease}
	rec, err := payment.NewReconciler(payment.Reconciler{Service: svc, StaleAfter: 5 * time.Minute, Limit: 100})
	if err != nil {
		tb.Fatal(err)
	}
	fwd, err := payment.NewForwarder(payment.Forwarder{Service: svc})
	if err != nil {
		tb.Fatal(err)
	}
	e := &Env{Dir: o.Dir, DB: db, Sim: s, Service: svc, Log: log, Reconciler: rec, Forwarder: fwd}
	tb.Cleanup(e.Close)
	return e
}

// Close closes the files; safe to call twice, so a test can restart.
func (e *Env) Close() {
	if e.closed {
		return
	}
	e.closed = true
	e.DB.Close()
	e.Sim.Close()
}

// Schema is schema.sql, read as the store applies it. Tests run in their
// package's directory, one level below the root.
func Schema(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../schema.sql")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// Ledger is the simulated provider's charges, by idempotency key.
func (e *Env) Ledger(tb testing.TB) map[string][]payment.Charge {
	tb.Helper()
	charges, err := e.Sim.Charges(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	m := map[string][]payment.Charge{}
	for _, c := range charges {
		m[c.IdempotencyKey] = append(m[c.IdempotencyKey], c)
	}
	return m
}

// Calls is what the simulated provider was asked, by idempotency key: the
// calls themselves, which its dedupe would hide from the ledger.
func (e *Env) Calls() map[string]sim.Calls {
	m := map[string]sim.Calls{}
	for _, c := range e.Sim.Calls() {
		m[c.IdempotencyKey] = c
	}
	return m
}

// Merchant makes a merchant named name with one API key, and returns the
// merchant's id (the scope of its payments), the key's id and its secret.
func (e *Env) Merchant(tb testing.TB, name string) (scope, keyID, secret string) {
	tb.Helper()
	m, err := e.DB.CreateMerchant(context.Background(), name, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	keyID, secret = e.APIKey(tb, m.ID, name)
	return m.ID, keyID, secret
}

// APIKey makes one more API key of the merchant scope.
func (e *Env) APIKey(tb testing.TB, scope, name string) (keyID, secret string) {
	tb.Helper()
	k, secret, err := e.DB.CreateAPIKey(context.Background(), scope, name, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return k.ID, secret
}
