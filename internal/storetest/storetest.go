// Package storetest is the contract every oncepay store keeps, whichever
// engine is under it: one suite, run by sqlitestore and pgstore against a
// fresh database each. A store passes only if it means what the other
// means: the claim, the fenced record, takeover, release, staleness and
// purge, merchants and keys, the admin page's reads, the provider binding.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// Harness is one fresh, empty store and the hooks the race tests need.
type Harness struct {
	Store payment.Database
	// HoldWrites blocks every write to attempts, payments, refunds and the
	// inbox until release is called; the reads a write makes before it
	// write still happen.
	HoldWrites func(t *testing.T) (release func())
	// WaitBlocked waits until n writes are blocked by HoldWrites.
	WaitBlocked func(t *testing.T, n int)
	// Pair opens two more stores on one fresh database, as two processes
	// would, both telling time by now.
	Pair func(t *testing.T, now func() time.Time) (a, b payment.Database)
	// Exec runs sql on Store's database as another program would: an
	// older binary, an operator.
	Exec func(t *testing.T, sql string)
	// InFlight runs sql in a transaction on Store's database, as another
	// instance's write, and holds it open, written and not committed,
	// until commit is called. Store's writes of the rows it wrote wait for
	// it (with SQLite's one writer, every write does).
	InFlight func(t *testing.T, sql string) (commit func())
}

// Races is how many goroutines race in the race tests: a pool that lets
// each of them reach the database at once must have as many connections.
const Races = 24

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// NewAttempt is an attempt of scope "s" under key, made through the
// provider "sim", claimed at now with a lease of lease.
func NewAttempt(key string, now time.Time, lease time.Duration) *payment.Attempt {
	req := payment.Request{Amount: 1000, Currency: "EUR", Source: "tok_visa"}
	a := payment.NewAttempt("s", key, req, now, lease)
	a.Provider = "sim"
	return &a
}

// Run runs the contract against the stores open makes, a fresh one a test.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, h Harness)
	}{
		{"ClaimRace", testClaimRace},
		{"TakeOverRace", testTakeOverRace},
		{"RecordGuards", testRecordGuards},
		{"RecordFencedAfterTakeOver", testRecordFencedAfterTakeOver},
		{"Release", testRelease},
		{"AttemptRoundTrip", testAttemptRoundTrip},
		{"StaleAndPurge", testStaleAndPurge},
		{"MerchantsAndKeys", testMerchantsAndKeys},
		{"Admin", testAdmin},
		{"AdminNewestFirst", testAdminNewestFirst},
		{"BindProvider", testBindProvider},
		{"Cancelled", testCancelled},
		{"RefundReservationRace", testRefundReservationRace},
		{"RecordSettlesRefunds", testRecordSettlesRefunds},
		{"RefundRefusals", testRefundRefusals},
		{"RefundOfTheRestWaits", testRefundOfTheRestWaits},
		{"PaymentsOutliveKeys", testPaymentsOutliveKeys},
		{"KeyExpiresWhateverDeletesItsRecord", testKeyExpiresWhateverDeletesItsRecord},
		{"Answer", testAnswer},
		{"ReplaysSeePurges", testReplaysSeePurges},
		{"InboxClaimRace", testInboxClaimRace},
		{"InboxLeasesAndPurge", testInboxLeasesAndPurge},
		{"OfflineLimits", testOfflineLimits},
		{"OfflineTotalRace", testOfflineTotalRace},
		{"ForwardClaims", testForwardClaims},
		{"PurgeKeepsQueued", testPurgeKeepsQueued},
		{"InboxFailedEventBegunAgain", testInboxFailedEventBegunAgain},
		{"OutboxEventPerChange", testOutboxEventPerChange},
		{"OutboxBothOrNeither", testOutboxBothOrNeither},
		{"OutboxList", testOutboxList},
		{"OutboxPurge", testOutboxPurge},
		{"EndpointsAndFanOut", testEndpointsAndFanOut},
		{"DeliveryClaims", testDeliveryClaims},
		{"DeliveryBacklogAndPurge", testDeliveryBacklogAndPurge},
		{"RedeliverDelivery", testRedeliverDelivery},
		{"RefundFailsOnce", testRefundFailsOnce},
		{"Disputes", testDisputes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, open(t))
		})
	}
}

func mustClaim(t *testing.T, s payment.Store, a *payment.Attempt) {
	t.Helper()
	if ok, err := s.Claim(context.Background(), a); !ok || err != nil {
		t.Fatalf("Claim(%s) = %v, %v, want claimed", a.Key, ok, err)
	}
}

func mustAttempt(t *testing.T, s payment.Store, key string) *payment.Attempt {
	t.Helper()
	a, err := s.Attempt(context.Background(), "s", key)
	if err != nil {
		t.Fatalf("Attempt(%s): %v", key, err)
	}
	return a
}

// Of many concurrent claims on one key exactly one wins, and the others are
// told so by their own statement, not by an error. Writes are held until
// every claim waits, so each has done whatever it does before its write
// while the key is still free: a claim decided by a read would let them all
// win, every time.
func testClaimRace(t *testing.T, h Harness) {
	others := bystanders(t, h.Store, "k")
	release := h.HoldWrites(t)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range Races {
		wg.Go(func() {
			ok, err := h.Store.Claim(context.Background(), NewAttempt("k", t0, time.Minute))
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
	if got := wins.Load(); got != 1 {
		t.Errorf("claims won = %d, want 1", got)
	}
	if a := mustAttempt(t, h.Store, "k"); a.Fence != 1 || a.Status != payment.InProgress {
		t.Errorf("attempt = %s fence %d, want in progress, fence 1", a.Status, a.Fence)
	}
	others()
}

// Of many concurrent takeovers of one abandoned attempt under the same
// fence exactly one wins: two retries (or a retry and reconcile, on any
// instance) never both own it.
func testTakeOverRace(t *testing.T, h Harness) {
	others := bystanders(t, h.Store, "k")
	mustClaim(t, h.Store, NewAttempt("k", t0, time.Minute))
	release := h.HoldWrites(t)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range Races {
		wg.Go(func() {
			now := t0.Add(2 * time.Minute)
			fence, ok, err := h.Store.TakeOver(context.Background(), "s", "k", 1, now, now.Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
				if fence != 2 {
					t.Errorf("winner's fence = %d, want 2", fence)
				}
			}
		})
	}
	h.WaitBlocked(t, Races)
	release()
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Errorf("takeovers won = %d, want 1", got)
	}
	if a := mustAttempt(t, h.Store, "k"); a.Fence != 2 {
		t.Errorf("fence = %d after the takeovers, want 2", a.Fence)
	}
	others()
}

// The record is guarded twice: by the owner's fence, so an owner whose
// attempt was taken over writes nothing while the new owner still works,
// and by the status, so nothing overwrites a final answer, not even the
// owner that wrote it; and by the kind it is told, so a payment is never
// settled as a refund. Each refused Record affects no row and says so.
func testRecordGuards(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	others := bystanders(t, db, "k")
	a := NewAttempt("k", t0, time.Minute)
	mustClaim(t, db, a)
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(2*time.Minute), t0.Add(3*time.Minute)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	late := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("late\n"), FailureCode: "card_declined"}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, late, t0.Add(2*time.Minute)); ok || err != nil {
		t.Fatalf("Record by the fenced-out owner, new owner still working = %v, %v, want false", ok, err)
	}
	if got := mustAttempt(t, db, "k"); got.Status != payment.InProgress || got.ResponseBody != nil || got.Fence != 2 {
		t.Fatalf("attempt = %s %q fence %d, want in progress, nothing stored, fence 2", got.Status, got.ResponseBody, got.Fence)
	}
	if p := mustPayment(t, db, a.ID); p.Status != payment.InProgress || p.FailureCode != "" || !p.UpdatedAt.Equal(t0) {
		t.Fatalf("payment after a refused record = %s %q updated %v, want in progress as claimed", p.Status, p.FailureCode, p.UpdatedAt)
	}
	first := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("first\n"), ChargeID: "ch_1"}
	if ok, err := db.Record(ctx, payment.KindRefund, "s", "k", 2, first, t0.Add(2*time.Minute)); ok || err != nil {
		t.Fatalf("Record of the payment as a refund = %v, %v, want false", ok, err)
	}
	if ok, err := db.Record(ctx, "", "s", "k", 2, first, t0.Add(2*time.Minute)); ok || err == nil {
		t.Fatalf("Record of no kind = %v, %v, want an error", ok, err)
	}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 2, first, t0.Add(2*time.Minute)); !ok || err != nil {
		t.Fatalf("new owner's Record = %v, %v", ok, err)
	}
	again := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("again\n")}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 2, again, t0.Add(3*time.Minute)); ok || err != nil {
		t.Fatalf("second Record by the same owner = %v, %v, want false", ok, err)
	}
	got := mustAttempt(t, db, "k")
	if got.Status != payment.Succeeded || string(got.ResponseBody) != "first\n" || got.ChargeID != "ch_1" ||
		got.ResponseStatus != 201 || !got.UpdatedAt.Equal(t0.Add(2*time.Minute)) || !got.LeaseExpiresAt.IsZero() {
		t.Errorf("attempt = %s %d %q %s updated %v lease %v, want the first record's, no lease",
			got.Status, got.ResponseStatus, got.ResponseBody, got.ChargeID, got.UpdatedAt, got.LeaseExpiresAt)
	}
	if p := mustPayment(t, db, a.ID); p.Status != payment.Succeeded || p.ChargeID != "ch_1" || p.FailureCode != "" ||
		!p.UpdatedAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("payment = %s %s %q updated %v, want settled by the first record alone", p.Status, p.ChargeID, p.FailureCode, p.UpdatedAt)
	}
	others()
}

// A live lease cannot be taken over; an expired one can, once per fence;
// a late owner's Record cannot overwrite what the owner that took over wrote.
func testRecordFencedAfterTakeOver(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	others := bystanders(t, db, "k")
	mustClaim(t, db, NewAttempt("k", t0, time.Minute))
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(30*time.Second), t0.Add(2*time.Minute)); ok || err != nil {
		t.Fatalf("TakeOver of a live lease = %v, %v, want false", ok, err)
	}
	fence, ok, err := db.TakeOver(ctx, "s", "k", 1, t0.Add(2*time.Minute), t0.Add(3*time.Minute))
	if !ok || err != nil || fence != 2 {
		t.Fatalf("TakeOver of an expired lease = %d, %v, %v, want 2, true", fence, ok, err)
	}
	if got := mustAttempt(t, db, "k"); !got.LeaseExpiresAt.Equal(t0.Add(3*time.Minute)) || !got.UpdatedAt.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("after TakeOver: lease %v updated %v, want the new lease and now", got.LeaseExpiresAt, got.UpdatedAt)
	}
	if _, ok, _ := db.TakeOver(ctx, "s", "k", 1, t0.Add(4*time.Minute), t0.Add(5*time.Minute)); ok {
		t.Fatalf("second TakeOver with the stale fence succeeded")
	}
	newOwner := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("new\n"), ChargeID: "ch_new"}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 2, newOwner, t0.Add(2*time.Minute)); !ok || err != nil {
		t.Fatalf("new owner's Record = %v, %v", ok, err)
	}
	late := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("late\n")}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, late, t0.Add(3*time.Minute)); ok || err != nil {
		t.Fatalf("late owner's Record = %v, %v, want false", ok, err)
	}
	if got := mustAttempt(t, db, "k"); got.Status != payment.Succeeded || string(got.ResponseBody) != "new\n" || got.ChargeID != "ch_new" {
		t.Errorf("attempt = %s %q %s, want the new owner's succeeded", got.Status, got.ResponseBody, got.ChargeID)
	}
	if _, ok, _ := db.TakeOver(ctx, "s", "k", 2, t0.Add(time.Hour), t0.Add(2*time.Hour)); ok {
		t.Errorf("TakeOver of a final attempt succeeded")
	}
	others()
}

// Release lets a retry take over at once, and only the owner can release.
func testRelease(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	others := bystanders(t, db, "k")
	mustClaim(t, db, NewAttempt("k", t0, time.Hour))
	if err := db.Release(ctx, "s", "k", 7, t0); err != nil { // not the owner's fence: no effect
		t.Fatal(err)
	}
	if _, ok, _ := db.TakeOver(ctx, "s", "k", 1, t0, t0.Add(time.Minute)); ok {
		t.Fatalf("TakeOver after a foreign Release succeeded")
	}
	if err := db.Release(ctx, "s", "k", 1, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := mustAttempt(t, db, "k"); !got.LeaseExpiresAt.IsZero() || !got.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("after Release: lease %v updated %v, want none and the release time", got.LeaseExpiresAt, got.UpdatedAt)
	}
	if _, ok, err := db.TakeOver(ctx, "s", "k", 1, t0, t0.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("TakeOver after Release = %v, %v, want true", ok, err)
	}
	others()
}

// What a claim stores is what reads return, field for field; a payment id
// is found in its own scope only; an unknown key is ENOTFOUND.
func testAttemptRoundTrip(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	others := bystanders(t, db, "k")
	a := NewAttempt("k", t0, time.Minute)
	mustClaim(t, db, a)
	if ok, err := db.Claim(ctx, NewAttempt("k", t0.Add(time.Second), time.Minute)); ok || err != nil {
		t.Errorf("second Claim of the key = %v, %v, want false, no error", ok, err)
	}
	got := mustAttempt(t, db, "k")
	if got.ID != a.ID || string(got.RequestHash) != string(a.RequestHash) || string(got.Request) != string(a.Request) ||
		got.Amount != a.Amount || got.Currency != a.Currency || got.Status != a.Status || got.Fence != 1 ||
		!got.LeaseExpiresAt.Equal(a.LeaseExpiresAt) || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0) ||
		got.ResponseStatus != 0 || got.ResponseBody != nil || got.ChargeID != "" || got.FailureCode != "" || got.Provider != "sim" {
		t.Errorf("Attempt = %+v, want what was claimed: %+v", got, a)
	}
	if l, err := db.AttemptByPaymentID(ctx, a.ID); err != nil || l.Provider != "sim" {
		t.Errorf("AttemptByPaymentID = %+v, %v, want the provider it was claimed through", l, err)
	}
	if byID, err := db.AttemptByID(ctx, "s", a.ID); err != nil || byID.Key != "k" {
		t.Errorf("AttemptByID in its scope = %v, %v", byID, err)
	}
	if _, err := db.AttemptByID(ctx, "other", a.ID); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("AttemptByID in another scope: %v, want not found", err)
	}
	if _, err := db.Attempt(ctx, "other", "k"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("Attempt in another scope: %v, want not found", err)
	}
	declined := payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte(`{"x":1}`), FailureCode: "card_declined"}
	if ok, err := db.Record(ctx, payment.KindPayment, "s", "k", 1, declined, t0.Add(time.Second)); !ok || err != nil {
		t.Fatalf("Record = %v, %v", ok, err)
	}
	if got := mustAttempt(t, db, "k"); got.FailureCode != "card_declined" || got.ChargeID != "" || got.ResponseStatus != 402 {
		t.Errorf("after a decline: %+v", got)
	}
	if p := mustPayment(t, db, a.ID); p.Status != payment.Failed || p.FailureCode != "card_declined" || p.ChargeID != "" ||
		!p.UpdatedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("payment after a decline = %s %q %q updated %v, want failed, card_declined", p.Status, p.FailureCode, p.ChargeID, p.UpdatedAt)
	}
	others()
}

// Stale returns the attempts reconcile may settle, oldest first and no more
// than asked; purge deletes final attempts past the retention in batches,
// never one in progress however old.
func testStaleAndPurge(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	min := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	for _, c := range []struct {
		key     string
		claimed time.Time
		lease   time.Duration
	}{
		{"old-dead", min(0), time.Minute},         // stale
		{"older-dead", min(-1), time.Minute},      // stale, oldest
		{"old-leased", min(0), time.Hour},         // lease still live at min(10)
		{"young", min(8), time.Minute},            // not yet stale at min(10)
		{"edge", min(5), 0},                       // exactly stale-after old: stale
		{"settled", min(0), time.Minute},          // final
		{"settled-young", min(9), time.Minute},    // final, within retention
		{"settled-2", min(0).Add(time.Second), 0}, // final
	} {
		mustClaim(t, db, NewAttempt(c.key, c.claimed, c.lease))
	}
	for _, k := range []string{"settled", "settled-young", "settled-2"} {
		a := mustAttempt(t, db, k)
		if ok, err := db.Record(ctx, payment.KindPayment, "s", k, 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, a.CreatedAt); !ok || err != nil {
			t.Fatalf("Record(%s) = %v, %v", k, ok, err)
		}
	}
	now := min(10)
	stale, err := db.Stale(ctx, now.Add(-5*time.Minute), now, 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range stale {
		keys = append(keys, a.Key)
		if !a.Stale(now, 5*time.Minute) {
			t.Errorf("Stale returned %s, which Attempt.Stale does not call stale", a.Key)
		}
	}
	if got, want := strings.Join(keys, ","), "older-dead,old-dead,edge"; got != want {
		t.Errorf("Stale = %s, want %s", got, want)
	}
	if n, err := db.CountStale(ctx, now.Add(-5*time.Minute), now); n != 3 || err != nil {
		t.Errorf("CountStale = %d, %v, want 3", n, err)
	}
	if two, err := db.Stale(ctx, now.Add(-5*time.Minute), now, 2); err != nil || len(two) != 2 || two[0].Key != "older-dead" {
		t.Errorf("Stale with limit 2 = %d attempts (%v), want the 2 oldest", len(two), err)
	}
	if n, oldest, err := db.InProgress(ctx); n != 5 || !oldest.Equal(min(-1)) || err != nil {
		t.Errorf("InProgress = %d, %v, %v, want 5, the oldest claim's time", n, oldest, err)
	}

	// Retention reaches min(5): two final attempts are older, one is not,
	// and the in-progress ones are older still but stay. A batch tells how
	// long it held the writing: the Purger sizes the next by it.
	if n, held, err := db.Purge(ctx, min(5), 1); n != 1 || held <= 0 || err != nil {
		t.Errorf("Purge, batch of 1 = %d, held %s, %v, want 1, held some time", n, held, err)
	}
	if n, _, err := db.Purge(ctx, min(5), 10); n != 1 || err != nil {
		t.Errorf("Purge, batch of 10 = %d, %v, want the 1 left", n, err)
	}
	if n, _, err := db.Purge(ctx, min(5), 10); n != 0 || err != nil {
		t.Errorf("Purge again = %d, %v, want 0", n, err)
	}
	counts, err := db.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[payment.Status]int{payment.InProgress: 5, payment.Succeeded: 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("Counts after purge = %v, want %v", counts, want)
	}
	if n, _, err := db.Purge(ctx, min(1000), 10); n != 1 || err != nil {
		t.Errorf("Purge of everything final = %d, %v, want 1: never an attempt in progress", n, err)
	}
}

// Merchants own keys; a key authenticates as its merchant until revoked;
// the errors are the same on every store.
func testMerchantsAndKeys(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	shop, err := db.CreateMerchant(ctx, "Shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := db.CreateMerchant(ctx, "Other", t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	k1, s1, err := db.CreateAPIKey(ctx, shop.ID, "web", t0)
	if err != nil {
		t.Fatal(err)
	}
	_, s2, err := db.CreateAPIKey(ctx, shop.ID, "pos", t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := db.CreateAPIKey(ctx, "mer_nobody", "x", t0); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("CreateAPIKey for an unknown merchant: %v, want not found", err)
	}
	for _, s := range []string{s1, s2} {
		if scope, err := db.Authenticate(ctx, s); scope != shop.ID || err != nil {
			t.Errorf("Authenticate = %q, %v, want %s", scope, err, shop.ID)
		}
	}
	for _, s := range []string{"opk_nope", "nope", ""} {
		if _, err := db.Authenticate(ctx, s); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
			t.Errorf("Authenticate(%q): %v, want unauthorized", s, err)
		}
	}
	if err := db.RevokeAPIKey(ctx, k1.ID, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeAPIKey(ctx, k1.ID, t0.Add(time.Minute)); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("revoking a revoked key: %v, want not found", err)
	}
	if _, err := db.Authenticate(ctx, s1); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
		t.Errorf("Authenticate(revoked): %v, want unauthorized", err)
	}
	if scope, err := db.Authenticate(ctx, s2); scope != shop.ID || err != nil {
		t.Errorf("Authenticate(the other key after a revoke) = %q, %v", scope, err)
	}
	merchants, err := db.Merchants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(merchants) != 2 || merchants[0].ID != shop.ID || merchants[0].Name != "Shop" || merchants[0].LiveKeys != 1 ||
		!merchants[0].CreatedAt.Equal(t0) || merchants[1].ID != other.ID || merchants[1].LiveKeys != 0 {
		t.Errorf("Merchants = %+v, want Shop (1 live key), then Other (none)", merchants)
	}
	keys, err := db.APIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != k1.ID || keys[0].Name != "web" || !keys[0].RevokedAt.Equal(t0.Add(time.Minute)) ||
		keys[1].Name != "pos" || !keys[1].RevokedAt.IsZero() || keys[1].MerchantID != shop.ID {
		t.Errorf("APIKeys = %+v, want web (revoked), then pos (live)", keys)
	}
}

// The admin page's reads: every merchant's attempts newest first with the
// merchant's name, a page at a time from a cursor, filtered by status or
// by a whole key or a payment id; counts by status, whole or up to a cap;
// an attempt by payment id in any scope.
func testAdmin(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	m, err := db.CreateMerchant(ctx, "Shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i, key := range []string{"order-1", "order-2", "other-3", "order-4"} {
		a := NewAttempt(key, t0.Add(time.Duration(i)*time.Second), time.Minute)
		a.Scope = m.ID
		a.ID = fmt.Sprintf("pay_%d", i)
		mustClaim(t, db, a)
		ids = append(ids, a.ID)
	}
	orphan := NewAttempt("order-1", t0, time.Minute) // scope "s" has no merchant row
	orphan.ID = "pay_9"
	mustClaim(t, db, orphan)
	o := payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}"), ChargeID: "ch_two"}
	if ok, err := db.Record(ctx, payment.KindPayment, m.ID, "order-2", 1, o, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	list := func(f payment.AttemptFilter) string {
		t.Helper()
		if f.Limit == 0 {
			f.Limit = 50
		}
		got, err := db.ListAttempts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, l := range got {
			s = append(s, l.ID+"/"+l.Merchant)
		}
		return strings.Join(s, " ")
	}
	for _, tt := range []struct {
		f    payment.AttemptFilter
		want string
	}{
		{payment.AttemptFilter{}, "pay_3/Shop pay_2/Shop pay_1/Shop pay_9/s pay_0/Shop"},
		{payment.AttemptFilter{Status: payment.Succeeded}, "pay_1/Shop"},
		// A key is searched whole, in every merchant's keys (and demo's):
		// scope "s" has no merchant. Neither a prefix nor a charge id is
		// searched: no index would serve them.
		{payment.AttemptFilter{Search: "order-1"}, "pay_0/Shop"},
		{payment.AttemptFilter{Search: "order-"}, ""},
		{payment.AttemptFilter{Search: "pay_2"}, "pay_2/Shop"},
		{payment.AttemptFilter{Search: "pay_9"}, "pay_9/s"},
		{payment.AttemptFilter{Search: "ch_two"}, ""},
		{payment.AttemptFilter{Search: "order-4", Status: payment.InProgress}, "pay_3/Shop"},
		{payment.AttemptFilter{Search: "order-2", Status: payment.InProgress}, ""},
		{payment.AttemptFilter{Search: "ORDER-1"}, ""},
		{payment.AttemptFilter{Limit: 2, Before: &payment.AttemptCursor{At: t0.Add(3 * time.Second), ID: "pay_3"}}, "pay_2/Shop pay_1/Shop"},
		{payment.AttemptFilter{Limit: 2, After: &payment.AttemptCursor{At: t0, ID: "pay_0"}}, "pay_1/Shop pay_9/s"},
		{payment.AttemptFilter{Status: payment.InProgress, Before: &payment.AttemptCursor{At: t0.Add(3 * time.Second), ID: "pay_3"}}, "pay_2/Shop pay_9/s pay_0/Shop"},
	} {
		if got := list(tt.f); got != tt.want {
			t.Errorf("ListAttempts(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
	counts, err := db.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[payment.InProgress] != 4 || counts[payment.Succeeded] != 1 || counts[payment.Failed] != 0 {
		t.Errorf("Counts = %v, want 4 in progress, 1 succeeded", counts)
	}
	if counts, err := db.CountsUpTo(ctx, 2); err != nil || len(counts) != 2 || counts[payment.InProgress] != 2 || counts[payment.Succeeded] != 1 {
		t.Errorf("CountsUpTo(2) = %v, %v, want 2 in progress (of 4), 1 succeeded", counts, err)
	}
	l, err := db.AttemptByPaymentID(ctx, ids[1])
	if err != nil || l.Key != "order-2" || l.Merchant != "Shop" || l.ChargeID != "ch_two" {
		t.Errorf("AttemptByPaymentID = %+v, %v", l, err)
	}
	if _, err := db.AttemptByPaymentID(ctx, "pay_nope"); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("AttemptByPaymentID(unknown): %v, want not found", err)
	}
}

// The admin list is newest first by creation time, payments and refunds
// alike: a refund made before a later payment is listed after it, though
// every re_ id sorts above every pay_ id. Attempts made at the same instant
// go by id, so the order is total and pages neither repeat nor skip.
func testAdminNewestFirst(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	first := paid(t, db, "first") // at t0
	refund := payment.NewRefundAttempt("s", "refund", payment.RefundRequest{PaymentID: first, Amount: 100}, t0.Add(time.Second), time.Minute)
	mustClaim(t, db, &refund)
	later := NewAttempt("later", t0.Add(2*time.Second), time.Minute)
	mustClaim(t, db, later)
	var tied []string
	for _, key := range []string{"tied-a", "tied-b", "tied-c"} {
		a := NewAttempt(key, t0.Add(3*time.Second), time.Minute)
		mustClaim(t, db, a)
		tied = append(tied, a.ID)
	}
	slices.Sort(tied)
	slices.Reverse(tied)
	want := append(tied, later.ID, refund.ID, first)
	list := func(f payment.AttemptFilter) []string {
		t.Helper()
		got, err := db.ListAttempts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, l := range got {
			ids = append(ids, l.ID)
		}
		return ids
	}
	if got := list(payment.AttemptFilter{Limit: 50}); !slices.Equal(got, want) {
		t.Errorf("ListAttempts = %v, want %v", got, want)
	}
	// Two at a time from each page's last row, then back from the oldest.
	var paged, back []string
	for f := (payment.AttemptFilter{Limit: 2}); ; {
		got, err := db.ListAttempts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || len(paged) > len(want) {
			break
		}
		for _, l := range got {
			paged = append(paged, l.ID)
		}
		c := payment.CursorOf(got[len(got)-1].Attempt, f)
		f.Before = &c
	}
	if !slices.Equal(paged, want) {
		t.Errorf("ListAttempts two at a time = %v, want %v", paged, want)
	}
	oldest, err := db.AttemptByPaymentID(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	for f := (payment.AttemptFilter{Limit: 2, After: &payment.AttemptCursor{At: oldest.CreatedAt, ID: oldest.ID}}); ; {
		got, err := db.ListAttempts(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || len(back) > len(want) {
			break
		}
		for i := range got { // each page newest first, the pages newest last
			back = append(back, got[len(got)-1-i].ID)
		}
		c := payment.CursorOf(got[0].Attempt, f)
		f.After = &c
	}
	slices.Reverse(back)
	if !slices.Equal(back, want[:len(want)-1]) {
		t.Errorf("ListAttempts two at a time back from the oldest = %v, want %v", back, want[:len(want)-1])
	}
	if got, want := list(payment.AttemptFilter{Status: payment.InProgress, Limit: 50}), want[:len(want)-1]; !slices.Equal(got, want) {
		t.Errorf("ListAttempts in progress = %v, want %v", got, want)
	}
}

// A database stays bound to its provider while payments are in flight there.
func testBindProvider(t *testing.T, h Harness) {
	ctx, db := context.Background(), h.Store
	if err := db.BindProvider(ctx, "http://bank:1"); err != nil {
		t.Fatal(err)
	}
	if err := db.BindProvider(ctx, "http://bank:1"); err != nil {
		t.Errorf("same provider again: %v", err)
	}
	mustClaim(t, db, NewAttempt("k", t0, time.Minute))
	if err := db.BindProvider(ctx, "sim"); err == nil || !strings.Contains(err.Error(), "http://bank:1") {
		t.Errorf("another provider with an attempt in progress = %v, want a refusal naming the bound one", err)
	}
	db.Record(ctx, payment.KindPayment, "s", "k", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, t0)
	if err := db.BindProvider(ctx, "http://bank:2"); err != nil {
		t.Errorf("another provider with nothing in progress = %v, want the binding moved", err)
	}
	mustClaim(t, db, NewAttempt("k2", t0, time.Minute))
	if err := db.BindProvider(ctx, "http://bank:1"); err == nil || !strings.Contains(err.Error(), "http://bank:2") {
		t.Errorf("back to the first provider with an attempt in progress = %v, want a refusal naming the one it moved to", err)
	}
	// A payment queued offline is forwarded to the provider it was taken
	// for: no other provider while one waits.
	db.Record(ctx, payment.KindPayment, "s", "k2", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}")}, t0)
	if err := db.SetOfflineLimits(ctx, "s", &offlineLimits); err != nil {
		t.Fatal(err)
	}
	queue(t, db, "s", "q", 100, "EUR")
	if err := db.BindProvider(ctx, "http://bank:3"); err == nil || !strings.Contains(err.Error(), "http://bank:2") {
		t.Errorf("another provider with a payment queued = %v, want a refusal", err)
	}
}

// A caller that gave up is not an internal error: nothing was written.
func testCancelled(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Store.Attempt(ctx, "s", "k"); payment.ErrorCode(err) != payment.EUNAVAILABLE {
		t.Errorf("Attempt with a cancelled context: code %q (%v), want %q", payment.ErrorCode(err), err, payment.EUNAVAILABLE)
	}
	if _, err := h.Store.Claim(ctx, NewAttempt("k", t0, time.Minute)); payment.ErrorCode(err) != payment.EUNAVAILABLE {
		t.Errorf("Claim with a cancelled context: code %q (%v), want %q", payment.ErrorCode(err), err, payment.EUNAVAILABLE)
	}
	if _, err := h.Store.Authenticate(ctx, "opk_x"); payment.ErrorCode(err) == payment.EINTERNAL {
		t.Errorf("Authenticate with a cancelled context: %v, want no internal error", err)
	}
}
