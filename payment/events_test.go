package payment_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// countedRecords counts the records that won: a settled attempt has exactly one.
type countedRecords struct {
	payment.Store
	won atomic.Int64
}

func (c *countedRecords) Record(ctx context.Context, kind payment.Kind, scope, key string, fence int64, o payment.Outcome, now time.Time) (bool, error) {
	ok, err := c.Store.Record(ctx, kind, scope, key, fence, o, now)
	if ok {
		c.won.Add(1)
	}
	return ok, err
}

// inboxFixture is a fixture whose service, reconcile and inbox share one
// counted store.
type inboxFixture struct {
	*fixture
	records *countedRecords
	inbox   *payment.Inbox
}

func newInboxFixture(t *testing.T) *inboxFixture {
	t.Helper()
	f := newFixture(t)
	rec := &countedRecords{Store: f.Service.Store}
	f.Service.Store = rec
	return &inboxFixture{fixture: f, records: rec,
		inbox: payment.NewInbox(f.DB, f.Service, "sim", 30*time.Second)}
}

// lostResponse pays under key with the charge's answer lost: the attempt
// stays in progress, lease released, and the ledger holds the charge.
func (f *inboxFixture) lostResponse(t *testing.T, key string) (*payment.Attempt, payment.Charge) {
	t.Helper()
	ctx := context.Background()
	if err := f.Sim.SetFaults(sim.Faults{FailAfterCharge: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := f.Service.Pay(ctx, "demo", key, visa)
	if got := payment.ErrorCode(err); got != payment.EOUTCOMEUNKNOWN {
		t.Fatalf("Pay = %v, want outcome unknown", err)
	}
	if err := f.Sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	a, err := f.DB.Attempt(ctx, "demo", key)
	if err != nil {
		t.Fatal(err)
	}
	charges := f.Ledger(t)[payment.DownstreamKey("demo", key)]
	if len(charges) != 1 {
		t.Fatalf("ledger holds %d charges under the key, want 1", len(charges))
	}
	f.records.won.Store(0)
	return a, charges[0]
}

// notCharged pays under key with the call failing before the provider
// charged: the attempt stays in progress, lease released, and the ledger
// holds nothing under the key.
func (f *inboxFixture) notCharged(t *testing.T, key string) *payment.Attempt {
	t.Helper()
	ctx := context.Background()
	if err := f.Sim.SetFaults(sim.Faults{FailBeforeCharge: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := f.Service.Pay(ctx, "demo", key, visa)
	if got := payment.ErrorCode(err); got != payment.EOUTCOMEUNKNOWN {
		t.Fatalf("Pay = %v, want outcome unknown", err)
	}
	if err := f.Sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	a, err := f.DB.Attempt(ctx, "demo", key)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.Ledger(t)[payment.DownstreamKey("demo", key)]); n != 0 {
		t.Fatalf("ledger holds %d charges under the key, want none", n)
	}
	f.records.won.Store(0)
	return a
}

func succeededEvent(id string, a *payment.Attempt, c payment.Charge) payment.Event {
	return payment.Event{Provider: "sim", ID: id, Type: "charge.succeeded", Kind: payment.EventSucceeded,
		PaymentID: a.ID, DownstreamKey: payment.DownstreamKey(a.Scope, a.Key), Charge: c}
}

// The same event delivered 100 times at once is applied once; every copy is
// answered done or busy (the sender redelivers), never an error.
func TestEventDeliveredConcurrentlyAppliesOnce(t *testing.T) {
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-concurrent")
	ev := succeededEvent("evt_1", a, c)

	const copies = 100
	var wg sync.WaitGroup
	var done, busy, other atomic.Int64
	start := make(chan struct{})
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := f.inbox.Deliver(context.Background(), ev)
			switch {
			case err != nil:
				t.Errorf("Deliver: %v", err)
			case d.Done():
				done.Add(1)
			case d.Busy:
				busy.Add(1)
			default:
				other.Add(1)
				t.Errorf("Deliver = %+v, want done or busy", d)
			}
		}()
	}
	close(start)
	wg.Wait()
	t.Logf("%d concurrent copies: %d answered done, %d busy (redeliver), %d other; records won: %d",
		copies, done.Load(), busy.Load(), other.Load(), f.records.won.Load())
	if got := f.records.won.Load(); got != 1 {
		t.Fatalf("records won = %d, want 1", got)
	}
	// A redelivery after the first copy finished is done, and does nothing.
	d, err := f.inbox.Deliver(context.Background(), ev)
	if err != nil || !d.Done() || !d.Duplicate {
		t.Fatalf("redelivery = %+v, %v; want a done duplicate", d, err)
	}
	e, err := f.DB.InboxEvent(context.Background(), "sim", "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if e.State != payment.EventProcessed || e.Attempts != 1 {
		t.Errorf("event = %s after %d tries, want processed after 1", e.State, e.Attempts)
	}
	// The client's retry replays what the event recorded: the provider's charge.
	res, err := f.Service.Pay(context.Background(), "demo", "k-concurrent", visa)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != 201 || !res.Replayed {
		t.Fatalf("retry = %d replayed %v, want a 201 replay", res.Status, res.Replayed)
	}
	got, _ := f.DB.Attempt(context.Background(), "demo", "k-concurrent")
	if got.ChargeID != c.ID {
		t.Errorf("charge id = %q, want the ledger's %q", got.ChargeID, c.ID)
	}
	if f.records.won.Load() != 1 {
		t.Errorf("the retry recorded again")
	}
}

// Reconcile, the event and the client's retry race for one stuck attempt:
// one writer wins, and all three end with its answer.
func TestReconcileEventAndRetryRace(t *testing.T) {
	for i := range 20 {
		f := newInboxFixture(t)
		a, c := f.lostResponse(t, "k-race")
		f.clock.Add(6 * time.Minute) // stale for reconcile
		ctx := context.Background()
		var wg sync.WaitGroup
		var retry payment.Result
		var retryErr, recErr, evErr error
		wg.Add(3)
		go func() { defer wg.Done(); _, recErr = f.Reconciler.RunOnce(ctx) }()
		go func() { defer wg.Done(); _, evErr = f.inbox.Deliver(ctx, succeededEvent("evt_race", a, c)) }()
		go func() { defer wg.Done(); retry, retryErr = f.Service.Pay(ctx, "demo", "k-race", visa) }()
		wg.Wait()
		if recErr != nil || evErr != nil {
			t.Fatalf("round %d: reconcile %v, event %v", i, recErr, evErr)
		}
		if got := f.records.won.Load(); got != 1 {
			t.Fatalf("round %d: records won = %d, want 1", i, got)
		}
		final, err := f.DB.Attempt(ctx, "demo", "k-race")
		if err != nil {
			t.Fatal(err)
		}
		if final.Status != payment.Succeeded || final.ChargeID != c.ID {
			t.Fatalf("round %d: attempt %s charge %q, want succeeded with %q", i, final.Status, final.ChargeID, c.ID)
		}
		// The retry either won, saw the winner's answer, or was told to retry.
		if retryErr == nil && string(retry.Body) != string(final.ResponseBody) {
			t.Fatalf("round %d: retry body differs from the stored one", i)
		}
		if retryErr != nil && payment.ErrorCode(retryErr) != payment.EINPROGRESS {
			t.Fatalf("round %d: retry = %v", i, retryErr)
		}
		if n := len(f.Ledger(t)[payment.DownstreamKey("demo", "k-race")]); n != 1 {
			t.Fatalf("round %d: ledger holds %d charges, want 1", i, n)
		}
	}
}

func TestEventOutcomes(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	paid, err := f.Service.Pay(ctx, "demo", "k-paid", visa)
	if err != nil || paid.Status != 201 {
		t.Fatalf("Pay = %v, %v", paid.Status, err)
	}
	a, _ := f.DB.Attempt(ctx, "demo", "k-paid")
	stuck, c := f.lostResponse(t, "k-stuck")
	uncharged := f.notCharged(t, "k-uncharged")
	declined := payment.Event{Provider: "sim", ID: "evt_declined", Type: "charge.failed", Kind: payment.EventFailed,
		PaymentID: uncharged.ID, DownstreamKey: payment.DownstreamKey("demo", "k-uncharged"), DeclineCode: "card_declined", DeclineReason: "Declined."}
	declinedButCharged := declined
	declinedButCharged.ID, declinedButCharged.PaymentID, declinedButCharged.DownstreamKey = "evt_declined_charged", stuck.ID, payment.DownstreamKey("demo", "k-stuck")
	late := declined
	late.ID, late.PaymentID, late.DownstreamKey = "evt_late", a.ID, payment.DownstreamKey("demo", "k-paid")
	forged := succeededEvent("evt_forged", stuck, c)
	forged.DownstreamKey = payment.DownstreamKey("demo", "another key")

	for _, tc := range []struct {
		name  string
		ev    payment.Event
		state payment.EventState
	}{
		{"unknown type", payment.Event{Provider: "sim", ID: "evt_x", Type: "customer.created", Kind: payment.EventOther}, payment.EventIgnored},
		{"unknown payment", payment.Event{Provider: "sim", ID: "evt_u", Type: "charge.succeeded", Kind: payment.EventSucceeded, PaymentID: "pay_nope"}, payment.EventIgnored},
		{"key does not match the payment", forged, payment.EventIgnored},
		{"late failure after success never downgrades", late, payment.EventIgnored},
		{"success agreeing with the record", succeededEvent("evt_agree", a, payment.Charge{ID: a.ChargeID, Amount: a.Amount, Currency: a.Currency}), payment.EventProcessed},
		{"a decline the provider confirms (no charge) settles a stuck attempt", declined, payment.EventProcessed},
		{"a decline of what the provider charged settles it as charged", declinedButCharged, payment.EventProcessed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := f.inbox.Deliver(ctx, tc.ev)
			if err != nil || d.State != tc.state {
				t.Fatalf("Deliver = %+v, %v; want %s", d, err, tc.state)
			}
		})
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-paid"); got.Status != payment.Succeeded || string(got.ResponseBody) != string(paid.Body) {
		t.Errorf("paid attempt changed: %s", got.Status)
	}
	got, _ := f.DB.Attempt(ctx, "demo", "k-uncharged")
	if got.Status != payment.Failed || got.ResponseStatus != 402 || got.FailureCode != "card_declined" {
		t.Errorf("declined attempt = %s %d %q, want failed 402 card_declined", got.Status, got.ResponseStatus, got.FailureCode)
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-stuck"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("the charged attempt a decline was about = %s %q, want succeeded with the provider's %s", got.Status, got.ChargeID, c.ID)
	}
}

// A processor that died mid-event leaves it processing; once its lease runs
// out a redelivery, or the sweep, takes it over under a new fence, and the
// dead processor's finish is refused.
func TestStrandedEventTakenOver(t *testing.T) {
	ctx := context.Background()
	for _, by := range []string{"redelivery", "sweep"} {
		t.Run(by, func(t *testing.T) {
			f := newInboxFixture(t)
			a, c := f.lostResponse(t, "k-"+by)
			ev := succeededEvent("evt_"+by, a, c)
			now := f.clock.Now()
			e := payment.InboxEvent{Event: ev, State: payment.EventReceived, ReceivedAt: now, UpdatedAt: now}
			if ok, err := f.DB.ReceiveEvent(ctx, &e); !ok || err != nil {
				t.Fatalf("ReceiveEvent = %v, %v", ok, err)
			}
			deadFence, ok, err := f.DB.BeginEvent(ctx, "sim", ev.ID, 0, now, now.Add(30*time.Second))
			if !ok || err != nil {
				t.Fatalf("BeginEvent = %v, %v", ok, err)
			}
			// While the lease lives, a copy is told to come back.
			if d, err := f.inbox.Deliver(ctx, ev); err != nil || !d.Busy {
				t.Fatalf("Deliver during the lease = %+v, %v; want busy", d, err)
			}
			f.clock.Add(31 * time.Second)
			if by == "sweep" {
				res, err := f.inbox.Sweep(ctx)
				if err != nil || res.Processed != 1 {
					t.Fatalf("Sweep = %v, %v; want 1 settled", res, err)
				}
			} else if d, err := f.inbox.Deliver(ctx, ev); err != nil || d.State != payment.EventProcessed {
				t.Fatalf("Deliver after the lease = %+v, %v; want processed", d, err)
			}
			if ok, err := f.DB.FinishEvent(ctx, "sim", ev.ID, deadFence, payment.EventFailedState, "", "late", f.clock.Now()); ok || err != nil {
				t.Fatalf("the dead processor's finish = %v, %v; want refused", ok, err)
			}
			if f.records.won.Load() != 1 {
				t.Fatalf("records won = %d, want 1", f.records.won.Load())
			}
		})
	}
}

// An event whose attempt a live request holds fails, to be tried again;
// past MaxAttempts it stays failed until an operator redelivers it.
func TestEventRetriedThenParked(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-held")
	now := f.clock.Now()
	// A retry took the attempt over and is still calling the provider.
	if _, ok, err := f.DB.TakeOver(ctx, "demo", "k-held", a.Fence, now, now.Add(time.Hour)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	f.inbox.MaxAttempts = 3
	ev := succeededEvent("evt_held", a, c)
	for i := range 5 {
		d, err := f.inbox.Deliver(ctx, ev)
		if err != nil || d.State != payment.EventFailedState || d.Done() {
			t.Fatalf("delivery %d = %+v, %v; want failed", i, d, err)
		}
	}
	e, _ := f.DB.InboxEvent(ctx, "sim", "evt_held")
	if e.Attempts != 3 || e.LastError == "" {
		t.Fatalf("event tried %d times, last error %q; want 3 and a reason", e.Attempts, e.LastError)
	}
	f.clock.Add(2 * time.Hour) // the retry died
	d, err := f.inbox.Redeliver(ctx, "sim", "evt_held")
	if err != nil || d.State != payment.EventProcessed {
		t.Fatalf("Redeliver = %+v, %v; want processed", d, err)
	}
	if _, err := f.inbox.Redeliver(ctx, "sim", "evt_held"); payment.ErrorCode(err) != payment.EINVALID {
		t.Fatalf("Redeliver of a processed event = %v, want invalid", err)
	}
}

// An event past the event retention is purged; a redelivery of it is then
// a new event and is applied again. That changes nothing: applying goes
// through the fenced record, which never changes a final answer, and an
// event for an attempt itself purged is ignored.
func TestPurgedEventRedeliveredChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-purged")
	settled := succeededEvent("evt_settled", a, c)
	contrary := payment.Event{Provider: "sim", ID: "evt_contrary", Type: "charge.failed", Kind: payment.EventFailed,
		PaymentID: a.ID, DownstreamKey: payment.DownstreamKey("demo", "k-purged"), DeclineCode: "card_declined"}
	for _, ev := range []payment.Event{settled, contrary} {
		if _, err := f.inbox.Deliver(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := f.DB.Attempt(ctx, "demo", "k-purged")
	if before.Status != payment.Succeeded || f.records.won.Load() != 1 {
		t.Fatalf("attempt = %s after %d records, want succeeded after 1", before.Status, f.records.won.Load())
	}

	// Events go after an hour; the attempt stays (a retention of 30 days).
	p, err := payment.NewPurger(payment.Purger{Store: f.DB, Now: f.clock.Now, Retention: 30 * 24 * time.Hour, EventRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(2 * time.Hour)
	if res, err := p.RunOnce(ctx); err != nil || res.EventsDeleted != 2 || res.Deleted != 0 {
		t.Fatalf("RunOnce = %+v, %v; want both events deleted and no attempt", res, err)
	}
	redeliver := func(ev payment.Event, want payment.EventState) {
		t.Helper()
		d, err := f.inbox.Deliver(ctx, ev)
		if err != nil || d.Duplicate || d.State != want {
			t.Fatalf("redelivery of purged %s = %+v, %v; want a new event, %s", ev.ID, d, err, want)
		}
	}
	redeliver(settled, payment.EventProcessed) // agrees with the record: nothing to do
	redeliver(contrary, payment.EventIgnored)  // disagrees: never changes a final answer
	after, _ := f.DB.Attempt(ctx, "demo", "k-purged")
	if after.Status != before.Status || after.ChargeID != before.ChargeID || after.Fence != before.Fence ||
		string(after.ResponseBody) != string(before.ResponseBody) || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("attempt changed by a redelivered event: %+v, was %+v", after, before)
	}
	if got := f.records.won.Load(); got != 1 {
		t.Errorf("records won = %d, want still 1", got)
	}

	// Once the attempt itself is purged, a redelivery names a payment the
	// inbox cannot settle: ignored.
	f.clock.Add(31 * 24 * time.Hour)
	if res, err := p.RunOnce(ctx); err != nil || res.EventsDeleted != 2 || res.Deleted != 1 {
		t.Fatalf("RunOnce = %+v, %v; want both events and the attempt deleted", res, err)
	}
	redeliver(settled, payment.EventIgnored)
	if n := len(f.Ledger(t)[payment.DownstreamKey("demo", "k-purged")]); n != 1 {
		t.Errorf("ledger holds %d charges, want 1", n)
	}
	if got := f.records.won.Load(); got != 1 {
		t.Errorf("records won = %d, want still 1", got)
	}
}
