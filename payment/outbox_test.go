package payment_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// An event is Stripe's shape, its data the payment or refund as GET shows
// it once the change is made, of the type the change names.
func TestChangeEvent(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 500e6, time.UTC)
	a := payment.NewAttempt("mer_1", "k", payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa", Description: "tea"}, now, time.Minute)
	r := payment.NewRefundAttempt("mer_1", "r", payment.RefundRequest{PaymentID: a.ID, Amount: 300, Reason: "duplicate"}, now, time.Minute)
	r.Currency = "EUR"
	for _, c := range []struct {
		a      payment.Attempt
		o      payment.Outcome
		typ    payment.EventType
		object string
	}{
		{a, payment.SucceededOutcome(a, payment.Charge{ID: "ch_1"}), payment.EventPaymentSucceeded,
			`{"id":"` + a.ID + `","object":"payment","status":"succeeded","amount":1000,"currency":"EUR","charge_id":"ch_1","description":"tea","amount_refunded":0,"refunds":[],"idempotency_key":"k","created_at":"2026-11-30T12:00:00.500Z"}`},
		{a, payment.NotCompletedOutcome(a), payment.EventPaymentFailed,
			`{"id":"` + a.ID + `","object":"payment","status":"failed","amount":1000,"currency":"EUR","failure_code":"not_completed","description":"tea","amount_refunded":0,"refunds":[],"idempotency_key":"k","created_at":"2026-11-30T12:00:00.500Z"}`},
		{a, payment.QueuedOutcome(a), payment.EventPaymentQueued, ""},
		{a, payment.Outcome{Status: payment.Expired, FailureCode: "offline_expired"}, payment.EventPaymentExpired, ""},
		{r, payment.Outcome{Status: payment.Succeeded, ChargeID: "pre_1"}, payment.EventRefundSucceeded,
			`{"id":"` + r.ID + `","object":"refund","payment_id":"` + a.ID + `","status":"succeeded","amount":300,"currency":"EUR","reason":"duplicate","provider_refund_id":"pre_1","idempotency_key":"r","created_at":"2026-11-30T12:00:00.500Z"}`},
		{r, payment.Outcome{Status: payment.Failed, FailureCode: "declined"}, payment.EventRefundFailed, ""},
	} {
		e := payment.ChangeEvent(c.a, c.o, now.Add(time.Second))
		if e.Type != c.typ || e.Scope != "mer_1" || e.ObjectID != c.a.ID || !strings.HasPrefix(e.ID, "evt_") || !e.CreatedAt.Equal(now.Add(time.Second)) {
			t.Errorf("%s: event = %+v, want %s of %s", c.o.Status, e, c.typ, c.a.ID)
		}
		var body struct {
			ID      string            `json:"id"`
			Object  string            `json:"object"`
			Type    payment.EventType `json:"type"`
			Created int64             `json:"created"`
			Data    struct {
				Object json.RawMessage `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.ID != e.ID || body.Object != "event" || body.Type != c.typ || body.Created != now.Unix()+1 {
			t.Errorf("%s: body = %s, want id, object event, type %s, created %d", c.typ, e.Body, c.typ, now.Unix()+1)
		}
		if c.object != "" && string(body.Data.Object) != c.object {
			t.Errorf("%s: data.object =\n%s\nwant\n%s", c.typ, body.Data.Object, c.object)
		}
	}
	// The answer's JSON, reused, is the view built anew.
	o := payment.SucceededOutcome(a, payment.Charge{ID: "ch_1"})
	reused, built := payment.ChangeEvent(a, o, now), payment.ChangeEvent(a, payment.Outcome{Status: o.Status, ChargeID: o.ChargeID}, now)
	if strings.TrimPrefix(string(reused.Body), `{"id":"`+reused.ID) != strings.TrimPrefix(string(built.Body), `{"id":"`+built.ID) {
		t.Errorf("event of a 201 = %s, want what a view built anew gives: %s", reused.Body, built.Body)
	}
	// The 202's body is the queued payment's view: the event shows the same.
	q := payment.ChangeEvent(a, payment.QueuedOutcome(a), now)
	if want := strings.TrimSpace(string(payment.QueuedOutcome(a).ResponseBody)); !strings.Contains(string(q.Body), want) {
		t.Errorf("payment.queued = %s, want its data to be the 202's body %s", q.Body, want)
	}
}

// Event ids are unique, and sort in the order they were made (those made
// in one microsecond, in any order).
func TestEventIDsOrdered(t *testing.T) {
	prev, seen := "", map[string]bool{}
	for range 100 {
		id := payment.NewEventID()
		if id <= prev || seen[id] {
			t.Fatalf("event id %s after %s: not in time order", id, prev)
		}
		prev, seen[id] = id, true
		time.Sleep(time.Microsecond)
	}
}

// outbox is every event of the demo scope, by the payment or refund it is
// about, oldest first; and each event's data.object by event id.
func outbox(t *testing.T, f *fixture) (map[string][]payment.EventType, map[string]string) {
	t.Helper()
	es, err := f.DB.OutboxEvents(context.Background(), payment.OutboxFilter{Scope: "demo", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	types, objects := map[string][]payment.EventType{}, map[string]string{}
	for _, e := range slices.Backward(es) {
		types[e.ObjectID] = append(types[e.ObjectID], e.Type)
		var body struct {
			Data struct {
				Object json.RawMessage `json:"object"`
			} `json:"data"`
		}
		if err := json.Unmarshal(e.Body, &body); err != nil {
			t.Fatal(err)
		}
		objects[e.ID] = string(body.Data.Object)
	}
	return types, objects
}

// Every way a payment or a refund changes state writes exactly one event of
// the change, whose data is what GET shows once it is made: a request's
// record, a takeover's, reconcile's, a provider event's, the forward
// queue's queueing, forwarding and expiry. A replay, a refusal and an
// unknown outcome write none.
func TestEveryChangeHasOneEvent(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	pay := func(key, source string) payment.Result {
		t.Helper()
		r, err := f.Service.Pay(ctx, "demo", key, payment.Request{Amount: 1000, Currency: "EUR", Source: source})
		if err != nil && payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
			t.Fatalf("Pay(%s) = %v", key, err)
		}
		return r
	}
	faults := func(fs sim.Faults) {
		t.Helper()
		if err := f.Sim.SetFaults(fs); err != nil {
			t.Fatal(err)
		}
	}
	id := func(key string) string { return f.attempt(t, key).ID }

	pay("paid", "tok_visa")
	pay("paid", "tok_visa") // a replay
	pay("declined", "tok_chargeDeclined")
	faults(sim.Faults{FailAfterCharge: 1})
	pay("lost", "tok_visa") // the answer lost: nothing recorded yet
	faults(sim.Faults{})
	pay("lost", "tok_visa") // the retry takes over and finds the charge
	refund, err := f.Service.Refund(ctx, "demo", "refund", payment.RefundRequest{PaymentID: id("paid"), Amount: 300})
	if err != nil || refund.Status != 201 {
		t.Fatalf("Refund = %d %s, %v", refund.Status, refund.Body, err)
	}
	if _, err := f.Service.Refund(ctx, "demo", "too-much", payment.RefundRequest{PaymentID: id("paid"), Amount: 5000}); payment.ErrorCode(err) != payment.EREFUNDEXCEEDS {
		t.Fatalf("Refund of too much = %v, want refused", err)
	}
	f.abandon(t, "abandoned", false)
	f.clock.Add(6 * time.Minute)
	if res, err := f.Reconciler.RunOnce(ctx); err != nil || res.Failed != 1 {
		t.Fatalf("reconcile = %+v, %v, want the abandoned one failed", res, err)
	}

	// Offline: queued, then forwarded; queued, then expired.
	if err := f.DB.SetOfflineLimits(ctx, "demo", &payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 5000, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	faults(sim.Faults{FailBeforeCharge: 1})
	pay("expires", "tok_visa")
	f.clock.Add(time.Hour)
	pay("forwarded", "tok_visa")
	faults(sim.Faults{})
	if res, err := f.Forwarder.RunOnce(ctx); err != nil || res.Succeeded != 1 || res.Expired != 1 {
		t.Fatalf("forward = %+v, %v, want one succeeded, one expired", res, err)
	}

	types, objects := outbox(t, f)
	refundID := f.attempt(t, "refund").ID
	for object, want := range map[string][]payment.EventType{
		id("paid"):      {payment.EventPaymentSucceeded},
		id("declined"):  {payment.EventPaymentFailed},
		id("lost"):      {payment.EventPaymentSucceeded},
		refundID:        {payment.EventRefundSucceeded},
		id("abandoned"): {payment.EventPaymentFailed},
		id("expires"):   {payment.EventPaymentQueued, payment.EventPaymentExpired},
		id("forwarded"): {payment.EventPaymentQueued, payment.EventPaymentSucceeded},
	} {
		if got := types[object]; !slices.Equal(got, want) {
			t.Errorf("events of %s = %v, want %v", object, got, want)
		}
		delete(types, object)
	}
	if len(types) != 0 {
		t.Errorf("events of nothing that changed: %v", types)
	}
	// The last event of a payment shows it as GET does now (the refunded
	// one: as GET did before its refund).
	es, _ := f.DB.OutboxEvents(ctx, payment.OutboxFilter{Scope: "demo", Limit: 1000})
	last := map[string]string{}
	for _, e := range slices.Backward(es) {
		last[e.ObjectID] = objects[e.ID]
	}
	for _, key := range []string{"declined", "lost", "abandoned", "expires", "forwarded"} {
		v, err := f.Service.Payment(ctx, "demo", id(key))
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := json.Marshal(v); last[id(key)] != string(want) {
			t.Errorf("%s: the event's data.object =\n%s\nwant what GET shows\n%s", key, last[id(key)], want)
		}
	}
	rs, err := f.Service.Refunds(ctx, "demo", id("paid"))
	if err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
	if want, _ := json.Marshal(rs[0]); last[refundID] != string(want) {
		t.Errorf("refund's data.object = %s, want %s", last[refundID], want)
	}
}

// An event from the provider that settles an attempt writes its change's
// one event, however many copies arrive.
func TestProviderEventWritesOneEvent(t *testing.T) {
	f := newInboxFixture(t)
	a, c := f.lostResponse(t, "k")
	for i := range 3 {
		if d, err := f.inbox.Deliver(context.Background(), succeededEvent("evt_sim_1", a, c)); err != nil || !d.Done() {
			t.Fatalf("delivery %d = %+v, %v", i, d, err)
		}
	}
	if types, _ := outbox(t, f.fixture); !slices.Equal(types[a.ID], []payment.EventType{payment.EventPaymentSucceeded}) {
		t.Errorf("events = %v, want one payment.succeeded", types)
	}
}
