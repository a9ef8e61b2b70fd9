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

// offlineLimits are the limits the offline tests set: 10.00 a payment,
// 30.00 queued in a currency, an hour to wait.
var offlineLimits = payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 3000, MaxAge: time.Hour}

// offlineAttempt is a payment of amount in currency under key, claimed at
// t0 in scope.
func offlineAttempt(scope, key string, amount int64, currency string) *payment.Attempt {
	req := payment.Request{Amount: amount, Currency: currency, Source: "tok_visa"}
	a := payment.NewAttempt(scope, key, req, t0, time.Minute)
	return &a
}

// queue claims a payment and offers it to the forward queue at t0.
func queue(t *testing.T, s payment.Store, scope, key string, amount int64, currency string) (*payment.Attempt, payment.QueueVerdict) {
	t.Helper()
	a := offlineAttempt(scope, key, amount, currency)
	mustClaim(t, s, a)
	v, err := s.Queue(context.Background(), scope, key, 1, payment.QueuedOutcome(*a), false, t0)
	if err != nil {
		t.Fatalf("Queue(%s): %v", key, err)
	}
	return a, v
}

// The limits decide what waits, each currency and each merchant alone; a
// refused payment is left in progress as it was, a queued one answers 202
// and its payment is queued.
func testOfflineLimits(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	others := bystanders(t, s, "off", "big", "b", "c", "d", "e", "usd", "fenced")
	if _, v := queue(t, s, "s", "off", 500, "EUR"); v != payment.QueueOff {
		t.Fatalf("verdict with offline off = %s, want %s", v, payment.QueueOff)
	}
	for _, scope := range []string{"s", "t"} {
		if err := s.SetOfflineLimits(ctx, scope, &offlineLimits); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.OfflineLimits(ctx, "s"); err != nil || got == nil || *got != offlineLimits {
		t.Fatalf("OfflineLimits = %v, %v, want %v", got, err, offlineLimits)
	}
	for _, c := range []struct {
		scope, key string
		amount     int64
		currency   string
		want       payment.QueueVerdict
	}{
		{"s", "big", 1001, "EUR", payment.QueueOverMax},
		{"s", "a", 1000, "EUR", payment.QueueAccepted},
		{"s", "b", 1000, "EUR", payment.QueueAccepted},
		{"s", "c", 900, "EUR", payment.QueueAccepted},
		{"s", "d", 101, "EUR", payment.QueueOverTotal}, // 2900 queued: 3001 > 3000
		{"s", "e", 100, "EUR", payment.QueueAccepted},  // exactly 3000
		{"s", "usd", 1000, "USD", payment.QueueAccepted},
		{"t", "a", 1000, "EUR", payment.QueueAccepted}, // another merchant's total
	} {
		a, v := queue(t, s, c.scope, c.key, c.amount, c.currency)
		if v != c.want {
			t.Errorf("%s/%s %d %s: verdict = %s, want %s", c.scope, c.key, c.amount, c.currency, v, c.want)
		}
		got, err := s.Attempt(ctx, c.scope, c.key)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Payment(ctx, c.scope, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := payment.InProgress
		if c.want == payment.QueueAccepted {
			want = payment.Queued
			if got.ResponseStatus != 202 || string(got.ResponseBody) != string(payment.QueuedOutcome(*a).ResponseBody) {
				t.Errorf("%s: stored answer = %d %s, want the 202", c.key, got.ResponseStatus, got.ResponseBody)
			}
		}
		if got.Status != want || p.Status != want {
			t.Errorf("%s/%s: attempt %s, payment %s, want %s", c.scope, c.key, got.Status, p.Status, want)
		}
	}
	totals, err := s.QueueTotals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []payment.QueueTotal{{Currency: "EUR", Count: 5, Amount: 4000, Oldest: t0}, {Currency: "USD", Count: 1, Amount: 1000, Oldest: t0}}
	if len(totals) != len(want) || totals[0] != want[0] || totals[1] != want[1] {
		t.Errorf("QueueTotals = %v, want %v", totals, want)
	}
	// A wrong fence queues nothing: another owner holds the attempt.
	a := offlineAttempt("s", "fenced", 100, "GBP")
	mustClaim(t, s, a)
	if v, err := s.Queue(ctx, "s", "fenced", 2, payment.QueuedOutcome(*a), false, t0); v != payment.QueueFenced || err != nil {
		t.Errorf("Queue under a stale fence = %s, %v, want %s", v, err, payment.QueueFenced)
	}
	// Past its max age already: never queued.
	if v, err := s.Queue(ctx, "s", "fenced", 1, payment.QueuedOutcome(*a), false, t0.Add(time.Hour)); v != payment.QueueExpired || err != nil {
		t.Errorf("Queue past the max age = %s, %v, want %s", v, err, payment.QueueExpired)
	}
	if err := s.SetOfflineLimits(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.OfflineLimits(ctx, "s"); err != nil || got != nil {
		t.Errorf("OfflineLimits after disable = %v, %v, want nil", got, err)
	}
	others()
}

// Payments of one merchant racing into the queue, held until every one
// waits to write, fit the total between them: the sum and the insert are
// one transaction that no other queueing of the merchant interleaves.
func testOfflineTotalRace(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	if err := s.SetOfflineLimits(ctx, "s", &offlineLimits); err != nil {
		t.Fatal(err)
	}
	others := bystanders(t, s, refundKey(0), refundKey(1), refundKey(2), refundKey(3))
	as := make([]*payment.Attempt, Races)
	for i := range as {
		as[i] = offlineAttempt("s", refundKey(i), 1000, "EUR")
		mustClaim(t, s, as[i])
	}
	release := h.HoldWrites(t)
	var queued atomic.Int32
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() {
			v, err := s.Queue(ctx, "s", a.Key, 1, payment.QueuedOutcome(*a), false, t0)
			if err != nil {
				t.Error(err)
			}
			if v == payment.QueueAccepted {
				queued.Add(1)
			}
		})
	}
	h.WaitBlocked(t, Races)
	release()
	wg.Wait()
	if got := queued.Load(); got != 3 {
		t.Errorf("queued = %d of %d payments of 1000 under a total of 3000, want 3", got, Races)
	}
	others()
}

// Of many forwarders racing for one queued payment exactly one gets it; a
// settlement under an old fence changes nothing; the settlement leaves the
// queue, settles attempt and payment, and keeps the 202 every replay gets.
// Another merchant's payment queued under the same key is left as it was.
func testForwardClaims(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	for _, scope := range []string{"s", otherScope} {
		if err := s.SetOfflineLimits(ctx, scope, &offlineLimits); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := queue(t, s, "s", "q", 500, "EUR")
	b, _ := queue(t, s, otherScope, "q", 700, "EUR")
	due, err := s.DueForwards(ctx, t0, 10)
	i := slices.IndexFunc(due, func(f payment.Forward) bool { return f.PaymentID == a.ID })
	if err != nil || len(due) != 2 || i < 0 || due[i].Fence != 1 || due[i].Reached || due[i].Scope != "s" || due[i].Key != "q" {
		t.Fatalf("DueForwards = %+v, %v, want %s under fence 1, not reached, and the other merchant's", due, err, a.ID)
	}
	if want := t0.Add(time.Hour); !due[i].ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %s, want %s", due[i].ExpiresAt, want)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range Races {
		wg.Go(func() {
			_, ok, err := s.ClaimForward(ctx, a.ID, 1, t0, t0.Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("forward claims won = %d, want 1", got)
	}
	if due, _ := s.DueForwards(ctx, t0.Add(30*time.Second), 10); len(due) != 1 || due[0].PaymentID != b.ID {
		t.Errorf("DueForwards under a live lease = %+v, want only the other merchant's", due)
	}
	if err := s.ReleaseForward(ctx, a.ID, 2, "link down", t0); err != nil {
		t.Fatal(err)
	}
	// A forwarder that read the queue before the winner's claim claims
	// nothing, though no lease holds the payment now: what it read (not
	// reached: charge without asking first) is stale.
	if _, ok, err := s.ClaimForward(ctx, a.ID, 1, t0, t0.Add(time.Minute)); ok || err != nil {
		t.Errorf("ClaimForward under the fence read before the winner's claim = %v, %v, want refused", ok, err)
	}
	fs, err := s.Forwards(ctx, 10)
	i = slices.IndexFunc(fs, func(f payment.Forward) bool { return f.PaymentID == a.ID })
	if err != nil || len(fs) != 2 || i < 0 || fs[i].Tries != 1 || !fs[i].Reached || fs[i].LastError != "link down" || !fs[i].LeaseExpiresAt.IsZero() {
		t.Fatalf("Forwards after a released try = %+v, %v, want 1 try, reached, its error, no lease", fs, err)
	}
	o := payment.Outcome{Status: payment.Succeeded, ChargeID: "ch_q"}
	if ok, err := s.Forwarded(ctx, a.ID, 1, o, t0); ok || err != nil {
		t.Errorf("Forwarded under an old fence = %v, %v, want refused", ok, err)
	}
	if ok, err := s.Forwarded(ctx, a.ID, 2, o, t0); !ok || err != nil {
		t.Fatalf("Forwarded = %v, %v", ok, err)
	}
	if ok, err := s.Forwarded(ctx, a.ID, 2, payment.Outcome{Status: payment.Expired}, t0); ok || err != nil {
		t.Errorf("a second Forwarded = %v, %v, want refused", ok, err)
	}
	got, p := mustAttempt(t, s, "q"), mustPayment(t, s, a.ID)
	if got.Status != payment.Succeeded || got.ChargeID != "ch_q" || got.ResponseStatus != 202 ||
		p.Status != payment.Succeeded || p.ChargeID != "ch_q" {
		t.Errorf("after Forwarded: attempt %s %s %d, payment %s %s; want succeeded ch_q, the 202 kept",
			got.Status, got.ChargeID, got.ResponseStatus, p.Status, p.ChargeID)
	}
	if ans, err := s.Answer(ctx, "s", "q"); err != nil || ans.ResponseStatus != 202 || string(ans.ResponseBody) != string(payment.QueuedOutcome(*a).ResponseBody) {
		t.Errorf("Answer after Forwarded = %v, %v, want the 202", ans, err)
	}
	want := []payment.QueueTotal{{Currency: "EUR", Count: 1, Amount: 700, Oldest: t0}}
	if totals, err := s.QueueTotals(ctx); err != nil || !slices.Equal(totals, want) {
		t.Errorf("QueueTotals after Forwarded = %v, %v, want the other merchant's %v", totals, err, want)
	}
	stillQueued(t, s, b)
}

// stillQueued checks that a, queued at t0, waits in the forward queue as it
// was queued: its 202, its payment queued, never claimed by a forwarder.
func stillQueued(t *testing.T, s payment.Store, a *payment.Attempt) {
	t.Helper()
	ctx := context.Background()
	got, err := s.Attempt(ctx, a.Scope, a.Key)
	if err != nil || got.ID != a.ID || got.Status != payment.Queued || got.ResponseStatus != 202 || got.ChargeID != "" ||
		string(got.ResponseBody) != string(payment.QueuedOutcome(*a).ResponseBody) {
		t.Errorf("queued attempt %s/%s = %+v, %v; want it queued with its 202", a.Scope, a.Key, got, err)
	}
	if p, err := s.Payment(ctx, a.Scope, a.ID); err != nil || p.Status != payment.Queued || p.ChargeID != "" {
		t.Errorf("queued payment %s = %+v, %v; want it queued", a.ID, p, err)
	}
	fs, err := s.Forwards(ctx, 100)
	if i := slices.IndexFunc(fs, func(f payment.Forward) bool { return f.PaymentID == a.ID }); err != nil || i < 0 ||
		fs[i].Fence != 1 || fs[i].Tries != 0 || fs[i].Reached || !fs[i].LeaseExpiresAt.IsZero() || fs[i].Scope != a.Scope || fs[i].Amount != a.Amount {
		t.Errorf("forward queue = %+v, %v; want %s in it as queued", fs, err, a.ID)
	}
}

// Purge never deletes a queued attempt: its key must answer 202 for as
// long as the payment waits.
func testPurgeKeepsQueued(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	for _, scope := range []string{"s", otherScope} {
		if err := s.SetOfflineLimits(ctx, scope, &offlineLimits); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := queue(t, s, "s", "q", 500, "EUR")
	other, _ := queue(t, s, otherScope, "q", 500, "EUR")
	if n, _, err := s.Purge(ctx, t0.Add(48*time.Hour), 100); n != 0 || err != nil {
		t.Errorf("Purge = %d, %v, want 0: a queued attempt is not final", n, err)
	}
	mustAttempt(t, s, "q")
	// Once expired it is final: purged after the retention like any other,
	// its payment too after the payment retention, its key kept refused.
	fence, ok, err := s.ClaimForward(ctx, a.ID, 1, t0, t0.Add(time.Minute))
	if err != nil || !ok {
		t.Fatalf("ClaimForward = %v, %v", ok, err)
	}
	if ok, err := s.Forwarded(ctx, a.ID, fence, payment.Outcome{Status: payment.Expired, FailureCode: "offline_expired"}, t0); !ok || err != nil {
		t.Fatalf("Forwarded = %v, %v", ok, err)
	}
	if n, _, err := s.Purge(ctx, t0.Add(48*time.Hour), 100); n != 1 || err != nil {
		t.Errorf("Purge of the expired = %d, %v, want 1", n, err)
	}
	if n, _, err := s.PurgePayments(ctx, t0.Add(48*time.Hour), 100); n != 1 || err != nil {
		t.Errorf("PurgePayments of the expired = %d, %v, want 1", n, err)
	}
	stillQueued(t, s, other)
}
