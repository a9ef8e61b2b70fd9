package sim_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/private/privatetest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// MustOpen opens a sim on a fresh ledger file that is closed when tb ends.
func MustOpen(tb testing.TB) *sim.Sim {
	tb.Helper()
	s, err := sim.Open(filepath.Join(tb.TempDir(), "sim.db"))
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func mustSetFaults(tb testing.TB, s *sim.Sim, f sim.Faults) {
	tb.Helper()
	if err := s.SetFaults(f); err != nil {
		tb.Fatalf("SetFaults(%+v): %v", f, err)
	}
}

func mustCharges(tb testing.TB, s *sim.Sim) []payment.Charge {
	tb.Helper()
	charges, err := s.Charges(context.Background())
	if err != nil {
		tb.Fatalf("Charges: %v", err)
	}
	return charges
}

// visa is a request that charges.
func visa(key string) payment.ChargeRequest {
	return payment.ChargeRequest{IdempotencyKey: key, Amount: 1250, Currency: "EUR", Source: "tok_visa", Description: "order 42"}
}

func TestChargeSameKeySameParams(t *testing.T) {
	s := MustOpen(t)
	ctx := context.Background()
	first, err := s.Charge(ctx, visa("k1"))
	if err != nil {
		t.Fatalf("first Charge: %v", err)
	}
	again, err := s.Charge(ctx, visa("k1"))
	if err != nil {
		t.Fatalf("second Charge: %v", err)
	}
	if again != first {
		t.Errorf("replayed charge = %+v, want %+v", again, first)
	}
	if got := mustCharges(t, s); len(got) != 1 || got[0] != first {
		t.Errorf("ledger = %+v, want only %+v", got, first)
	}
}

func TestChargeSameKeyOtherParams(t *testing.T) {
	tests := []struct {
		name   string
		change func(*payment.ChargeRequest)
	}{
		{"amount", func(r *payment.ChargeRequest) { r.Amount++ }},
		{"currency", func(r *payment.ChargeRequest) { r.Currency = "USD" }},
		{"source", func(r *payment.ChargeRequest) { r.Source = "tok_mastercard" }},
		{"description", func(r *payment.ChargeRequest) { r.Description = "order 43" }},
		{"declining source", func(r *payment.ChargeRequest) { r.Source = "tok_chargeDeclined" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			ctx := context.Background()
			if _, err := s.Charge(ctx, visa("k1")); err != nil {
				t.Fatalf("first Charge: %v", err)
			}
			req := visa("k1")
			tt.change(&req)
			_, err := s.Charge(ctx, req)
			if !errors.Is(err, sim.ErrKeyMismatch) {
				t.Errorf("err = %v, want %v", err, sim.ErrKeyMismatch)
			}
			if got := len(mustCharges(t, s)); got != 1 {
				t.Errorf("ledger rows = %d, want 1", got)
			}
		})
	}
}

func TestChargeTokens(t *testing.T) {
	tests := []struct {
		source   string
		wantCode string // "" means the charge succeeds
	}{
		{"tok_visa", ""},
		{"tok_mastercard", ""},
		{"tok_amex", ""},
		{"tok_chargeDeclined", "card_declined"},
		{"tok_chargeDeclinedInsufficientFunds", "insufficient_funds"},
		{"tok_chargeDeclinedExpiredCard", "expired_card"},
		{"tok_unknown", "invalid_source"},
		{"", "invalid_source"},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			s := MustOpen(t)
			req := visa("k1")
			req.Source = tt.source
			_, err := s.Charge(context.Background(), req)
			d, declined := payment.IsDecline(err)
			var gotCode string
			if declined {
				gotCode = d.Code
			} else if err != nil {
				t.Fatalf("Charge: %v, want a decline or success", err)
			}
			if gotCode != tt.wantCode {
				t.Errorf("decline code = %q, want %q", gotCode, tt.wantCode)
			}
			wantRows := 1
			if tt.wantCode != "" {
				wantRows = 0
			}
			if got := len(mustCharges(t, s)); got != wantRows {
				t.Errorf("ledger rows = %d, want %d", got, wantRows)
			}
		})
	}
}

func TestChargeInvalid(t *testing.T) {
	tests := []struct {
		name   string
		change func(*payment.ChargeRequest)
	}{
		{"no key", func(r *payment.ChargeRequest) { r.IdempotencyKey = "" }},
		{"zero amount", func(r *payment.ChargeRequest) { r.Amount = 0 }},
		{"negative amount", func(r *payment.ChargeRequest) { r.Amount = -1 }},
		{"lower-case currency", func(r *payment.ChargeRequest) { r.Currency = "eur" }},
		{"long currency", func(r *payment.ChargeRequest) { r.Currency = "EURO" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			req := visa("k1")
			tt.change(&req)
			if _, err := s.Charge(context.Background(), req); !errors.Is(err, sim.ErrInvalidRequest) {
				t.Errorf("err = %v, want %v", err, sim.ErrInvalidRequest)
			}
			if got := len(mustCharges(t, s)); got != 0 {
				t.Errorf("ledger rows = %d, want 0", got)
			}
		})
	}
}

func TestChargeFailBeforeCharge(t *testing.T) {
	s := MustOpen(t)
	mustSetFaults(t, s, sim.Faults{FailBeforeCharge: 1})
	_, err := s.Charge(context.Background(), visa("k1"))
	if _, declined := payment.IsDecline(err); err == nil || declined {
		t.Errorf("err = %v, want a non-decline error", err)
	}
	if got := len(mustCharges(t, s)); got != 0 {
		t.Errorf("ledger rows = %d, want 0", got)
	}
}

func TestChargeFailAfterCharge(t *testing.T) {
	s := MustOpen(t)
	ctx := context.Background()
	mustSetFaults(t, s, sim.Faults{FailAfterCharge: 1})
	_, err := s.Charge(ctx, visa("k1"))
	if _, declined := payment.IsDecline(err); err == nil || declined {
		t.Fatalf("err = %v, want a non-decline error", err)
	}
	ledger := mustCharges(t, s)
	if len(ledger) != 1 {
		t.Fatalf("ledger rows = %d, want 1: the charge was made, only the response was lost", len(ledger))
	}

	mustSetFaults(t, s, sim.Faults{})
	got, err := s.Charge(ctx, visa("k1"))
	if err != nil {
		t.Fatalf("retried Charge: %v", err)
	}
	if got != ledger[0] {
		t.Errorf("retried charge = %+v, want %+v", got, ledger[0])
	}
	if got := len(mustCharges(t, s)); got != 1 {
		t.Errorf("ledger rows after retry = %d, want 1", got)
	}
}

func TestChargeLatencyHonoursContext(t *testing.T) {
	s := MustOpen(t)
	mustSetFaults(t, s, sim.Faults{Latency: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Charge(ctx, visa("k1")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want %v", err, context.DeadlineExceeded)
	}
	if got := time.Since(start); got > 10*time.Second {
		t.Errorf("Charge returned after %v, want soon after the deadline", got)
	}
	if got := len(mustCharges(t, s)); got != 0 {
		t.Errorf("ledger rows = %d, want 0", got)
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name      string
		key       string
		faults    sim.Faults
		wantFound bool
		wantErr   bool
	}{
		{"found", "charged", sim.Faults{}, true, false},
		{"not found", "other", sim.Faults{}, false, false},
		{"lookup fails", "charged", sim.Faults{FailLookup: 1}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			ctx := context.Background()
			want, err := s.Charge(ctx, visa("charged"))
			if err != nil {
				t.Fatalf("Charge: %v", err)
			}
			mustSetFaults(t, s, tt.faults)
			got, found, err := s.Lookup(ctx, payment.LookupRequest{IdempotencyKey: tt.key})
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if found != tt.wantFound {
				t.Errorf("found = %v, want %v", found, tt.wantFound)
			}
			if tt.wantFound && got != want {
				t.Errorf("charge = %+v, want %+v", got, want)
			}
		})
	}
}

func TestLedgerSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.db")
	ctx := context.Background()
	s, err := sim.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	want, err := s.Charge(ctx, visa("k1"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s, err = sim.Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if got := mustCharges(t, s); len(got) != 1 || got[0] != want {
		t.Errorf("ledger = %+v, want only %+v", got, want)
	}
	got, err := s.Charge(ctx, visa("k1"))
	if err != nil {
		t.Fatalf("Charge after reopen: %v", err)
	}
	if got != want {
		t.Errorf("charge after reopen = %+v, want %+v", got, want)
	}
}

func TestChargeConcurrentSameKey(t *testing.T) {
	s := MustOpen(t)
	const n = 50
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := s.Charge(context.Background(), visa("k1"))
			ids[i], errs[i] = c.ID, err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Charge %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("Charge %d id = %s, want %s", i, ids[i], ids[0])
		}
	}
	if got := len(mustCharges(t, s)); got != 1 {
		t.Errorf("ledger rows = %d, want 1", got)
	}
}

func TestSetFaults(t *testing.T) {
	tests := []struct {
		name    string
		faults  sim.Faults
		wantErr bool
	}{
		{"zero", sim.Faults{}, false},
		{"all at the limits", sim.Faults{Latency: time.Minute, FailBeforeCharge: 1, FailAfterCharge: 1, FailLookup: 1}, false},
		{"negative latency", sim.Faults{Latency: -time.Millisecond}, true},
		{"latency over a minute", sim.Faults{Latency: time.Minute + time.Millisecond}, true},
		{"fail before above 1", sim.Faults{FailBeforeCharge: 1.5}, true},
		{"fail after negative", sim.Faults{FailAfterCharge: -0.1}, true},
		{"fail lookup NaN", sim.Faults{FailLookup: math.NaN()}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			before := sim.Faults{Latency: time.Millisecond, FailAfterCharge: 0.5}
			mustSetFaults(t, s, before)
			err := s.SetFaults(tt.faults)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SetFaults err = %v, want error %v", err, tt.wantErr)
			}
			want := tt.faults
			if tt.wantErr {
				want = before
			}
			if got := s.Faults(); got != want {
				t.Errorf("Faults() = %+v, want %+v", got, want)
			}
		})
	}
}

// Without dedupe every charge call charges, even the same request under the
// same key, and a lookup finds the key's first charge. Calls counts every
// call the provider received, charged or not.
func TestNoDedupeChargesEveryCall(t *testing.T) {
	s := MustOpen(t)
	ctx := context.Background()
	mustSetFaults(t, s, sim.Faults{NoDedupe: true})
	var ids []string
	for range 3 {
		c, err := s.Charge(ctx, visa("k1"))
		if err != nil {
			t.Fatalf("Charge: %v", err)
		}
		ids = append(ids, c.ID)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Errorf("charge ids = %v, want three charges", ids)
	}
	other := visa("k1")
	other.Amount++
	if _, err := s.Charge(ctx, other); err != nil {
		t.Errorf("Charge with other parameters under the key: %v, want a fourth charge", err)
	}
	if _, err := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k1", Amount: 1, Currency: "EUR", Source: "tok_chargeDeclined"}); !isDecline(err) {
		t.Errorf("declining token under a charged key: %v, want a decline", err)
	}
	if got := len(mustCharges(t, s)); got != 4 {
		t.Errorf("ledger rows = %d, want 4", got)
	}
	c, found, err := s.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "k1"})
	if err != nil || !found || c.ID != ids[0] {
		t.Errorf("Lookup = %+v, %v, %v, want the first charge %s", c, found, err, ids[0])
	}
	if _, _, err := s.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	want := []sim.Calls{{IdempotencyKey: "k1", Charges: 5, Lookups: 1}, {IdempotencyKey: "k2", Lookups: 1}}
	if got := s.Calls(); !slices.Equal(got, want) {
		t.Errorf("Calls = %+v, want %+v", got, want)
	}
}

func isDecline(err error) bool {
	_, ok := payment.IsDecline(err)
	return ok
}

// A ledger written before charges had copies (the idempotency key alone was
// its primary key) is rebuilt at open, every charge kept.
func TestLedgerMigratesFromKeyOnlyPrimaryKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.db")
	old, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Exec(`CREATE TABLE sim_charges (
		idempotency_key TEXT PRIMARY KEY,
		id              TEXT NOT NULL UNIQUE,
		amount          INTEGER NOT NULL,
		currency        TEXT NOT NULL,
		source          TEXT NOT NULL,
		description     TEXT NOT NULL,
		params_hash     TEXT NOT NULL,
		created_at      INTEGER NOT NULL
	);
	INSERT INTO sim_charges VALUES ('k1', 'ch_old', 1250, 'EUR', 'tok_visa', 'order 42',
		'` + paramsHashOfVisa + `', 1764504000000)`)
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.Open(path)
	if err != nil {
		t.Fatalf("Open an old ledger: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if got := mustCharges(t, s); len(got) != 1 || got[0].ID != "ch_old" {
		t.Fatalf("ledger = %+v, want the old charge", got)
	}
	again, err := s.Charge(context.Background(), visa("k1"))
	if err != nil || again.ID != "ch_old" {
		t.Errorf("same charge after the migration = %+v, %v, want ch_old", again, err)
	}
	mustSetFaults(t, s, sim.Faults{NoDedupe: true})
	if _, err := s.Charge(context.Background(), visa("k1")); err != nil {
		t.Fatal(err)
	}
	if got := len(mustCharges(t, s)); got != 2 {
		t.Errorf("ledger rows = %d, want 2", got)
	}
}

// paramsHashOfVisa is the simulator's parameter hash of visa(key): its
// amount, currency, source and description as a JSON array.
var paramsHashOfVisa = func() string {
	sum := sha256.Sum256([]byte(`[1250,"EUR","tok_visa","order 42"]`))
	return hex.EncodeToString(sum[:])
}()

// The ledger, its WAL and shared memory are readable by their owner only,
// under the usual umask 022; a ledger left readable by others is made
// private when opened again.
func TestLedgerPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.db")
	n := 0
	privatetest.SQLite(t, path, func() func() {
		s, err := sim.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if _, err := s.Charge(context.Background(), visa(fmt.Sprint("k", n))); err != nil {
			t.Fatal(err)
		}
		return func() { s.Close() }
	})
}

// Past its key window the bank forgets a key: a lookup finds nothing, and a
// charge under it is a new charge, as at Stripe after 24 hours. Within the
// window the key still dedupes.
func TestKeyWindow(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	s.SetKeyWindow(200 * time.Millisecond)
	req := payment.ChargeRequest{IdempotencyKey: "k", Amount: 100, Currency: "EUR", Source: "tok_visa"}
	c1, err := s.Charge(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.Charge(ctx, req); err != nil || again.ID != c1.ID {
		t.Errorf("a charge within the window = %v, %v; want %s again", again.ID, err, c1.ID)
	}
	time.Sleep(250 * time.Millisecond)
	if _, found, err := s.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "k"}); found || err != nil {
		t.Errorf("lookup past the window: found %v, %v; want nothing", found, err)
	}
	c2, err := s.Charge(ctx, req)
	if err != nil || c2.ID == c1.ID {
		t.Fatalf("a charge past the window = %v, %v; want a new charge", c2.ID, err)
	}
	if got, found, err := s.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "k"}); !found || err != nil || got.ID != c2.ID {
		t.Errorf("lookup after the new charge = %v %v, %v; want %s", got.ID, found, err, c2.ID)
	}
	if again, err := s.Charge(ctx, req); err != nil || again.ID != c2.ID {
		t.Errorf("the new charge's key dedupes = %v, %v; want %s", again.ID, err, c2.ID)
	}
}

// Like a bank, the sim refunds no more than the charge holds; with
// no_refund_limit it refunds whatever it is asked (the workshop's refund
// race needs a bank that does not check).
func TestRefundLimit(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	c, err := s.Charge(ctx, visa("refund-limit"))
	if err != nil {
		t.Fatal(err)
	}
	refund := func(key string) error {
		_, err := s.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: key, ChargeID: c.ID, Amount: c.Amount - 1, Currency: c.Currency})
		return err
	}
	if err := refund("r1"); err != nil {
		t.Fatalf("first refund: %v", err)
	}
	if _, declined := payment.IsDecline(refund("r2")); !declined {
		t.Errorf("second refund past the charge: want a decline")
	}
	mustSetFaults(t, s, sim.Faults{NoRefundLimit: true})
	if err := refund("r3"); err != nil {
		t.Errorf("refund past the charge with no_refund_limit = %v, want it refunded", err)
	}
}
