package payment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// clock is an injected time that tests move by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fixture is a real oncepay on an injected clock.
type fixture struct {
	*oncepaytest.Env
	clock *clock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	e := oncepaytest.Open(t, oncepaytest.Options{Now: c.Now})
	e.Service.ProviderTimeout = 100 * time.Millisecond
	return &fixture{Env: e, clock: c}
}

// purger purges past a 24h retention, batchSize at a time, on the clock.
func (f *fixture) purger(t *testing.T, batchSize int) *payment.Purger {
	t.Helper()
	p, err := payment.NewPurger(payment.Purger{Store: f.DB, Now: f.clock.Now, Retention: 24 * time.Hour, BatchSize: batchSize})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// abandon claims key as an owner that then dies: in progress, lease live
// until it expires on its own.
func (f *fixture) abandon(t *testing.T, key string, charged bool) *payment.Attempt {
	t.Helper()
	req := payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"}
	now := f.clock.Now()
	a := payment.NewAttempt("demo", key, req, now, f.Service.Lease)
	a.Provider = f.Service.ProviderName
	if ok, err := f.DB.Claim(context.Background(), &a); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if charged {
		if _, err := f.Sim.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey("demo", key),
			Amount: 1000, Currency: "EUR", Source: "tok_visa"}); err != nil {
			t.Fatal(err)
		}
	}
	return &a
}

func (f *fixture) attempt(t *testing.T, key string) *payment.Attempt {
	t.Helper()
	a, err := f.DB.Attempt(context.Background(), "demo", key)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestReconcile(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.abandon(t, "charged", true)
	f.abandon(t, "not-charged", false)
	f.clock.Add(time.Minute)
	f.abandon(t, "young", false)

	// Nothing is stale before stale-after.
	if res, err := f.Reconciler.RunOnce(ctx); err != nil || res.Checked != 0 {
		t.Fatalf("RunOnce at +1m = %+v, %v; want nothing checked", res, err)
	}
	f.clock.Add(4*time.Minute + time.Second) // the first two are 5m01s old, "young" 4m01s
	res, err := f.Reconciler.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (payment.ReconcileResult{Checked: 2, Succeeded: 1, Failed: 1}); res != want {
		t.Errorf("RunOnce = %+v, want %+v", res, want)
	}

	charged := f.attempt(t, "charged")
	charges, _ := f.Sim.Charges(ctx)
	if charged.Status != payment.Succeeded || charged.ResponseStatus != 201 || charged.ChargeID != charges[0].ID {
		t.Errorf("charged = %s %d %s, want succeeded 201 %s", charged.Status, charged.ResponseStatus, charged.ChargeID, charges[0].ID)
	}
	// Reconcile stored what a live request would have: the same bytes.
	if want := payment.SucceededOutcome(*charged, charges[0]).ResponseBody; string(charged.ResponseBody) != string(want) {
		t.Errorf("reconciled body = %s, want %s", charged.ResponseBody, want)
	}
	notCharged := f.attempt(t, "not-charged")
	var p payment.Problem
	json.Unmarshal(notCharged.ResponseBody, &p)
	if notCharged.Status != payment.Failed || p.Type != payment.ProblemNotCompleted || p.Status != notCharged.ResponseStatus {
		t.Errorf("not-charged = %s %d %s, want failed with a payment-not-completed problem", notCharged.Status, notCharged.ResponseStatus, notCharged.ResponseBody)
	}
	if f.attempt(t, "young").Status != payment.InProgress {
		t.Errorf("young attempt was touched")
	}
	if len(charges) != 1 {
		t.Errorf("ledger has %d charges, want 1: reconcile must never charge", len(charges))
	}

	// The client's retry now gets the settled answer.
	r, err := f.Service.Pay(ctx, "demo", "charged", payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if err != nil || r.Status != 201 || !r.Replayed || string(r.Body) != string(charged.ResponseBody) {
		t.Errorf("retry after reconcile = %d %v %v, want the stored 201", r.Status, r.Replayed, err)
	}
}

// A live lease keeps reconcile away, however old the attempt.
func TestReconcileSkipsLiveLease(t *testing.T) {
	f := newFixture(t)
	f.Service.Lease = time.Hour
	f.Reconciler.StaleAfter = time.Hour
	f.abandon(t, "leased", false)
	f.clock.Add(time.Hour - time.Second)
	if res, _ := f.Reconciler.RunOnce(context.Background()); res.Checked != 0 {
		t.Errorf("RunOnce = %+v, want nothing: the lease is live", res)
	}
}

// When the provider cannot say, nothing is guessed: the row stays in
// progress, lease released, for the next run.
func TestReconcileLookupFailures(t *testing.T) {
	for name, faults := range map[string]sim.Faults{
		"lookup fails":     {FailLookup: 1},
		"lookup times out": {Latency: time.Second}, // over the 100ms provider timeout
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.abandon(t, "k", true)
			f.clock.Add(10 * time.Minute)
			f.Sim.SetFaults(faults)
			res, err := f.Reconciler.RunOnce(context.Background())
			if err != nil || res != (payment.ReconcileResult{Checked: 1, Unknown: 1}) {
				t.Fatalf("RunOnce = %+v, %v; want 1 unknown", res, err)
			}
			if a := f.attempt(t, "k"); a.Status != payment.InProgress || !a.LeaseExpiresAt.IsZero() {
				t.Fatalf("attempt = %s lease %v, want in progress with no lease", a.Status, a.LeaseExpiresAt)
			}
			f.Sim.SetFaults(sim.Faults{})
			res, err = f.Reconciler.RunOnce(context.Background())
			if err != nil || res != (payment.ReconcileResult{Checked: 1, Succeeded: 1}) {
				t.Errorf("next RunOnce = %+v, %v; want 1 succeeded", res, err)
			}
		})
	}
}

// A late owner that comes back after reconcile settled cannot overwrite it.
func TestLateOwnerFencedOutByReconcile(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.abandon(t, "k", false)
	f.clock.Add(10 * time.Minute)
	if res, _ := f.Reconciler.RunOnce(ctx); res.Failed != 1 {
		t.Fatalf("RunOnce = %+v, want 1 failed", res)
	}
	late := payment.SucceededOutcome(*a, payment.Charge{ID: "ch_late"})
	if ok, err := f.DB.Record(ctx, payment.KindPayment, "demo", "k", a.Fence, late, f.clock.Now()); ok || err != nil {
		t.Fatalf("late Record = %v, %v; want refused", ok, err)
	}
	if got := f.attempt(t, "k"); got.Status != payment.Failed || got.ChargeID != "" {
		t.Errorf("attempt = %s %s, want reconcile's failed", got.Status, got.ChargeID)
	}
}

func TestReconcileOne(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.abandon(t, "k", true)
	if _, err := f.Reconciler.ReconcileOne(ctx, "demo", "k"); payment.ErrorCode(err) != payment.EINVALID {
		t.Errorf("ReconcileOne of a fresh attempt = %v, want EINVALID", err)
	}
	f.clock.Add(6 * time.Minute)
	a, err := f.Reconciler.ReconcileOne(ctx, "demo", "k")
	if err != nil || a.Status != payment.Succeeded {
		t.Errorf("ReconcileOne = %v, %v; want succeeded", a, err)
	}
}

// Purge deletes final attempts past the retention, in batches, and never an
// attempt in progress.
func TestPurge(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		if _, err := f.Service.Pay(ctx, "demo", key, payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"}); err != nil {
			t.Fatal(err)
		}
	}
	f.abandon(t, "stuck", false)
	f.clock.Add(23 * time.Hour)
	f.Service.Pay(ctx, "demo", "recent", payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_chargeDeclined"})
	f.clock.Add(2 * time.Hour)

	p := f.purger(t, 2)
	res, err := p.RunOnce(ctx)
	if err != nil || res.Deleted != 5 {
		t.Fatalf("RunOnce = %+v, %v; want 5 deleted", res, err)
	}
	counts, _ := f.DB.Counts(ctx)
	if counts[payment.InProgress] != 1 || counts[payment.Failed] != 1 || counts[payment.Succeeded] != 0 {
		t.Errorf("left = %v, want the stuck one in progress and the recent decline", counts)
	}
	f.clock.Add(100 * 24 * time.Hour)
	p.RunOnce(ctx)
	if counts, _ := f.DB.Counts(ctx); counts[payment.InProgress] != 1 {
		t.Errorf("in progress after a long time = %d, want 1: purge never deletes those", counts[payment.InProgress])
	}
}

// Purge deletes final events (processed, ignored) past the event
// retention, in batches, and never one still to be applied (received,
// processing, failed), however old.
func TestPurgeEvents(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	store := func(id string, state payment.EventState) {
		t.Helper()
		now := f.clock.Now()
		e := payment.InboxEvent{Event: payment.Event{Provider: "sim", ID: id, Type: "charge.succeeded", Kind: payment.EventSucceeded},
			State: payment.EventReceived, ReceivedAt: now, UpdatedAt: now}
		if ok, err := f.DB.ReceiveEvent(ctx, &e); !ok || err != nil {
			t.Fatalf("ReceiveEvent = %v, %v", ok, err)
		}
		if state == payment.EventReceived {
			return
		}
		fence, ok, err := f.DB.BeginEvent(ctx, "sim", id, 0, now, now.Add(time.Hour))
		if !ok || err != nil {
			t.Fatalf("BeginEvent = %v, %v", ok, err)
		}
		if state == payment.EventProcessing {
			return
		}
		if ok, err := f.DB.FinishEvent(ctx, "sim", id, fence, state, "", "", now); !ok || err != nil {
			t.Fatalf("FinishEvent = %v, %v", ok, err)
		}
	}
	for i := range 5 {
		store(fmt.Sprintf("evt_processed_%d", i), payment.EventProcessed)
	}
	store("evt_ignored", payment.EventIgnored)
	store("evt_failed", payment.EventFailedState)
	store("evt_received", payment.EventReceived)
	store("evt_processing", payment.EventProcessing)
	f.clock.Add(payment.DefaultEventRetention - time.Hour)
	store("evt_recent", payment.EventProcessed)
	f.clock.Add(2 * time.Hour)

	p := f.purger(t, 2) // 6 old final events: batches of 2, 2, 2, then a short one
	res, err := p.RunOnce(ctx)
	if err != nil || res.EventsDeleted != 6 {
		t.Fatalf("RunOnce = %+v, %v; want 6 events deleted", res, err)
	}
	if !strings.Contains(res.String(), "6 final webhook events") {
		t.Errorf("String() = %q, want the events counted", res.String())
	}
	left := func() []string {
		evs, err := f.DB.ListEvents(ctx, payment.EventFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range evs {
			ids = append(ids, e.ID)
		}
		slices.Sort(ids)
		return ids
	}
	if got, want := left(), []string{"evt_failed", "evt_processing", "evt_received", "evt_recent"}; !slices.Equal(got, want) {
		t.Errorf("left = %v, want %v", got, want)
	}
	f.clock.Add(100 * 24 * time.Hour)
	if _, err := p.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), []string{"evt_failed", "evt_processing", "evt_received"}; !slices.Equal(got, want) {
		t.Errorf("left after 100 days = %v, want %v: purge never deletes an event still to be applied", got, want)
	}
}

// Staleness runs from the last update, not from creation: an old attempt
// that a retry took over a minute ago (its charge may still be in flight at
// the provider) is not settled until it has been untouched for stale-after.
func TestReconcileWaitsAfterATakeover(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.abandon(t, "k", false)
	f.clock.Add(10 * time.Minute)
	now := f.clock.Now()
	fence, ok, err := f.DB.TakeOver(ctx, "demo", "k", a.Fence, now, now.Add(f.Service.Lease))
	if !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	if err := f.DB.Release(ctx, "demo", "k", fence, now); err != nil { // its charge's outcome was lost
		t.Fatal(err)
	}
	f.clock.Add(time.Minute)
	if res, err := f.Reconciler.RunOnce(ctx); err != nil || res.Checked != 0 {
		t.Fatalf("RunOnce a minute after the takeover = %+v, %v; want nothing touched", res, err)
	}
	f.clock.Add(5 * time.Minute)
	if res, err := f.Reconciler.RunOnce(ctx); err != nil || res.Failed != 1 {
		t.Errorf("RunOnce once untouched for stale-after = %+v, %v; want it settled", res, err)
	}
}

// A key reused after the retention, with another body, is not charged under
// the provider's memory of the old payment, nor reported as it. While the
// payment is kept oncepay refuses it itself (409 key expired, nothing sent);
// once the payment is purged too, the provider's "key reused" is a final 409.
func TestKeyReusedAfterRetention(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	first, err := f.Service.Pay(ctx, "demo", "k", payment.Request{Amount: 100, Currency: "EUR", Source: "tok_visa"})
	if err != nil || first.Status != 201 {
		t.Fatalf("first = %d, %v", first.Status, err)
	}
	f.clock.Add(25 * time.Hour)
	if res, err := f.purger(t, 10).RunOnce(ctx); err != nil || res.Deleted != 1 {
		t.Fatalf("purge = %+v, %v", res, err)
	}
	other := payment.Request{Amount: 5000, Currency: "EUR", Source: "tok_visa"}
	if _, err := f.Service.Pay(ctx, "demo", "k", other); payment.ErrorCode(err) != payment.EKEYEXPIRED {
		t.Fatalf("reused key while its payment is kept: err = %v, want %s", err, payment.EKEYEXPIRED)
	}
	if c := f.Sim.Calls(); len(c) != 1 || c[0].Charges != 1 {
		t.Fatalf("provider calls = %+v, want only the first charge", c)
	}
	if n, _, err := f.DB.PurgePayments(ctx, f.clock.Now(), 10); err != nil || n != 1 {
		t.Fatalf("PurgePayments = %d, %v", n, err)
	}
	again, err := f.Service.Pay(ctx, "demo", "k", other)
	var p payment.Problem
	json.Unmarshal(again.Body, &p)
	if err != nil || again.Status != 409 || p.Type != payment.ProblemKeyReused {
		t.Fatalf("reused key, other body = %d %s, %v; want the stored 409 key reused", again.Status, again.Body, err)
	}
	if charges, _ := f.Sim.Charges(ctx); len(charges) != 1 || charges[0].Amount != 100 {
		t.Errorf("ledger = %+v, want only the first 100", charges)
	}
}

// A charge found by key for another amount is another payment's: reconcile
// does not report it as this one's.
func TestReconcileIgnoresAnotherPaymentsCharge(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	a := f.abandon(t, "k", false)
	if _, err := f.Sim.Charge(ctx, payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey("demo", "k"),
		Amount: a.Amount + 1, Currency: a.Currency, Source: "tok_visa"}); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(10 * time.Minute)
	if _, err := f.Reconciler.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.attempt(t, "k")
	if got.Status != payment.Failed || got.ResponseStatus != 409 || got.ChargeID != "" {
		t.Errorf("attempt = %s %d %q, want failed 409 with no charge", got.Status, got.ResponseStatus, got.ChargeID)
	}
}

// A takeover's lookup and charge share one ProviderTimeout, so the lease,
// which only has to outlast ProviderTimeout, outlasts both.
func TestTakeOverCallsShareOneDeadline(t *testing.T) {
	f := newFixture(t) // ProviderTimeout 100ms
	f.abandon(t, "k", false)
	f.clock.Add(time.Minute) // the dead owner's lease has run out
	f.Sim.SetFaults(sim.Faults{Latency: 70 * time.Millisecond})
	_, err := f.Service.Pay(context.Background(), "demo", "k", payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
		t.Errorf("lookup 70ms + charge 70ms under a 100ms provider timeout: err = %v, want outcome unknown", err)
	}
}

// The jobs' constructors set defaults and refuse a bad configuration, and a
// job built by hand without them fails its run instead of looping for ever
// (a zero BatchSize is LIMIT 0) or silently settling nothing (a zero Limit).
func TestJobConstructors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)

	p, err := payment.NewPurger(payment.Purger{Store: f.DB, Retention: time.Hour})
	if err != nil || p.BatchSize != payment.DefaultPurgeBatchSize || p.Now == nil || p.EventRetention != payment.DefaultEventRetention {
		t.Errorf("NewPurger defaults = BatchSize %d, Now set %v, EventRetention %s (%v); want %d, set, %s",
			p.BatchSize, p.Now != nil, p.EventRetention, err, payment.DefaultPurgeBatchSize, payment.DefaultEventRetention)
	}
	for name, bad := range map[string]payment.Purger{
		"no store":           {Retention: time.Hour},
		"zero retention":     {Store: f.DB},
		"negative retention": {Store: f.DB, Retention: -time.Hour},
		"negative batch":     {Store: f.DB, Retention: time.Hour, BatchSize: -1},
		"negative events":    {Store: f.DB, Retention: time.Hour, EventRetention: -time.Hour},
	} {
		if _, err := payment.NewPurger(bad); err == nil {
			t.Errorf("NewPurger(%s) succeeded, want an error", name)
		}
	}

	r, err := payment.NewReconciler(payment.Reconciler{Service: f.Service})
	if err != nil || r.Limit != payment.DefaultReconcileLimit || r.StaleAfter != payment.DefaultStaleAfter {
		t.Errorf("NewReconciler defaults = Limit %d, StaleAfter %s (%v); want %d, %s", r.Limit, r.StaleAfter, err, payment.DefaultReconcileLimit, payment.DefaultStaleAfter)
	}
	for name, bad := range map[string]payment.Reconciler{
		"no service":           {Limit: 10},
		"negative limit":       {Service: f.Service, Limit: -1},
		"negative stale-after": {Service: f.Service, StaleAfter: -time.Minute},
	} {
		if _, err := payment.NewReconciler(bad); err == nil {
			t.Errorf("NewReconciler(%s) succeeded, want an error", name)
		}
	}

	// Built by hand: an error, at once.
	f.Service.Pay(ctx, "demo", "old", payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	f.clock.Add(48 * time.Hour)
	done := make(chan error, 1)
	go func() {
		_, err := (&payment.Purger{Store: f.DB, Now: f.clock.Now, Retention: time.Hour}).RunOnce(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("zero-BatchSize Purger.RunOnce = nil error, want an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("zero-BatchSize Purger.RunOnce still running after 5s: it loops for ever")
	}
	f.abandon(t, "stuck", false)
	f.clock.Add(time.Hour)
	if res, err := (&payment.Reconciler{Service: f.Service, StaleAfter: time.Minute}).RunOnce(ctx); err == nil {
		t.Errorf("zero-Limit Reconciler.RunOnce = %+v, nil error; want an error, not a run that settles nothing", res)
	}
}

// The jobs at the edges of their settings: a limit or a batch of one works,
// a payment retention equal to the key retention is allowed, a hand-built
// purger without an event retention takes the default.
func TestJobSettingsAtTheirEdges(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	for _, key := range []string{"a", "b"} {
		f.abandon(t, key, true)
	}
	f.clock.Add(10 * time.Minute)
	r, err := payment.NewReconciler(payment.Reconciler{Service: f.Service, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.RunOnce(ctx); err != nil || res.Checked != 1 || res.Succeeded != 1 {
		t.Errorf("reconcile with Limit 1 = %v, %v; want one settled", res, err)
	}
	if _, err := payment.NewReconciler(payment.Reconciler{Service: f.Service, StaleAfter: 0, Limit: 0}); err != nil {
		t.Errorf("NewReconciler with zero settings = %v, want the defaults", err)
	}

	f.clock.Add(48 * time.Hour)
	p := &payment.Purger{Store: f.DB, Now: f.clock.Now, Retention: time.Hour, PaymentRetention: time.Hour, BatchSize: 1}
	res, err := p.RunOnce(ctx)
	if err != nil || res.Deleted != 1 || res.PaymentsDeleted != 1 {
		t.Errorf("purge by hand, batch 1, payment retention = key retention = %v, %v; want the final attempt and its payment", res, err)
	}
	if _, err := payment.NewPurger(payment.Purger{Store: f.DB, Retention: time.Hour, BatchSize: 0, EventRetention: 0}); err != nil {
		t.Errorf("NewPurger with zero batch and event retention = %v, want the defaults", err)
	}
}

// A reconcile run counts an attempt a retry took first as skipped.
func TestReconcileCountsSkipped(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	f.abandon(t, "k", true)
	f.clock.Add(10 * time.Minute)
	taken := payment.Reconciler{Service: &payment.Service{Store: tookFirst{f.DB}, Provider: f.Sim, Log: f.Log, Now: f.clock.Now, ProviderTimeout: time.Second, Lease: time.Minute}}
	r, err := payment.NewReconciler(taken)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.RunOnce(ctx); err != nil || res.Checked != 1 || res.Skipped != 1 {
		t.Errorf("reconcile losing every takeover = %v, %v; want 1 skipped", res, err)
	}
}

// tookFirst is a store whose takeovers all lose, as to a retry that got
// there first.
type tookFirst struct{ payment.Store }

func (tookFirst) TakeOver(context.Context, string, string, int64, time.Time, time.Time) (int64, bool, error) {
	return 0, false, nil
}

// What a purge run says: what it deleted, the events and payments only
// when there were some.
func TestPurgeResultString(t *testing.T) {
	before := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		res  payment.PurgeResult
		want string
	}{
		{payment.PurgeResult{Deleted: 0, Before: before}, "purge: deleted 0 final attempts last updated before 2026-11-30T12:00:00Z"},
		{payment.PurgeResult{Deleted: 2, EventsDeleted: 1, PaymentsDeleted: 1, Before: before},
			"purge: deleted 2 final attempts last updated before 2026-11-30T12:00:00Z, 1 final webhook events past the event retention, and 1 payments past the payment retention"},
		{payment.PurgeResult{Deleted: 2, PaymentsDeleted: 1, OutboxDeleted: 3, Before: before},
			"purge: deleted 2 final attempts last updated before 2026-11-30T12:00:00Z, and 1 payments and 3 merchant events past the payment retention"},
		{payment.PurgeResult{Deleted: 2, OutboxDeleted: 3, Before: before},
			"purge: deleted 2 final attempts last updated before 2026-11-30T12:00:00Z, and 3 merchant events past the payment retention"},
	} {
		if got := tt.res.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

// Payments are purged past the payment retention, not before: a payment
// whose key's record is gone stays readable until then; the events told of
// them are kept as long.
func TestPaymentRetentionKeepsRecentPayments(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	old, err := f.Service.Pay(ctx, "demo", "old", visa)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(11 * 24 * time.Hour)
	recent, err := f.Service.Pay(ctx, "demo", "recent", visa)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(2 * time.Hour) // both keys' records are past the 1h retention
	p, err := payment.NewPurger(payment.Purger{Store: f.DB, Now: f.clock.Now, Retention: time.Hour, PaymentRetention: 10 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.RunOnce(ctx)
	if err != nil || res.Deleted != 2 || res.PaymentsDeleted != 1 || res.OutboxDeleted != 1 {
		t.Fatalf("RunOnce = %+v, %v; want both keys' records, and only the old payment and its event", res, err)
	}
	var oldView, recentView payment.View
	json.Unmarshal(old.Body, &oldView)
	json.Unmarshal(recent.Body, &recentView)
	if types, _ := outbox(t, f); len(types) != 1 || len(types[recentView.ID]) != 1 {
		t.Errorf("events after the purge = %v, want the recent payment's alone", types)
	}
	if _, err := f.Service.Payment(ctx, "demo", recentView.ID); err != nil {
		t.Errorf("the recent payment after the purge: %v, want it kept", err)
	}
	if _, err := f.Service.Payment(ctx, "demo", oldView.ID); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("the old payment after the purge: %v, want it gone", err)
	}
}
