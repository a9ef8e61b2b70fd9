package payment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

var visa = payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"}

// gatedClaims holds every Claim until n have arrived: by then each caller has
// done all it does before claiming, so a caller that would charge on the
// strength of its read alone is sure to be caught.
type gatedClaims struct {
	payment.Store
	n       int32
	arrived atomic.Int32
	gate    chan struct{}
}

func (g *gatedClaims) Claim(ctx context.Context, a *payment.Attempt) (bool, error) {
	if g.arrived.Add(1) == g.n {
		close(g.gate)
	}
	<-g.gate
	return g.Store.Claim(ctx, a)
}

// Many requests read "no such key" and race to claim it on a real file:
// only the claim's winner calls the provider. The others are told to wait,
// or get the winner's answer.
func TestOnlyTheClaimWinnerCharges(t *testing.T) {
	const requests = 20
	f := newFixture(t)
	f.Service.ProviderTimeout = 5 * time.Second
	f.Service.Store = &gatedClaims{Store: f.DB, n: requests, gate: make(chan struct{})}
	results := make([]payment.Result, requests)
	errs := make([]error, requests)
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() { results[i], errs[i] = f.Service.Pay(context.Background(), "demo", "k", visa) })
	}
	wg.Wait()
	if got := f.Calls()[payment.DownstreamKey("demo", "k")].Charges; got != 1 {
		t.Errorf("provider charge calls = %d, want 1: only the claim's winner may call", got)
	}
	var won int
	for i, r := range results {
		switch {
		case errs[i] == nil && r.Status == 201 && !r.Replayed:
			won++
		case errs[i] == nil && r.Status == 201 && r.Replayed:
		case payment.ErrorCode(errs[i]) == payment.EINPROGRESS:
		default:
			t.Errorf("request %d = %d %s, %v; want 201 or in progress", i, r.Status, r.Body, errs[i])
		}
	}
	if won != 1 {
		t.Errorf("first-hand 201s = %d, want 1", won)
	}
}

// gatedCharge holds the first Charge call until release is closed, then
// declines it: an owner that outlived its lease and comes back with its own,
// different, answer.
type gatedCharge struct {
	payment.Provider
	calls            atomic.Int32
	entered, release chan struct{}
}

func (g *gatedCharge) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
		return payment.Charge{}, &payment.DeclineError{Code: "card_declined", Message: "Your card was declined."}
	}
	return g.Provider.Charge(ctx, req)
}

// An owner whose attempt was taken over while it waited on the provider is
// fenced out: its record changes nothing, and it answers with what the new
// owner stored, byte for byte, not with its own outcome.
func TestFencedOutOwnerAnswersWithStoredResult(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.Service.ProviderTimeout = 5 * time.Second
	g := &gatedCharge{Provider: f.Sim, entered: make(chan struct{}), release: make(chan struct{})}
	f.Service.Provider = g

	type answer struct {
		r   payment.Result
		err error
	}
	late := make(chan answer)
	go func() {
		r, err := f.Service.Pay(ctx, "demo", "k", visa)
		late <- answer{r, err}
	}()
	<-g.entered
	f.clock.Add(f.Service.Lease + time.Second) // the first owner's lease runs out
	taken, err := f.Service.Pay(ctx, "demo", "k", visa)
	if err != nil || taken.Status != 201 || taken.Replayed {
		t.Fatalf("takeover = %d %s, %v; want its own 201", taken.Status, taken.Body, err)
	}
	close(g.release)
	a := <-late
	if a.err != nil || a.r.Status != 201 || !bytes.Equal(a.r.Body, taken.Body) || !a.r.Replayed {
		t.Errorf("fenced-out owner = %d %s (replayed %v), %v; want the stored %s", a.r.Status, a.r.Body, a.r.Replayed, a.err, taken.Body)
	}
	if got := f.attempt(t, "k"); got.Status != payment.Succeeded || !bytes.Equal(got.ResponseBody, taken.Body) {
		t.Errorf("attempt = %s %s, want the new owner's 201", got.Status, got.ResponseBody)
	}
}

// A retry that takes over an abandoned attempt and finds, under its key, a
// charge for another amount does not report that charge as this payment's
// (the key names another payment at the provider), and charges nothing.
func TestTakeOverRefusesAnotherPaymentsCharge(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.abandon(t, "k", false)
	other, err := f.Sim.Charge(ctx, payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey("demo", "k"),
		Amount: a.Amount + 1, Currency: a.Currency, Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(time.Minute) // the dead owner's lease has run out
	r, err := f.Service.Pay(ctx, "demo", "k", visa)
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	if err != nil || r.Status != 409 || p.Type != payment.ProblemKeyReused || bytes.Contains(r.Body, []byte(other.ID)) {
		t.Errorf("takeover = %d %s, %v; want the stored 409 key reused, not the other charge", r.Status, r.Body, err)
	}
	if got := f.attempt(t, "k"); got.Status != payment.Failed || got.ChargeID != "" {
		t.Errorf("attempt = %s %q, want failed with no charge", got.Status, got.ChargeID)
	}
	if c := f.Calls()[payment.DownstreamKey("demo", "k")]; c.Charges != 1 || c.Lookups != 1 {
		t.Errorf("provider calls = %+v, want the test's one charge and the takeover's one lookup", c)
	}
}

// Every provider call is reported with what it did, for the metrics: a
// charge that succeeded, declined or was lost, a lookup that found, did not
// find, or failed.
func TestProviderCallsObserved(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var seen []string
	f.Service.ObserveProviderCall = func(op, result string, _ time.Duration) { seen = append(seen, op+" "+result) }
	f.Service.Pay(ctx, "demo", "ok", visa)
	f.Service.Pay(ctx, "demo", "declined", payment.Request{Amount: 100, Currency: "EUR", Source: "tok_chargeDeclined"})
	f.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
	f.Service.Pay(ctx, "demo", "lost", visa) // charged, answer lost
	f.Sim.SetFaults(sim.Faults{})
	f.Service.Pay(ctx, "demo", "lost", visa) // the retry finds it
	f.abandon(t, "never", false)
	f.clock.Add(time.Minute)
	f.Sim.SetFaults(sim.Faults{FailLookup: 1})
	f.Service.Pay(ctx, "demo", "never", visa) // the lookup fails
	f.Sim.SetFaults(sim.Faults{})
	f.Service.Pay(ctx, "demo", "never", visa) // not found, then charged
	want := []string{"charge succeeded", "charge declined", "charge unknown", "lookup found",
		"lookup unknown", "lookup not_found", "charge succeeded"}
	if !slices.Equal(seen, want) {
		t.Errorf("observed %q, want %q", seen, want)
	}
}

// An answer lost at the provider releases the lease quietly: a warning that
// the outcome is unknown, and no error, since nothing failed on our side.
func TestOutcomeUnknownLogsNoError(t *testing.T) {
	var logs bytes.Buffer
	c := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	e := oncepaytest.Open(t, oncepaytest.Options{Now: c.Now, Log: &logs, Faults: sim.Faults{FailAfterCharge: 1}})
	_, err := e.Service.Pay(context.Background(), "demo", "k", visa)
	if payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
		t.Fatalf("Pay = %v, want outcome unknown", err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"provider outcome unknown"`) || strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Errorf("logs = %s, want the warning and no error", logs.String())
	}
	if a, _ := e.DB.Attempt(context.Background(), "demo", "k"); a.LeaseLive(c.Now()) {
		t.Errorf("lease still live after an unknown outcome: %v", a.LeaseExpiresAt)
	}
}

// The lease and staleness rules, at their edges.
func TestAttemptLeaseAndStaleness(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const staleAfter = 5 * time.Minute
	tests := []struct {
		name        string
		a           payment.Attempt
		live, stale bool
	}{
		{"lease until a moment from now", payment.Attempt{Status: payment.InProgress, LeaseExpiresAt: now.Add(time.Millisecond), UpdatedAt: now.Add(-time.Hour)}, true, false},
		{"lease ending now", payment.Attempt{Status: payment.InProgress, LeaseExpiresAt: now, UpdatedAt: now.Add(-time.Hour)}, false, true},
		{"released, updated exactly stale-after ago", payment.Attempt{Status: payment.InProgress, UpdatedAt: now.Add(-staleAfter)}, false, true},
		{"released, updated a moment later", payment.Attempt{Status: payment.InProgress, UpdatedAt: now.Add(-staleAfter + time.Millisecond)}, false, false},
		{"final with a lease left in it", payment.Attempt{Status: payment.Succeeded, LeaseExpiresAt: now.Add(time.Hour), UpdatedAt: now.Add(-time.Hour)}, false, false},
		{"final, old", payment.Attempt{Status: payment.Failed, UpdatedAt: now.Add(-time.Hour)}, false, false},
	}
	for _, tt := range tests {
		if got := tt.a.LeaseLive(now); got != tt.live {
			t.Errorf("%s: LeaseLive = %v, want %v", tt.name, got, tt.live)
		}
		if got := tt.a.Stale(now, staleAfter); got != tt.stale {
			t.Errorf("%s: Stale = %v, want %v", tt.name, got, tt.stale)
		}
	}
}

// pausedAfterClaim is a store whose owner stalls right after its claim
// commits (a stopped process, a long pause) until its lease has run out.
type pausedAfterClaim struct {
	payment.Store
	clock *clock
	lease time.Duration
}

func (p pausedAfterClaim) Claim(ctx context.Context, a *payment.Attempt) (bool, error) {
	ok, err := p.Store.Claim(ctx, a)
	p.clock.Add(p.lease + time.Second)
	return ok, err
}

// An owner whose lease ran out between its claim and its provider call
// does not call: by then a retry may own the attempt, or reconcile may have
// settled it as never charged. It answers that the outcome is unknown; the
// retry then charges, once.
func TestOwnerPastItsLeaseDoesNotCall(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.Service.ProviderTimeout = 5 * time.Second
	f.Service.Store = pausedAfterClaim{Store: f.DB, clock: f.clock, lease: f.Service.Lease}
	_, err := f.Service.Pay(ctx, "demo", "k", visa)
	dk := payment.DownstreamKey("demo", "k")
	if payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
		t.Errorf("the paused owner = %v, want outcome unknown", err)
	}
	if c := f.Calls()[dk]; c.Charges != 0 {
		t.Errorf("the paused owner made %d charge calls, want none", c.Charges)
	}
	f.Service.Store = f.DB
	r, err := f.Service.Pay(ctx, "demo", "k", visa)
	if err != nil || r.Status != 201 {
		t.Fatalf("the retry = %d %s, %v; want 201", r.Status, r.Body, err)
	}
	if c := f.Calls()[dk]; c.Charges != 1 || c.Lookups != 1 {
		t.Errorf("provider calls = %+v, want the retry's lookup and one charge", c)
	}
}

// A new attempt's lease may be zero (an attempt left for a retry at once),
// never negative.
func TestNewAttemptLease(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	if a := payment.NewAttempt("demo", "k", visa, now, 0); !a.LeaseExpiresAt.Equal(now) || a.LeaseLive(now) {
		t.Errorf("NewAttempt with no lease: lease until %v, live %v; want now, not live", a.LeaseExpiresAt, a.LeaseLive(now))
	}
	defer func() {
		if recover() == nil {
			t.Errorf("NewAttempt with a negative lease did not refuse")
		}
	}()
	payment.NewAttempt("demo", "k", visa, now, -time.Second)
}
