package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// otherScope is a second merchant. The tests that write under scope "s" put
// this merchant's rows beside those of "s", under the same keys, so that a
// query that forgot its scope would touch them; then they check that
// nothing crossed over.
const otherScope = "t"

// bystanders claims in otherScope a payment under each key (of 2000 EUR,
// not NewAttempt's 1000, so that its request differs too), at t0 with a
// minute's lease as NewAttempt's are, and returns a check that each is
// still exactly as claimed, its payment too.
func bystanders(t *testing.T, s payment.Store, keys ...string) (check func()) {
	t.Helper()
	var claimed []payment.Attempt
	for _, key := range keys {
		a := payment.NewAttempt(otherScope, key, payment.Request{Amount: 2000, Currency: "EUR", Source: "tok_visa"}, t0, time.Minute)
		a.Provider = "sim"
		mustClaim(t, s, &a)
		claimed = append(claimed, a)
	}
	return func() {
		t.Helper()
		for _, a := range claimed {
			untouched(t, s, a)
		}
	}
}

// refundBystanders pays 1000 EUR in otherScope under payKey and claims a
// refund of amount of it under each key, and returns a check that the
// refunds, their attempts and the payment are still as claimed.
func refundBystanders(t *testing.T, s payment.Store, payKey string, amount int64, keys ...string) (check func()) {
	t.Helper()
	id := paidIn(t, s, otherScope, payKey)
	var claimed []payment.Attempt
	for _, key := range keys {
		a := refundIn(otherScope, key, id, amount)
		mustClaim(t, s, a)
		claimed = append(claimed, *a)
	}
	return func() {
		t.Helper()
		ctx := context.Background()
		for _, a := range claimed {
			untouched(t, s, a)
		}
		p, err := s.Payment(ctx, otherScope, id)
		if want := amount * int64(len(keys)); err != nil || p.Status != payment.Succeeded || p.AmountReserved != want || p.AmountRefunded != 0 {
			t.Errorf("the other merchant's payment = %+v, %v; want %d reserved by its refunds in progress, nothing refunded", p, err, want)
			return
		}
		refunds, err := s.Refunds(ctx, otherScope, id)
		if err != nil || len(refunds) != len(keys) {
			t.Errorf("the other merchant's refunds = %+v, %v; want its %d", refunds, err, len(keys))
			return
		}
		for _, r := range refunds {
			if r.Status != payment.InProgress || r.Amount != amount || r.ProviderRefundID != "" || r.FailureCode != "" {
				t.Errorf("the other merchant's refund %s = %+v; want it in progress as claimed", r.Key, r)
			}
		}
	}
}

// untouched checks that the attempt a, claimed, is still as it was claimed,
// and its payment too.
func untouched(t *testing.T, s payment.Store, a payment.Attempt) {
	t.Helper()
	ctx := context.Background()
	got, err := s.Attempt(ctx, a.Scope, a.Key)
	if err != nil || got.ID != a.ID || got.Kind != a.Kind || got.Status != payment.InProgress || got.Fence != a.Fence ||
		got.Amount != a.Amount || got.Currency != a.Currency || string(got.RequestHash) != string(a.RequestHash) ||
		!got.LeaseExpiresAt.Equal(a.LeaseExpiresAt) || !got.UpdatedAt.Equal(a.UpdatedAt) ||
		got.ResponseStatus != 0 || got.ResponseBody != nil || got.ChargeID != "" || got.FailureCode != "" {
		t.Errorf("the other merchant's %s %s/%s = %s, %v; want it as claimed: %s", a.Kind, a.Scope, a.Key, describe(got), err, describe(&a))
		return
	}
	if a.Kind != payment.KindPayment {
		return
	}
	if p, err := s.Payment(ctx, a.Scope, a.ID); err != nil || p.Status != payment.InProgress || p.ChargeID != "" ||
		p.FailureCode != "" || !p.UpdatedAt.Equal(a.UpdatedAt) {
		t.Errorf("the other merchant's payment %s = %+v, %v; want it in progress as claimed", a.ID, p, err)
	}
}

// describe is what untouched compares of an attempt, to read in a failure.
func describe(a *payment.Attempt) string {
	if a == nil {
		return "none"
	}
	return fmt.Sprintf("%s %s, %d %s, request %.4x, fence %d, lease %v, updated %v, answer %d %q, charge %q, failure %q",
		a.ID, a.Status, a.Amount, a.Currency, a.RequestHash, a.Fence, a.LeaseExpiresAt, a.UpdatedAt,
		a.ResponseStatus, a.ResponseBody, a.ChargeID, a.FailureCode)
}
