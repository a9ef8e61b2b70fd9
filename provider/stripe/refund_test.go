package stripe_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/oncepay/oncepay/internal/fakestripe"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/stripe"
)

// charged makes a succeeded PaymentIntent of 1000 EUR at the fake and
// returns its id.
func charged(t *testing.T, c *stripe.Client, key string) string {
	t.Helper()
	ch, err := c.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: key, PaymentID: "pay_" + key,
		Amount: 1000, Currency: "EUR", Source: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	return ch.ID
}

func refundRequest(key, chargeID string, amount int64) payment.ProviderRefundRequest {
	return payment.ProviderRefundRequest{IdempotencyKey: key, RefundID: "re_" + key, PaymentID: "pay_1",
		ChargeID: chargeID, Amount: amount, Currency: "EUR", Reason: "requested_by_customer"}
}

// A Refund is made once per Idempotency-Key: the same call again is
// Stripe's saved answer, the same key with another amount is refused as
// reused, and LookupRefund finds it in the consistent list of the
// PaymentIntent's refunds.
func TestRefundDedupedByKey(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	c := newClient(t, fake.URL, 0)
	ctx := context.Background()
	pi := charged(t, c, "oncepay_pay")

	first, err := c.Refund(ctx, refundRequest("oncepay_re_a", pi, 300))
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if !strings.HasPrefix(first.ID, "re_") || first.Amount != 300 || first.Currency != "EUR" || first.ChargeID != pi || first.IdempotencyKey != "oncepay_re_a" {
		t.Errorf("Refund = %+v, want 300 EUR of %s under oncepay_re_a", first, pi)
	}
	again, err := c.Refund(ctx, refundRequest("oncepay_re_a", pi, 300))
	if err != nil || again != first {
		t.Errorf("Refund again = %+v, %v; want the first %+v", again, err, first)
	}
	if _, err := c.Refund(ctx, refundRequest("oncepay_re_a", pi, 400)); !errors.Is(err, payment.ErrProviderKeyReused) {
		t.Errorf("Refund with the key and another amount = %v, want ErrProviderKeyReused", err)
	}
	if n := fake.Counts().RefundsByKey["oncepay_re_a"]; n != 1 {
		t.Errorf("refunds under the key = %d, want 1", n)
	}
	if got := fake.Refunded()[pi]; got != 300 {
		t.Errorf("refunded %d, want 300", got)
	}

	found, ok, err := c.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "oncepay_re_a", ChargeID: pi})
	if err != nil || !ok || found != first {
		t.Errorf("LookupRefund = %+v %v %v, want %+v", found, ok, err, first)
	}
	if _, ok, err := c.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "oncepay_re_never", ChargeID: pi}); ok || err != nil {
		t.Errorf("LookupRefund of a key never used = %v %v, want not found", ok, err)
	}
}

// A refund whose answer is lost is an unknown outcome, never a decline;
// LookupRefund then finds the one refund Stripe made, and oncepay's retry
// records it without refunding again.
func TestRefundLostAnswer(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	var keep atomic.Bool // the fake loses every refund's answer until set
	fake.SetFaults(fakestripe.Faults{DropAfter: func(key string) bool {
		return strings.HasPrefix(key, "oncepay_re_") && !keep.Load()
	}})
	c := newClient(t, fake.URL, 0)
	ctx := context.Background()

	t.Run("provider", func(t *testing.T) {
		pi := charged(t, c, "oncepay_pay_lost")
		_, err := c.Refund(ctx, refundRequest("oncepay_re_lost", pi, 250))
		if _, declined := payment.IsDecline(err); err == nil || declined || errors.Is(err, payment.ErrProviderKeyReused) {
			t.Fatalf("Refund with its answer lost = %v, want an unknown outcome", err)
		}
		got, ok, err := c.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "oncepay_re_lost", ChargeID: pi})
		if err != nil || !ok || got.Amount != 250 || got.Currency != "EUR" || !strings.HasPrefix(got.ID, "re_") {
			t.Errorf("LookupRefund = %+v %v %v, want the refund of 250 EUR", got, ok, err)
		}
	})

	t.Run("oncepay", func(t *testing.T) {
		svc, _ := oncepay(t, c, newClock().Now)
		res, err := svc.Pay(ctx, "merchant", "order-1", request(1000, "pm_card_visa"))
		if err != nil || res.Status != 201 {
			t.Fatalf("Pay = %d %s, %v", res.Status, res.Body, err)
		}
		var p struct{ ID string }
		if err := json.Unmarshal(res.Body, &p); err != nil {
			t.Fatal(err)
		}
		req, err := payment.ParseRefundRequest(p.ID, []byte(`{"amount":400}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Refund(ctx, "merchant", "refund-1", req); payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
			t.Fatalf("Refund with its answer lost = %v, want %s", err, payment.EOUTCOMEUNKNOWN)
		}
		keep.Store(true)
		res, err = svc.Refund(ctx, "merchant", "refund-1", req)
		if err != nil || res.Status != 201 {
			t.Fatalf("retry = %d %s, %v; want 201", res.Status, res.Body, err)
		}
		dk := payment.RefundDownstreamKey("merchant", "refund-1")
		if n := fake.Counts().RefundsByKey[dk]; n != 1 {
			t.Errorf("Stripe refunds under the key = %d, want 1", n)
		}
		if !strings.Contains(string(res.Body), `"provider_refund_id":"re_`) || !strings.Contains(string(res.Body), `"amount":400`) {
			t.Errorf("retry = %s, want the refund of 400 naming Stripe's", res.Body)
		}
		replay, err := svc.Refund(ctx, "merchant", "refund-1", req)
		if err != nil || !replay.Replayed || string(replay.Body) != string(res.Body) {
			t.Errorf("replay = %s (replayed %v), %v; want the same bytes", replay.Body, replay.Replayed, err)
		}
	})
}

// A refund Stripe refuses or does not make is a decline, and nothing counts
// as refunded: more than is left of the charge (refused), and a Refund that
// came back failed (LookupRefund then finds nothing given back).
func TestRefundDeclined(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	c := newClient(t, fake.URL, 0)
	ctx := context.Background()
	pi := charged(t, c, "oncepay_pay")
	if _, err := c.Refund(ctx, refundRequest("oncepay_re_most", pi, 800)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Refund(ctx, refundRequest("oncepay_re_over", pi, 300))
	if d, declined := payment.IsDecline(err); !declined || d.Code != "amount_too_large" {
		t.Errorf("Refund beyond what is left = %v, want an amount_too_large decline", err)
	}
	if got := fake.Refunded()[pi]; got != 800 {
		t.Errorf("refunded %d, want 800", got)
	}

	failed := `{"id":"re_failed1","object":"refund","amount":100,"currency":"eur","payment_intent":"` + pi +
		`","status":"failed","failure_reason":"expired_or_canceled_card","metadata":{"oncepay_key":"oncepay_re_failed"},"created":1700000000}`
	fake.SetFaults(fakestripe.Faults{Inject: func(r *http.Request) (int, string, bool) {
		switch r.Method {
		case "POST":
			return 200, failed, true
		case "GET":
			return 200, `{"object":"list","url":"/v1/refunds","has_more":false,"data":[` + failed + `]}`, true
		}
		return 0, "", false
	}})
	_, err = c.Refund(ctx, refundRequest("oncepay_re_failed", pi, 100))
	if d, declined := payment.IsDecline(err); !declined || d.Code != "expired_or_canceled_card" {
		t.Errorf("Refund that came back failed = %v, want an expired_or_canceled_card decline", err)
	}
	_, ok, err := c.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "oncepay_re_failed", ChargeID: pi})
	if d, declined := payment.IsDecline(err); ok || !declined || d.Code != "expired_or_canceled_card" {
		t.Errorf("LookupRefund of a failed refund = %v %v, want the decline: it holds a refund that gave nothing back", ok, err)
	}
}

// A refund whose answer was lost, and which Stripe then failed, is what the
// retry's lookup finds: a stored refund-declined, the reservation given
// back, and no create sent again (Stripe would replay the "succeeded" it
// saved when the refund was made).
func TestFailedRefundFoundByTheRetryIsDeclined(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	var lose atomic.Bool
	lose.Store(true)
	fake.SetFaults(fakestripe.Faults{DropAfter: func(key string) bool {
		return strings.HasPrefix(key, "oncepay_re_") && lose.Load()
	}})
	svc, db := oncepay(t, newClient(t, fake.URL, 0), newClock().Now)
	ctx := context.Background()
	res, err := svc.Pay(ctx, "merchant", "order-1", request(1000, "pm_card_visa"))
	if err != nil || res.Status != 201 {
		t.Fatalf("Pay = %d %s, %v", res.Status, res.Body, err)
	}
	var p struct{ ID string }
	json.Unmarshal(res.Body, &p)
	req, err := payment.ParseRefundRequest(p.ID, []byte(`{"amount":400}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Refund(ctx, "merchant", "refund-1", req); payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
		t.Fatalf("Refund with its answer lost = %v, want outcome unknown", err)
	}
	fake.SetRefundStatus(payment.RefundDownstreamKey("merchant", "refund-1"), "failed")
	lose.Store(false)
	res, err = svc.Refund(ctx, "merchant", "refund-1", req)
	var prob payment.Problem
	json.Unmarshal(res.Body, &prob)
	if err != nil || res.Status != 402 || prob.Type != payment.ProblemRefundDeclined {
		t.Errorf("the retry = %d %s, %v; want the stored 402 refund-declined", res.Status, res.Body, err)
	}
	pay, err := db.Payment(ctx, "merchant", p.ID)
	if err != nil || pay.AmountRefunded != 0 || pay.AmountReserved != 0 {
		t.Errorf("payment = %+v, %v; want nothing refunded and nothing reserved", pay, err)
	}
}
