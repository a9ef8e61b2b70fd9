package storetest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// refunded pays 1000 EUR under payKey and refunds amount of it under
// refundKey, succeeded as provider refund prID with its event; it returns
// the payment's id and the refund's attempt.
func refunded(t *testing.T, s payment.Store, scope, payKey, refundKey string, amount int64, prID string) (string, *payment.Attempt) {
	t.Helper()
	id := paidIn(t, s, scope, payKey)
	r := refundIn(scope, refundKey, id, amount)
	mustClaim(t, s, r)
	o := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte(`{"refund":"` + r.ID + `"}` + "\n"), ChargeID: prID}
	if ok, err := s.Record(context.Background(), payment.KindRefund, scope, refundKey, 1, withEvent(r, o, t0), t0); !ok || err != nil {
		t.Fatalf("Record(%s/%s) = %v, %v", scope, refundKey, ok, err)
	}
	return id, r
}

// A refund the bank fails after it succeeded goes back once, however many
// try at once: FailRefund is one guarded transaction (the refund must still
// be succeeded), so of many racing, held until every one waits to write,
// exactly one moves the refund to failed, returns its amount to the
// payment's refundable balance and writes its refund.failed event; the
// others write nothing. A check made by a read before the write would let
// them all through, and give the money back many times. The attempt's
// stored answer is not touched, a refund in progress or failed already is
// refused, and another merchant's rows under the same keys stay as they
// were. The balance it restores is then refundable.
func testRefundFailsOnce(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id, r := refunded(t, db, "s", "pay", "r1", 400, "re_p1")
	otherID, other := refunded(t, db, otherScope, "pay", "r1", 400, "re_p1")
	before := mustAttempt(t, db, "r1")
	refund, err := db.RefundByID(ctx, r.ID)
	if err != nil || refund.Scope != "s" || refund.PaymentID != id || refund.Status != payment.Succeeded || refund.ProviderRefundID != "re_p1" || refund.Key != "r1" {
		t.Fatalf("RefundByID = %+v, %v; want the succeeded refund of %s in scope s", refund, err, id)
	}
	release := h.HoldWrites(t)
	var (
		wins atomic.Int32
		wg   sync.WaitGroup
	)
	for i := range Races {
		wg.Go(func() {
			at := t0.Add(time.Duration(i+1) * time.Second)
			ok, err := db.FailRefund(ctx, "s", r.ID, "bank_returned", payment.RefundFailedEvent(*refund, "bank_returned", at), at)
			if err != nil {
				t.Errorf("FailRefund %d: %v", i, err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	h.WaitBlocked(t, Races)
	release()
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Errorf("FailRefund racing %d times: %d moved the refund, want 1", Races, got)
	}
	if p := mustPayment(t, db, id); p.AmountRefunded != 0 || p.AmountReserved != 0 || p.Refundable() != 1000 {
		t.Errorf("payment after the refund failed: refunded %d, reserved %d, want the 400 back: 0, 0", p.AmountRefunded, p.AmountReserved)
	}
	if got, err := db.RefundByID(ctx, r.ID); err != nil || got.Status != payment.Failed || got.FailureCode != "bank_returned" || got.ProviderRefundID != "re_p1" || got.Amount != 400 {
		t.Errorf("refund after it failed = %+v, %v; want failed, bank_returned, still re_p1 of 400", got, err)
	}
	if got := eventsOf(t, db, "s", r.ID); len(got) != 2 || got[0] != payment.EventRefundSucceeded || got[1] != payment.EventRefundFailed {
		t.Errorf("events of the refund = %v, want refund.succeeded then one refund.failed", got)
	}
	if got := mustAttempt(t, db, "r1"); got.Status != payment.Succeeded || string(got.ResponseBody) != string(before.ResponseBody) || got.ResponseStatus != 201 {
		t.Errorf("the refund's attempt = %s %d %s, want its stored answer untouched", got.Status, got.ResponseStatus, got.ResponseBody)
	}

	// Refused: failed already, in progress, declined, another scope.
	if ok, err := db.FailRefund(ctx, "s", r.ID, "again", payment.RefundFailedEvent(*refund, "again", t0), t0); ok || err != nil {
		t.Errorf("FailRefund of a failed refund = %v, %v, want refused", ok, err)
	}
	pending := refundAttempt("r2", id, 100)
	mustClaim(t, db, pending)
	pr, _ := db.RefundByID(ctx, pending.ID)
	if ok, err := db.FailRefund(ctx, "s", pending.ID, "x", payment.RefundFailedEvent(*pr, "x", t0), t0); ok || err != nil {
		t.Errorf("FailRefund of a refund in progress = %v, %v, want refused", ok, err)
	}
	if ok, err := db.FailRefund(ctx, otherScope, r.ID, "x", payment.RefundFailedEvent(*refund, "x", t0), t0); ok || err != nil {
		t.Errorf("FailRefund of the refund in the other merchant's scope = %v, %v, want refused", ok, err)
	}
	if p := mustPayment(t, db, id); p.AmountRefunded != 0 || p.AmountReserved != 100 {
		t.Errorf("payment after the refusals: refunded %d, reserved %d, want 0, 100", p.AmountRefunded, p.AmountReserved)
	}
	if got := eventsOf(t, db, "s", r.ID); len(got) != 2 {
		t.Errorf("events of the refund after the refusals = %v, want still two", got)
	}
	if p, err := db.Payment(ctx, otherScope, otherID); err != nil || p.AmountRefunded != 400 {
		t.Errorf("the other merchant's payment = %+v, %v; want its 400 still refunded", p, err)
	}
	if got, err := db.RefundByID(ctx, other.ID); err != nil || got.Status != payment.Succeeded || got.Scope != otherScope {
		t.Errorf("the other merchant's refund = %+v, %v; want it succeeded", got, err)
	}

	// The balance it gave back is refundable: all that is left is 900.
	rest := refundAttempt("rest", id, 0)
	mustClaim(t, db, rest)
	if rest.Amount != 900 {
		t.Errorf("refund of all that is left after the failure claimed %d, want 900", rest.Amount)
	}
	if _, err := db.RefundByID(ctx, "re_none"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("RefundByID(unknown) = %v, want not found", err)
	}
	if p, err := db.PaymentByID(ctx, otherID); err != nil || p.Scope != otherScope || p.AmountRefunded != 400 || p.ChargeID != "ch_pay" {
		t.Errorf("PaymentByID = %+v, %v; want the other merchant's payment", p, err)
	}
	if _, err := db.PaymentByID(ctx, "pay_none"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("PaymentByID(unknown) = %v, want not found", err)
	}
}

// A dispute is stored on its payment once per change, with its event: the
// same news again, or a dispute reopened by a late "created" once it
// closed, writes nothing; a status that moved while it was open, or
// another dispute, does. The payment stays succeeded and shows it.
func testDisputes(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	otherID := paidIn(t, db, otherScope, "pay")
	p := mustPayment(t, db, id)
	if p.Dispute != nil {
		t.Fatalf("a new payment's dispute = %+v, want none", p.Dispute)
	}
	open := payment.Dispute{ID: "dp_1", Status: "needs_response", Reason: "fraudulent", Amount: 1000}
	closed := open
	closed.Status = "lost"
	for i, tc := range []struct {
		d    payment.Dispute
		want bool
		then payment.Dispute
	}{
		{open, true, open},
		{open, false, open},     // the same news again
		{closed, true, closed},  // closed
		{open, false, closed},   // a late "created": it stays closed
		{closed, false, closed}, // the same close again
		{payment.Dispute{ID: "dp_2", Status: "warning_needs_response", Amount: 500}, true, payment.Dispute{ID: "dp_2", Status: "warning_needs_response", Amount: 500}},
	} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		ok, err := db.SetDispute(ctx, "s", id, tc.d, payment.DisputeEvent(*p, tc.d, at), at)
		if ok != tc.want || err != nil {
			t.Errorf("%d: SetDispute(%+v) = %v, %v, want %v", i, tc.d, ok, err, tc.want)
		}
		if got := mustPayment(t, db, id); got.Dispute == nil || *got.Dispute != tc.then || got.Status != payment.Succeeded {
			t.Errorf("%d: payment = %s, dispute %+v; want succeeded, %+v", i, got.Status, got.Dispute, tc.then)
		}
	}
	want := []payment.EventType{payment.EventPaymentDisputed, payment.EventPaymentDisputeClosed, payment.EventPaymentDisputed}
	if got := eventsOf(t, db, "s", id); !slices.Equal(got, want) {
		t.Errorf("events of the payment = %v, want %v", got, want)
	}
	if ok, err := db.SetDispute(ctx, otherScope, id, open, payment.DisputeEvent(*p, open, t0), t0); ok || err != nil {
		t.Errorf("SetDispute in the other merchant's scope = %v, %v, want refused", ok, err)
	}
	if got, err := db.Payment(ctx, otherScope, otherID); err != nil || got.Dispute != nil {
		t.Errorf("the other merchant's payment = %+v, %v; want no dispute", got, err)
	}
	ps, err := db.ListPayments(ctx, payment.PaymentFilter{Scope: "s", Limit: 10})
	if err != nil || len(ps) != 1 || ps[0].Dispute == nil || ps[0].Dispute.ID != "dp_2" {
		t.Errorf("ListPayments = %+v, %v; want the payment with its dispute", ps, err)
	}
}
