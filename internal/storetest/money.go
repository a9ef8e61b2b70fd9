package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/replaycache"
	"github.com/oncepay/oncepay/payment"
)

// paid claims and records a succeeded payment of 1000 EUR under key and
// returns its id.
func paid(t *testing.T, s payment.Store, key string) string {
	t.Helper()
	return paidIn(t, s, "s", key)
}

// paidIn is paid in scope.
func paidIn(t *testing.T, s payment.Store, scope, key string) string {
	t.Helper()
	a := NewAttempt(key, t0, time.Minute)
	a.Scope = scope
	mustClaim(t, s, a)
	o := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}\n"), ChargeID: "ch_" + key}
	if ok, err := s.Record(context.Background(), payment.KindPayment, scope, key, 1, o, t0); !ok || err != nil {
		t.Fatalf("Record(%s/%s) = %v, %v", scope, key, ok, err)
	}
	return a.ID
}

// refundAttempt is a refund of amount (0: all that is left) of paymentID
// under key, claimed at t0.
func refundAttempt(key, paymentID string, amount int64) *payment.Attempt {
	return refundIn("s", key, paymentID, amount)
}

// refundIn is refundAttempt in scope.
func refundIn(scope, key, paymentID string, amount int64) *payment.Attempt {
	a := payment.NewRefundAttempt(scope, key, payment.RefundRequest{PaymentID: paymentID, Amount: amount}, t0, time.Minute)
	return &a
}

func mustPayment(t *testing.T, s payment.Store, id string) *payment.Payment {
	t.Helper()
	p, err := s.Payment(context.Background(), "s", id)
	if err != nil {
		t.Fatalf("Payment(%s): %v", id, err)
	}
	return p
}

// Refunds under different keys racing on one payment, held until every one
// waits to write, reserve no more than the charge between them: the check
// and the reservation are one guarded UPDATE, so a check made by a read
// before the write would let them all through. The refused ones write
// nothing, their keys stay free, and their error says why.
func testRefundReservationRace(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	others := refundBystanders(t, db, "pay", 100, refundKey(0), refundKey(1), refundKey(2))
	release := h.HoldWrites(t)
	var (
		wins    atomic.Int32
		wg      sync.WaitGroup
		claimed = make([]bool, Races)
	)
	for i := range Races {
		wg.Go(func() {
			ok, err := db.Claim(ctx, refundAttempt(refundKey(i), id, 300))
			switch {
			case err == nil && ok:
				wins.Add(1)
				claimed[i] = true
			case payment.ErrorCode(err) != payment.EREFUNDEXCEEDS:
				t.Errorf("Claim(refund %d) = %v, %v, want claimed or refused as exceeding", i, ok, err)
			}
		})
	}
	h.WaitBlocked(t, Races)
	release()
	wg.Wait()
	if got := wins.Load(); got != 3 {
		t.Errorf("refunds of 300 of a 1000 payment claimed = %d, want 3", got)
	}
	p := mustPayment(t, db, id)
	if p.AmountReserved != 300*int64(wins.Load()) || p.AmountReserved > p.Amount || p.AmountRefunded != 0 {
		t.Errorf("payment after the race: reserved %d, refunded %d of %d, want 300 reserved a claimed refund", p.AmountReserved, p.AmountRefunded, p.Amount)
	}
	refunds, err := db.Refunds(ctx, "s", id)
	if err != nil || len(refunds) != int(wins.Load()) {
		t.Fatalf("Refunds = %d rows, %v, want %d", len(refunds), err, wins.Load())
	}
	for _, r := range refunds {
		if r.Amount != 300 || r.Currency != "EUR" || r.Status != payment.InProgress || r.PaymentID != id {
			t.Errorf("refund = %+v, want 300 EUR in progress", r)
		}
	}
	for i, won := range claimed {
		if _, err := db.Attempt(ctx, "s", refundKey(i)); won != (err == nil) {
			t.Errorf("Attempt(refund %d) = %v, claimed %v: a refused claim must leave nothing", i, err, won)
		}
	}
	others()
}

func refundKey(i int) string { return "refund-" + string(rune('a'+i%26)) + string(rune('a'+i/26)) }

// Record settles a refund in its own transaction: success turns the
// reservation into refunded money, failure gives it back, a fenced-out
// record changes nothing. A refund of "all that is left" reserves exactly
// that, and the attempt says what it reserved.
func testRecordSettlesRefunds(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	others := refundBystanders(t, db, "pay", 200, "r1", "r2", "rest")
	for _, k := range []string{"r1", "r2"} {
		mustClaim(t, db, refundAttempt(k, id, 300))
	}
	ok, err := db.Record(ctx, payment.KindRefund, "s", "r1", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}\n"), ChargeID: "re_p1"}, t0.Add(time.Second))
	if !ok || err != nil {
		t.Fatalf("Record(r1) = %v, %v", ok, err)
	}
	if p := mustPayment(t, db, id); p.AmountRefunded != 300 || p.AmountReserved != 300 {
		t.Errorf("after one refund succeeded: refunded %d, reserved %d, want 300, 300", p.AmountRefunded, p.AmountReserved)
	}
	if ok, err := db.Record(ctx, payment.KindRefund, "s", "r2", 7, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201}, t0); ok || err != nil {
		t.Errorf("Record(r2) under a wrong fence = %v, %v, want fenced out", ok, err)
	}
	if p := mustPayment(t, db, id); p.AmountRefunded != 300 || p.AmountReserved != 300 {
		t.Errorf("after a fenced-out record: refunded %d, reserved %d, want it unchanged", p.AmountRefunded, p.AmountReserved)
	}
	ok, err = db.Record(ctx, payment.KindRefund, "s", "r2", 1, payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("{}\n"), FailureCode: "declined"}, t0.Add(time.Second))
	if !ok || err != nil {
		t.Fatalf("Record(r2) = %v, %v", ok, err)
	}
	if p := mustPayment(t, db, id); p.AmountRefunded != 300 || p.AmountReserved != 0 {
		t.Errorf("after one refund failed: refunded %d, reserved %d, want 300, 0", p.AmountRefunded, p.AmountReserved)
	}
	rest := refundAttempt("rest", id, 0)
	mustClaim(t, db, rest)
	if rest.Amount != 700 || rest.Currency != "EUR" {
		t.Errorf("refund of all that is left claimed %d %s, want 700 EUR", rest.Amount, rest.Currency)
	}
	if a := mustAttempt(t, db, "rest"); a.Amount != 700 || a.Currency != "EUR" || a.Kind != payment.KindRefund || a.PaymentID != id {
		t.Errorf("stored refund attempt = %d %s %s of %s, want a refund of 700 EUR of %s", a.Amount, a.Currency, a.Kind, a.PaymentID, id)
	}
	refunds, err := db.Refunds(ctx, "s", id)
	if err != nil || len(refunds) != 3 {
		t.Fatalf("Refunds = %+v, %v, want 3", refunds, err)
	}
	if r := refunds[0]; r.Key != "r1" || r.Status != payment.Succeeded || r.ProviderRefundID != "re_p1" {
		t.Errorf("first refund = %+v, want r1 succeeded as re_p1", r)
	}
	if r := refunds[1]; r.Status != payment.Failed || r.FailureCode != "declined" {
		t.Errorf("second refund = %+v, want failed, declined", r)
	}
	others()
	if rs, err := db.Refunds(ctx, otherScope, id); err != nil || len(rs) != 0 {
		t.Errorf("Refunds of the payment in the other merchant's scope = %+v, %v, want none", rs, err)
	}
	if _, err := db.Payment(ctx, otherScope, id); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Payment in the other merchant's scope = %v, want not found", err)
	}
}

// A refund of all that is left, racing another instance's refund whose
// reservation is written and not yet committed, waits for it, then takes
// what that one left: never a 409 for asking what was there before. (On
// PostgreSQL the read of what is left locks the payment's row: a read that
// did not would see the amount from before the other reservation, and its
// guarded UPDATE, run once the wait is over, would refuse it.)
func testRefundOfTheRestWaits(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	others := refundBystanders(t, db, "pay", 100, "rest")
	commit := h.InFlight(t, `UPDATE payments SET amount_reserved = amount_reserved + 300 WHERE id = '`+id+`'`)
	rest := refundAttempt("rest", id, 0)
	done := make(chan error, 1)
	go func() {
		ok, err := db.Claim(ctx, rest)
		if err == nil && !ok {
			err = errors.New("not claimed")
		}
		done <- err
	}()
	h.WaitBlocked(t, 1)
	select {
	case err := <-done:
		t.Fatalf("Claim(all that is left) returned while the other reservation was in flight: %v", err)
	default:
	}
	commit()
	if err := <-done; err != nil {
		t.Fatalf("Claim(all that is left) after the other reservation committed: %v, want claimed", err)
	}
	if rest.Amount != 700 || rest.Currency != "EUR" {
		t.Errorf("refund of all that is left claimed %d %s, want the 700 EUR the other left", rest.Amount, rest.Currency)
	}
	if p := mustPayment(t, db, id); p.AmountReserved != 1000 || p.AmountRefunded != 0 {
		t.Errorf("payment: reserved %d, refunded %d, want 1000 reserved (300 and the 700 left)", p.AmountReserved, p.AmountRefunded)
	}
	others()
}

// A refund is refused, writing nothing, for a payment that does not exist
// (or is another merchant's), is not succeeded, or has too little left.
func testRefundRefusals(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	pending := NewAttempt("pending", t0, time.Minute)
	mustClaim(t, db, pending)
	other := refundAttempt("other-merchant", id, 100)
	other.Scope = "other"
	for _, c := range []struct {
		a    *payment.Attempt
		want string
	}{
		{refundAttempt("unknown", "pay_unknown", 100), payment.ENOTFOUND},
		{other, payment.ENOTFOUND},
		{refundAttempt("pending-refund", pending.ID, 100), payment.ENOTREFUNDABLE},
		{refundAttempt("too-much", id, 1001), payment.EREFUNDEXCEEDS},
	} {
		ok, err := db.Claim(ctx, c.a)
		if ok || payment.ErrorCode(err) != c.want {
			t.Errorf("Claim(%s) = %v, %v, want %s", c.a.Key, ok, err, c.want)
		}
		if _, err := db.Attempt(ctx, c.a.Scope, c.a.Key); payment.ErrorCode(err) != payment.ENOTFOUND {
			t.Errorf("Attempt(%s) after the refusal = %v, want none", c.a.Key, err)
		}
	}
	if p := mustPayment(t, db, id); p.AmountReserved != 0 {
		t.Errorf("reserved after refusals = %d, want 0", p.AmountReserved)
	}
}

// A payment outlives its key's record: after the attempt is purged the
// payment is still read, a late retry of its key is refused as expired,
// and the payment is purged only past its own retention, never while a
// refund of it is in progress.
func testPaymentsOutliveKeys(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	id := paid(t, db, "pay")
	held := paid(t, db, "held")
	mustClaim(t, db, refundAttempt("held-refund", held, 100))
	if p := mustPayment(t, db, id); p.Key != "pay" || p.Status != payment.Succeeded || p.ChargeID != "ch_pay" {
		t.Errorf("payment = %+v, want succeeded under its key", p)
	}
	if n, _, err := db.PurgePayments(ctx, t0.Add(time.Hour), 10); n != 0 || err != nil {
		t.Errorf("PurgePayments while the keys are kept = %d, %v, want 0", n, err)
	}
	r1 := refundAttempt("r1", id, 100)
	mustClaim(t, db, r1)
	if ok, err := db.Record(ctx, payment.KindRefund, "s", "r1", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}\n")}, t0); !ok || err != nil {
		t.Fatalf("Record(r1) = %v, %v", ok, err)
	}
	if n, _, err := db.Purge(ctx, t0.Add(time.Hour), 10); n != 3 || err != nil {
		t.Fatalf("Purge = %d, %v, want the 3 final attempts (two payments, a refund)", n, err)
	}
	// A purged refund key is spent too, whatever it is used for next.
	for _, a := range []*payment.Attempt{refundAttempt("r1", id, 100), NewAttempt("r1", t0.Add(2*time.Hour), time.Minute)} {
		ok, err := db.Claim(ctx, a)
		var pe *payment.Error
		if ok || payment.ErrorCode(err) != payment.EKEYEXPIRED || !errors.As(err, &pe) || pe.PaymentID != id {
			t.Errorf("late %s under the purged refund key = %v, %v, want refused as expired naming payment %s", a.Kind, ok, err, id)
		}
	}
	if p := mustPayment(t, db, id); p.Key != "" || p.Status != payment.Succeeded {
		t.Errorf("payment after its key's purge = %+v, want kept without its key", p)
	}
	late := NewAttempt("pay", t0.Add(2*time.Hour), time.Minute)
	if ok, err := db.Claim(ctx, late); ok || payment.ErrorCode(err) != payment.EKEYEXPIRED {
		t.Errorf("late retry of a purged key = %v, %v, want refused as expired", ok, err)
	}
	if _, err := db.Attempt(ctx, "s", "pay"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Attempt after the refused retry = %v, want none", err)
	}
	// Another merchant's keys of the same names are its own, never spent.
	for _, key := range []string{"pay", "r1"} {
		a := NewAttempt(key, t0.Add(2*time.Hour), time.Minute)
		a.Scope = otherScope
		if ok, err := db.Claim(ctx, a); !ok || err != nil {
			t.Errorf("the other merchant's first claim of %s = %v, %v, want claimed", key, ok, err)
		}
	}
	if n, _, err := db.PurgePayments(ctx, t0.Add(time.Hour), 10); n != 1 || err != nil {
		t.Errorf("PurgePayments = %d, %v, want 1: not the one with a refund in progress", n, err)
	}
	if _, err := db.Payment(ctx, "s", id); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Payment after its purge = %v, want not found", err)
	}
	// Its keys are forgotten with it, its refund's too: a retry is new.
	mustClaim(t, db, NewAttempt("pay", t0.Add(3*time.Hour), time.Minute))
	mustClaim(t, db, NewAttempt("r1", t0.Add(3*time.Hour), time.Minute))
	if p := mustPayment(t, db, held); p.AmountReserved != 100 {
		t.Errorf("payment with a refund in progress = %+v, want kept", p)
	}
}

// Answer reads what a replay needs, the same as the whole attempt says.
func testAnswer(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	others := bystanders(t, db, "k")
	a := NewAttempt("k", t0, time.Minute)
	mustClaim(t, db, a)
	got, err := db.Answer(ctx, "s", "k")
	if err != nil || got.Status != payment.InProgress || !got.LeaseExpiresAt.Equal(t0.Add(time.Minute)) ||
		string(got.RequestHash) != string(a.RequestHash) || got.ResponseStatus != 0 {
		t.Errorf("Answer in progress = %+v, %v", got, err)
	}
	body := []byte("{\"id\":\"" + a.ID + "\"}\n")
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: body}, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got, err = db.Answer(ctx, "s", "k")
	if err != nil || got.Status != payment.Succeeded || !got.LeaseExpiresAt.IsZero() || got.ResponseStatus != 201 || string(got.ResponseBody) != string(body) {
		t.Errorf("Answer final = %+v, %v", got, err)
	}
	if _, err := db.Answer(ctx, "s", "none"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Answer(unknown) = %v, want not found", err)
	}
	// A store may keep final answers in memory for replays; a purge through
	// it is seen by the next Answer all the same.
	if _, err := db.Answer(ctx, "s", "k"); err != nil {
		t.Fatal(err)
	}
	if n, _, err := db.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v, want 1", n, err)
	}
	if got, err := db.Answer(ctx, "s", "k"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Answer after the key's record was purged = %+v, %v, want not found", got, err)
	}
	others()
}

// A key's record deleted by any code, not only this store's purge (an
// older binary's purge during an upgrade, an operator), leaves the key
// spent all the same: the database's trigger moves it to expired_keys.
func testKeyExpiresWhateverDeletesItsRecord(t *testing.T, h Harness) {
	ids := map[string]string{"k": paid(t, h.Store, "k"), "k2": paid(t, h.Store, "k2")}
	h.Exec(t, `DELETE FROM payment_attempts WHERE idempotency_key = 'k'`)
	// A build that moved the key itself before deleting the record.
	h.Exec(t, `INSERT INTO expired_keys (scope, key_hash, kind, id, payment_id)
		SELECT scope, key_hash, 'payment', id, id FROM payments WHERE id = '`+ids["k2"]+`'`)
	h.Exec(t, `DELETE FROM payment_attempts WHERE idempotency_key = 'k2'`)
	for key, id := range ids {
		ok, err := h.Store.Claim(context.Background(), NewAttempt(key, t0.Add(time.Hour), time.Minute))
		var pe *payment.Error
		if ok || payment.ErrorCode(err) != payment.EKEYEXPIRED || !errors.As(err, &pe) || pe.PaymentID != id {
			t.Errorf("late retry of %s, whose record was deleted behind the store = %v, %v, want refused as expired naming %s", key, ok, err, id)
		}
		other := NewAttempt(key, t0.Add(time.Hour), time.Minute)
		other.Scope = otherScope
		if ok, err := h.Store.Claim(context.Background(), other); !ok || err != nil {
			t.Errorf("the other merchant's first claim of %s = %v, %v, want claimed", key, ok, err)
		}
	}
}

// Replays may be answered from memory once final, but a purge is seen all
// the same: at once through the same store, within replaycache.TTL through
// another process's.
func testReplaysSeePurges(t *testing.T, h Harness) {
	ctx, now := context.Background(), t0
	db, other := h.Pair(t, func() time.Time { return now })
	others := bystanders(t, db, "k1", "k2")
	answered := func(key string) bool {
		t.Helper()
		_, err := db.Answer(ctx, "s", key)
		if err != nil && payment.ErrorCode(err) != payment.ENOTFOUND {
			t.Fatal(err)
		}
		return err == nil
	}
	settle := func(key string) {
		t.Helper()
		paid(t, db, key)
		if !answered(key) {
			t.Fatalf("%s not answered once recorded", key)
		}
	}

	settle("k1")
	if n, _, err := db.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if answered("k1") {
		t.Fatal("answered after a purge through the same store")
	}

	settle("k2")
	if n, _, err := other.Purge(ctx, t0.Add(time.Second), 10); n != 1 || err != nil {
		t.Fatalf("Purge by another process = %d, %v", n, err)
	}
	now = now.Add(replaycache.TTL)
	if answered("k2") {
		t.Fatalf("answered %s after another process purged", replaycache.TTL)
	}
	others()
}

func inboxEvent(id string, at time.Time) *payment.InboxEvent {
	return &payment.InboxEvent{
		Event: payment.Event{Provider: "sim", ID: id, Type: "charge.succeeded", Kind: payment.EventSucceeded, PaymentID: "pay_1"},
		State: payment.EventReceived, ReceivedAt: at, UpdatedAt: at,
	}
}

// Copies of one event racing into the inbox, held until all wait to
// write, store it once: exactly one is told it claimed it. Then copies
// racing to begin it under the same fence: exactly one processes it.
func testInboxClaimRace(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	race := func(try func() (bool, error)) int32 {
		release := h.HoldWrites(t)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range Races {
			wg.Go(func() {
				ok, err := try()
				if err != nil {
					t.Error(err)
				}
				if ok {
					wins.Add(1)
				}
			})
		}
		h.WaitBlocked(t, Races)
		release()
		wg.Wait()
		return wins.Load()
	}
	if got := race(func() (bool, error) { return db.ReceiveEvent(ctx, inboxEvent("evt_1", t0)) }); got != 1 {
		t.Errorf("copies of one event claimed = %d, want 1", got)
	}
	now := t0.Add(time.Second)
	if got := race(func() (bool, error) {
		_, ok, err := db.BeginEvent(ctx, "sim", "evt_1", 0, now, now.Add(time.Minute))
		return ok, err
	}); got != 1 {
		t.Errorf("copies that began the event = %d, want 1", got)
	}
	e, err := db.InboxEvent(ctx, "sim", "evt_1")
	if err != nil || e.State != payment.EventProcessing || e.Fence != 1 || e.Attempts != 1 || e.PaymentID != "pay_1" || e.Kind != payment.EventSucceeded {
		t.Errorf("event after the races = %+v, %v, want processing under fence 1", e, err)
	}
}

// A try's lease and fence: a stranded event is found by the sweep and
// begun again once its lease ran out, the old processor's finish is
// fenced out, and only final events are purged.
func testInboxLeasesAndPurge(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	for _, id := range []string{"evt_a", "evt_b", "evt_c"} {
		if ok, err := db.ReceiveEvent(ctx, inboxEvent(id, t0)); !ok || err != nil {
			t.Fatalf("ReceiveEvent(%s) = %v, %v", id, ok, err)
		}
	}
	if ok, err := db.ReceiveEvent(ctx, inboxEvent("evt_a", t0)); ok || err != nil {
		t.Errorf("ReceiveEvent(a duplicate) = %v, %v, want not claimed, no error", ok, err)
	}
	fence, ok, err := db.BeginEvent(ctx, "sim", "evt_a", 0, t0, t0.Add(time.Minute))
	if !ok || err != nil || fence != 1 {
		t.Fatalf("BeginEvent = %d, %v, %v", fence, ok, err)
	}
	if _, ok, _ := db.BeginEvent(ctx, "sim", "evt_a", 1, t0.Add(30*time.Second), t0.Add(2*time.Minute)); ok {
		t.Error("BeginEvent under a live lease succeeded")
	}
	stranded, err := db.StrandedEvents(ctx, t0, t0.Add(2*time.Minute), 10, 10)
	if err != nil || len(stranded) != 3 {
		t.Errorf("StrandedEvents = %d, %v, want all 3 (two never begun, one whose lease ran out)", len(stranded), err)
	}
	if stranded, _ := db.StrandedEvents(ctx, t0.Add(-time.Second), t0.Add(30*time.Second), 10, 10); len(stranded) != 0 {
		t.Errorf("StrandedEvents before anything is stranded = %d, want 0", len(stranded))
	}
	again, ok, err := db.BeginEvent(ctx, "sim", "evt_a", 1, t0.Add(2*time.Minute), t0.Add(3*time.Minute))
	if !ok || err != nil || again != 2 {
		t.Fatalf("BeginEvent after the lease ran out = %d, %v, %v, want fence 2", again, ok, err)
	}
	if ok, err := db.FinishEvent(ctx, "sim", "evt_a", 1, payment.EventProcessed, "late", "", t0.Add(2*time.Minute)); ok || err != nil {
		t.Errorf("FinishEvent by the old processor = %v, %v, want fenced out", ok, err)
	}
	for _, c := range []struct {
		id    string
		fence int64
		state payment.EventState
	}{{"evt_a", 2, payment.EventProcessed}, {"evt_b", 1, payment.EventFailedState}, {"evt_c", 1, payment.EventIgnored}} {
		if c.id != "evt_a" {
			if _, ok, err := db.BeginEvent(ctx, "sim", c.id, 0, t0, t0.Add(time.Minute)); !ok || err != nil {
				t.Fatalf("BeginEvent(%s) = %v, %v", c.id, ok, err)
			}
		}
		if ok, err := db.FinishEvent(ctx, "sim", c.id, c.fence, c.state, "done", "", t0.Add(3*time.Minute)); !ok || err != nil {
			t.Fatalf("FinishEvent(%s) = %v, %v", c.id, ok, err)
		}
	}
	if e, err := db.InboxEvent(ctx, "sim", "evt_a"); err != nil || e.State != payment.EventProcessed || e.Result != "done" || e.Attempts != 2 {
		t.Errorf("evt_a = %+v, %v, want processed by its second try", e, err)
	}
	if list, err := db.ListEvents(ctx, payment.EventFilter{State: payment.EventFailedState, Limit: 10}); err != nil || len(list) != 1 || list[0].ID != "evt_b" {
		t.Errorf("ListEvents(failed) = %+v, %v, want evt_b", list, err)
	}
	// A failed event is swept again once untouched for a lease, while it has
	// tries left; final events never are.
	finished := t0.Add(3 * time.Minute)
	for _, c := range []struct {
		before      time.Time
		maxAttempts int
		want        int
	}{{finished, 2, 1}, {finished, 1, 0}, {finished.Add(-time.Millisecond), 2, 0}} {
		stranded, err := db.StrandedEvents(ctx, c.before, finished, c.maxAttempts, 10)
		if err != nil || len(stranded) != c.want || c.want == 1 && stranded[0].ID != "evt_b" {
			t.Errorf("StrandedEvents(before %v, max %d tries) = %d, %v; want %d (the failed event)", c.before.Sub(finished), c.maxAttempts, len(stranded), err, c.want)
		}
	}
	if n, _, err := db.PurgeEvents(ctx, t0.Add(time.Hour), 10); n != 2 || err != nil {
		t.Errorf("PurgeEvents = %d, %v, want the processed and the ignored one", n, err)
	}
	if _, err := db.InboxEvent(ctx, "sim", "evt_b"); err != nil {
		t.Errorf("the failed event after the purge: %v, want kept", err)
	}
}
