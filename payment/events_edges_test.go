package payment_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// An inbox without a lease would let two processors apply one event.
func TestNewInboxRefusesNoLease(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("NewInbox with a zero lease did not refuse")
		}
	}()
	f := newFixture(t)
	payment.NewInbox(f.DB, f.Service, "sim", 0)
}

// The sweep leaves an event received a moment ago to the delivery that is
// applying it; once a lease has passed with the event never begun, the
// sweep takes it, and counts it.
func TestSweepWaitsALease(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-swept")
	now := f.clock.Now()
	e := payment.InboxEvent{Event: succeededEvent("evt_swept", a, c), State: payment.EventReceived, ReceivedAt: now, UpdatedAt: now}
	if ok, err := f.DB.ReceiveEvent(ctx, &e); !ok || err != nil {
		t.Fatalf("ReceiveEvent = %v, %v", ok, err)
	}
	f.clock.Add(29 * time.Second)
	if res, err := f.inbox.Sweep(ctx); err != nil || res.Found != 0 {
		t.Fatalf("Sweep within the lease = %v, %v; want nothing found", res, err)
	}
	f.clock.Add(2 * time.Second)
	if res, err := f.inbox.Sweep(ctx); err != nil || res.Found != 1 || res.Processed != 1 {
		t.Fatalf("Sweep after the lease = %v, %v; want 1 found, 1 settled", res, err)
	}
}

// A failed event agreeing with a failed attempt is processed; events that
// disagree with a final attempt are not applied: a late failure is
// ignored and logged, a success (money moved that the client was told did
// not) is held failed with its reason, logged as an error and counted.
func TestEventsAgainstFinalAttempts(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	var logs bytes.Buffer
	inbox := payment.NewInbox(f.DB, f.Service, "sim", 30*time.Second)
	inbox.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	var conflicts int
	inbox.Refused = func(_, reason string) {
		if reason == payment.RefusedConflict {
			conflicts++
		}
	}
	if r, err := f.Service.Pay(ctx, "demo", "k-declined", payment.Request{Amount: 500, Currency: "EUR", Source: "tok_chargeDeclined"}); err != nil || r.Status != 402 {
		t.Fatalf("Pay = %d, %v; want 402", r.Status, err)
	}
	a, _ := f.DB.Attempt(ctx, "demo", "k-declined")
	failed := payment.Event{Provider: "sim", ID: "evt_failed", Type: "charge.failed", Kind: payment.EventFailed,
		PaymentID: a.ID, DownstreamKey: payment.DownstreamKey("demo", "k-declined"), DeclineCode: "card_declined"}
	if d, err := inbox.Deliver(ctx, failed); err != nil || d.State != payment.EventProcessed {
		t.Errorf("a failure agreeing with the declined attempt = %+v, %v; want processed", d, err)
	}
	succeeded := succeededEvent("evt_succeeded", a, payment.Charge{ID: "ch_surprise", Amount: a.Amount, Currency: a.Currency})
	if d, err := inbox.Deliver(ctx, succeeded); err != nil || d.State != payment.EventFailedState {
		t.Errorf("a success after a decline = %+v, %v; want held failed", d, err)
	}
	if e, err := f.DB.InboxEvent(ctx, "sim", "evt_succeeded"); err != nil || !strings.HasPrefix(e.LastError, "Held: flagged for an operator: the payment failed") {
		t.Errorf("held event = %+v, %v; want its reason", e, err)
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"event disagrees with a final attempt; not applied"`) {
		t.Errorf("a success after a decline was not logged as an error: %s", logs.String())
	}
	if conflicts != 1 {
		t.Errorf("conflicts counted = %d, want the success after a decline", conflicts)
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-declined"); got.Status != payment.Failed || got.ChargeID != "" {
		t.Errorf("attempt = %s %q, want still failed with no charge", got.Status, got.ChargeID)
	}
}

// An event settles only attempts made through the provider whose endpoint
// received it: one about an attempt another provider took (a binding that
// has moved since), one about an attempt whose provider is not known, and
// one from another endpoint are each ignored, counted, and change nothing.
func TestEventFromAnotherProviderRefused(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	refused := map[string]int{}
	f.inbox.Refused = func(provider, reason string) { refused[provider+" "+reason]++ }
	for _, tc := range []struct {
		name, key, endpoint, madeThrough string
	}{
		{"an attempt made through another provider", "k-old-bank", "sim", "http://old-bank:1"},
		{"an attempt whose provider is not known", "k-unknown", "sim", ""},
		{"an event from another endpoint", "k-sim", "stripe", "sim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			a := payment.NewAttempt("demo", key, visa, f.clock.Now(), 0)
			a.Provider = tc.madeThrough
			if ok, err := f.DB.Claim(ctx, &a); !ok || err != nil {
				t.Fatalf("Claim = %v, %v", ok, err)
			}
			ev := succeededEvent("evt_"+key, &a, payment.Charge{ID: "ch_x", Amount: a.Amount, Currency: a.Currency})
			ev.Provider = tc.endpoint
			d, err := f.inbox.Deliver(ctx, ev)
			if err != nil || d.State != payment.EventIgnored {
				t.Fatalf("Deliver = %+v, %v; want ignored", d, err)
			}
			if e, _ := f.DB.InboxEvent(ctx, tc.endpoint, ev.ID); !strings.HasPrefix(e.Result, "not applied: the payment was made through ") {
				t.Errorf("result = %q, want the reason", e.Result)
			}
			if got, _ := f.DB.Attempt(ctx, "demo", key); got.Status != payment.InProgress || got.Fence != 1 {
				t.Errorf("attempt = %s under fence %d, want untouched", got.Status, got.Fence)
			}
		})
	}
	if refused["sim other_provider"] != 2 || refused["stripe other_provider"] != 1 {
		t.Errorf("refusals counted = %v, want 2 from sim and 1 from stripe, for another provider", refused)
	}
	if f.records.won.Load() != 0 {
		t.Errorf("records won = %d, want none", f.records.won.Load())
	}
}

// An event names a payment: one naming a refund's attempt (its id and
// downstream key) is about no payment, and is ignored, the refund
// untouched.
func TestEventAboutARefundIgnored(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	paid, err := f.Service.Pay(ctx, "demo", "k-paid", visa)
	if err != nil || paid.Status != 201 {
		t.Fatalf("Pay = %d, %v", paid.Status, err)
	}
	p, _ := f.DB.Attempt(ctx, "demo", "k-paid")
	r := payment.NewRefundAttempt("demo", "k-refund", payment.RefundRequest{PaymentID: p.ID, Amount: 100}, f.clock.Now(), 0)
	r.Provider = "sim"
	if ok, err := f.DB.Claim(ctx, &r); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	ev := payment.Event{Provider: "sim", ID: "evt_refund", Type: "charge.failed", Kind: payment.EventFailed,
		PaymentID: r.ID, DownstreamKey: payment.DownstreamKey("demo", "k-refund"), DeclineCode: "card_declined"}
	if d, err := f.inbox.Deliver(ctx, ev); err != nil || d.State != payment.EventIgnored {
		t.Fatalf("Deliver = %+v, %v; want ignored", d, err)
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-refund"); got.Status != payment.InProgress || got.Fence != 1 {
		t.Errorf("refund attempt = %s under fence %d, want untouched", got.Status, got.Fence)
	}
}

// The provider holding the payment's key for a charge of another amount (a
// key reused after oncepay forgot it) never makes the payment succeeded,
// though the event agrees with the payment: what the provider says is
// recorded, the key's reuse, final and failed.
func TestEventKeyHeldForAnotherPaymentNeverSucceeds(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a := f.abandon(t, "k-reused", false)
	c, err := f.Sim.Charge(ctx, payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey("demo", "k-reused"), Amount: 999, Currency: "EUR", Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Add(f.Service.Lease + time.Second) // the owner died
	ev := succeededEvent("evt_reused", a, payment.Charge{ID: c.ID, Amount: a.Amount, Currency: a.Currency})
	if d, err := f.inbox.Deliver(ctx, ev); err != nil || d.State != payment.EventProcessed {
		t.Fatalf("Deliver = %+v, %v; want processed", d, err)
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-reused"); got.Status != payment.Failed || got.FailureCode != "provider_key_reused" || got.ChargeID != "" {
		t.Errorf("attempt = %s %q %q, want failed as provider_key_reused, no charge", got.Status, got.FailureCode, got.ChargeID)
	}
}

// lostTakeOver is a store whose takeovers all lose to a request that settles
// the attempt first.
type lostTakeOver struct {
	payment.Store
	settle func()
}

func (l lostTakeOver) TakeOver(ctx context.Context, scope, key string, fence int64, now, leaseUntil time.Time) (int64, bool, error) {
	l.settle()
	return 0, false, nil
}

// An event that loses the attempt to a request reads what the request
// recorded and ends processed, having written nothing.
func TestEventLosesTheAttemptToARequest(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-lost")
	settle := func() {
		if r, err := f.Service.Pay(ctx, "demo", "k-lost", visa); err != nil || r.Status != 201 {
			t.Errorf("the request's retry = %d, %v", r.Status, err)
		}
	}
	svc := *f.Service
	svc.Store = lostTakeOver{Store: f.DB, settle: settle}
	inbox := payment.NewInbox(f.DB, &svc, "sim", 30*time.Second)
	d, err := inbox.Deliver(ctx, succeededEvent("evt_lost", a, c))
	if err != nil || d.State != payment.EventProcessed {
		t.Fatalf("Deliver = %+v, %v; want processed (already succeeded)", d, err)
	}
	if e, _ := f.DB.InboxEvent(ctx, "sim", "evt_lost"); !strings.HasPrefix(e.Result, "already") {
		t.Errorf("event result = %q, want already succeeded", e.Result)
	}
}

// brokenLookup is an event store whose attempt lookup fails inside.
type brokenLookup struct{ payment.EventStore }

func (brokenLookup) AttemptByPaymentID(context.Context, string) (*payment.ListedAttempt, error) {
	return nil, errors.New("disk on fire")
}

// An internal failure leaves the event failed, to be tried again, with the
// cause on the operator's page.
func TestEventInternalFailureShowsItsCause(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-broken")
	inbox := payment.NewInbox(brokenLookup{f.DB}, f.Service, "sim", 30*time.Second)
	if d, err := inbox.Deliver(ctx, succeededEvent("evt_broken", a, c)); err != nil || d.State != payment.EventFailedState {
		t.Fatalf("Deliver = %+v, %v; want failed", d, err)
	}
	if e, _ := f.DB.InboxEvent(ctx, "sim", "evt_broken"); !strings.Contains(e.LastError, "disk on fire") {
		t.Errorf("last error = %q, want the cause", e.LastError)
	}
}

// An error's text carries its cause, for logs; without one, code and message.
func TestErrorText(t *testing.T) {
	if got, want := (&payment.Error{Code: payment.EINTERNAL, Message: "record", Err: errors.New("disk on fire")}).Error(), "internal: record: disk on fire"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := payment.Errorf(payment.EINVALID, "amount must be positive.").Error(), "invalid: amount must be positive."; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// An event that failed because a live request held its attempt is tried
// again by the sweep, once a lease has passed, even if its sender gave up;
// one out of tries is left for the operator.
func TestSweepRetriesFailedEvents(t *testing.T) {
	ctx := context.Background()
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k-held")
	now := f.clock.Now()
	if _, ok, err := f.DB.TakeOver(ctx, "demo", "k-held", a.Fence, now, now.Add(time.Hour)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	f.inbox.MaxAttempts = 2
	ev := succeededEvent("evt_held", a, c)
	if d, err := f.inbox.Deliver(ctx, ev); err != nil || d.State != payment.EventFailedState {
		t.Fatalf("Deliver while a request holds the attempt = %+v, %v; want failed", d, err)
	}
	parked := succeededEvent("evt_parked", a, c)
	for range 2 {
		f.inbox.Deliver(ctx, parked)
	}
	f.clock.Add(2 * time.Hour) // the request that held the attempt died
	res, err := f.inbox.Sweep(ctx)
	if err != nil || res.Found != 1 || res.Processed != 1 {
		t.Fatalf("Sweep = %v, %v; want the failed event found and settled, the parked one left", res, err)
	}
	if got, _ := f.DB.Attempt(ctx, "demo", "k-held"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("attempt = %s %q, want succeeded with the event's charge", got.Status, got.ChargeID)
	}
	if e, _ := f.DB.InboxEvent(ctx, "sim", "evt_parked"); e.State != payment.EventFailedState || e.Attempts != 2 {
		t.Errorf("the parked event = %s after %d tries, want failed after 2, for the operator", e.State, e.Attempts)
	}
}

// A purged key's refusal names what the key made: a payment, or a refund
// of one.
func TestExpiredKeyNamesWhatItMade(t *testing.T) {
	a := payment.NewAttempt("demo", "k", visa, time.Now(), time.Minute)
	p := payment.ProblemOf(payment.ExpiredKey(&a, "payment", "pay_1", "pay_1"))
	if p.Type != payment.ProblemKeyExpired || p.PaymentID != "pay_1" || p.RefundID != "" || !strings.Contains(p.Detail, "GET /v1/payments/pay_1;") {
		t.Errorf("a payment's expired key = %+v", p)
	}
	p = payment.ProblemOf(payment.ExpiredKey(&a, "refund", "re_1", "pay_1"))
	if p.Type != payment.ProblemKeyExpired || p.PaymentID != "pay_1" || p.RefundID != "re_1" || !strings.Contains(p.Detail, "/v1/payments/pay_1/refunds") {
		t.Errorf("a refund's expired key = %+v", p)
	}
}
