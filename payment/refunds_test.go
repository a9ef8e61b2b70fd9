package payment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// paid pays 1000 EUR under key in scope and returns the payment.
func (f *fixture) paid(t *testing.T, scope, key string) *payment.Payment {
	t.Helper()
	ctx := context.Background()
	if r, err := f.Service.Pay(ctx, scope, key, visa); err != nil || r.Status != 201 {
		t.Fatalf("Pay(%s, %s) = %d %s, %v", scope, key, r.Status, r.Body, err)
	}
	a, err := f.DB.Attempt(ctx, scope, key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.DB.Payment(ctx, scope, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A refund found at the provider under the refund's key for another amount
// or in another currency is another refund's, whether a retry's takeover or
// reconcile finds it: it is not reported as this one's, the refund fails as
// the key's reuse, its reservation goes back, and nothing more is refunded.
// (The payment's lookup keeps the same rule: TestTakeOverRefusesAnotherPaymentsCharge.)
func TestRefundFoundForAnotherAmountOrCurrencyIsNotThisOne(t *testing.T) {
	for _, other := range []struct {
		name     string
		amount   int64
		currency string
	}{{"amount", 301, "EUR"}, {"currency", 300, "USD"}} {
		for _, by := range []string{"takeover", "reconcile"} {
			t.Run(other.name+"/"+by, func(t *testing.T) {
				ctx := context.Background()
				f := newFixture(t)
				p := f.paid(t, "demo", "pay")
				req := payment.RefundRequest{PaymentID: p.ID, Amount: 300}
				a := payment.NewRefundAttempt("demo", "r", req, f.clock.Now(), f.Service.Lease)
				a.Provider = f.Service.ProviderName
				if ok, err := f.DB.Claim(ctx, &a); !ok || err != nil { // an owner that then dies
					t.Fatalf("Claim = %v, %v", ok, err)
				}
				chargeID := p.ChargeID
				if other.currency != p.Currency {
					c, err := f.Sim.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "another-charge", Amount: 1000, Currency: other.currency, Source: "tok_visa"})
					if err != nil {
						t.Fatal(err)
					}
					chargeID = c.ID
				}
				dk := payment.RefundDownstreamKey("demo", "r")
				found, err := f.Sim.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: dk, ChargeID: chargeID,
					Amount: other.amount, Currency: other.currency})
				if err != nil {
					t.Fatal(err)
				}
				var body []byte
				if by == "takeover" {
					f.clock.Add(time.Minute) // the dead owner's lease has run out
					r, err := f.Service.Refund(ctx, "demo", "r", req)
					var prob payment.Problem
					json.Unmarshal(r.Body, &prob)
					if err != nil || r.Status != 409 || prob.Type != payment.ProblemKeyReused {
						t.Errorf("takeover = %d %s, %v; want the stored 409 key reused", r.Status, r.Body, err)
					}
					body = r.Body
				} else {
					f.clock.Add(10 * time.Minute)
					if res, err := f.Reconciler.RunOnce(ctx); err != nil || res.Failed != 1 {
						t.Errorf("reconcile = %+v, %v; want the refund failed", res, err)
					}
				}
				got := f.attempt(t, "r")
				if got.Status != payment.Failed || got.ResponseStatus != 409 || got.ChargeID != "" || bytes.Contains(got.ResponseBody, []byte(found.ID)) ||
					body != nil && !bytes.Equal(body, got.ResponseBody) {
					t.Errorf("refund attempt = %s %d %q %s, want failed 409 with no provider refund, not %s", got.Status, got.ResponseStatus, got.ChargeID, got.ResponseBody, found.ID)
				}
				if p, err := f.DB.Payment(ctx, "demo", p.ID); err != nil || p.AmountRefunded != 0 || p.AmountReserved != 0 {
					t.Errorf("payment = %+v, %v; want nothing refunded, the reservation given back", p, err)
				}
				if c := f.Calls()[dk]; c.Refunds != 1 || c.RefundLookups != 1 {
					t.Errorf("provider calls = %+v, want the test's one refund and one lookup", c)
				}
			})
		}
	}
}

// Two merchants refunding under the same client key give the provider two
// keys: each refund is made against its own merchant's charge, and neither
// is told the key is another refund's.
func TestMerchantsRefundingUnderOneKeyNeverShareAProviderKey(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	charges := map[string]string{} // provider key -> the charge its refund must name
	for _, name := range []string{"Shop A", "Shop B"} {
		scope, _, _ := f.Merchant(t, name)
		p := f.paid(t, scope, "order-1")
		r, err := f.Service.Refund(ctx, scope, "refund-1", payment.RefundRequest{PaymentID: p.ID, Amount: 300})
		if err != nil || r.Status != 201 {
			t.Fatalf("%s's refund = %d %s, %v; want 201", name, r.Status, r.Body, err)
		}
		charges[payment.RefundDownstreamKey(scope, "refund-1")] = p.ChargeID
	}
	if len(charges) != 2 {
		t.Fatalf("provider keys of the two merchants' refunds = %d, want 2", len(charges))
	}
	refunds, err := f.Sim.Refunds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(refunds) != 2 {
		t.Errorf("provider refunds = %+v, want 2", refunds)
	}
	for _, r := range refunds {
		if want, ok := charges[r.IdempotencyKey]; !ok || r.ChargeID != want || r.Amount != 300 {
			t.Errorf("provider refund %s of %s under %s, want one of 300 under a merchant's own key, of its own charge", r.ID, r.ChargeID, r.IdempotencyKey)
		}
	}
}
