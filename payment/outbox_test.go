package payment_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
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
