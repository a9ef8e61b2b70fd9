package stripe_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/fakestripe"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/stripe"
	"github.com/oncepay/oncepay/sqlitestore"
)

const testKey = "sk_test_oncepay0123456789secret"

func newClient(t testing.TB, url string, retries int64) *stripe.Client {
	t.Helper()
	c, err := stripe.New(stripe.Config{SecretKey: testKey, URL: url, MaxNetworkRetries: retries})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clock is a settable time for leases and staleness.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock               { return &clock{now: time.Now()} }
func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// oncepay is the payment flow on a real SQLite store in t.TempDir() over p.
func oncepay(t testing.TB, p payment.Provider, now func() time.Time) (*payment.Service, *sqlitestore.DB) {
	t.Helper()
	schema, err := os.ReadFile("../../schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "oncepay.db"), string(schema), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	svc := &payment.Service{Store: db, Provider: p, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now: now, ProviderTimeout: 5 * time.Second, Lease: 8 * time.Second}
	return svc, db
}

func request(amount int64, source string) payment.Request {
	return payment.Request{Amount: amount, Currency: "USD", Source: source}
}

// retryable reports whether a client should send the same request again.
func retryable(err error) bool {
	switch payment.ErrorCode(err) {
	case payment.EINPROGRESS, payment.EOUTCOMEUNKNOWN, payment.EUNAVAILABLE:
		return true
	}
	return false
}

// Under lost responses (after charging, and while the charge is still in
// flight, so retries meet Stripe's 409) and concurrent retries of every
// intent, each intent is exactly one PaymentIntent, and oncepay's stored
// charge is that PaymentIntent.
func TestExactlyOncePerIntent(t *testing.T) {
	const (
		intents = 30
		clients = 3 // concurrent retries of each intent
	)
	fake := fakestripe.New(t, testKey)
	var dropped sync.Map // keys whose first answer was already lost
	firstTime := func(key string) bool { _, seen := dropped.LoadOrStore(key, true); return !seen }
	kind := func(key string) int { return int(key[len(key)-1]) % 3 } // the key is hex: a spread of faults
	fake.SetFaults(fakestripe.Faults{
		DropAfter:  func(key string) bool { return kind(key) == 0 && firstTime(key) },
		DropBefore: func(key string) bool { return kind(key) == 1 && firstTime(key) },
		Delay: func(key string) time.Duration {
			if kind(key) == 1 {
				return 1500 * time.Millisecond // outlasts the SDK's first retry, which meets a 409
			}
			return 5 * time.Millisecond
		},
	})
	svc, db := oncepay(t, newClient(t, fake.URL, stripe.DefaultMaxNetworkRetries), time.Now)

	var wg sync.WaitGroup
	var mu sync.Mutex
	results := map[string][]payment.Result{}
	var calls atomic.Int64
	for i := range intents {
		key := fmt.Sprintf("checkout-%d", i)
		source := []string{"pm_card_visa", "tok_visa"}[i%2]
		for range clients {
			wg.Go(func() {
				for range 60 {
					calls.Add(1)
					res, err := svc.Pay(context.Background(), "merchant", key, request(1000+int64(i), source))
					if err == nil {
						mu.Lock()
						results[key] = append(results[key], res)
						mu.Unlock()
						return
					}
					if !retryable(err) {
						t.Errorf("%s: Pay = %v, want a result or a retryable error", key, err)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Errorf("%s: no final answer after 60 tries", key)
			})
		}
	}
	wg.Wait()

	counts := fake.Counts()
	for i := range intents {
		key := fmt.Sprintf("checkout-%d", i)
		dk := payment.DownstreamKey("merchant", key)
		if n := counts.IntentsByKey[dk]; n != 1 {
			t.Errorf("%s: %d PaymentIntents, want 1", key, n)
		}
		a, err := db.Attempt(context.Background(), "merchant", key)
		if err != nil {
			t.Fatal(err)
		}
		if a.Status != payment.Succeeded || a.ChargeID != counts.SucceededByKey[dk] {
			t.Errorf("%s: attempt %s charge %q, want succeeded with PaymentIntent %q", key, a.Status, a.ChargeID, counts.SucceededByKey[dk])
		}
		if got := len(results[key]); got != clients {
			t.Errorf("%s: %d clients got an answer, want %d", key, got, clients)
		}
		for _, r := range results[key] {
			if r.Status != 201 || !bytes.Equal(r.Body, a.ResponseBody) {
				t.Errorf("%s: answer %d %s, want the stored 201 %s", key, r.Status, r.Body, a.ResponseBody)
			}
		}
	}
	if counts.Created != intents {
		t.Errorf("PaymentIntents created = %d, want %d", counts.Created, intents)
	}
	if counts.Dropped == 0 || counts.Conflicts == 0 {
		t.Errorf("%d responses dropped, %d 409s for a key in flight: want both faults exercised", counts.Dropped, counts.Conflicts)
	}
	t.Logf("fake Stripe: %d intents, %d client calls to oncepay, %d HTTP attempts to create a PaymentIntent (%d responses dropped, %d 409s in flight), %d PaymentIntents created",
		intents, calls.Load(), counts.Attempts, counts.Dropped, counts.Conflicts, counts.Created)
}

// An attempt abandoned after Stripe charged is settled by reconcile from the
// consistent list, while Search still finds nothing; one Stripe never
// charged is settled as not completed.
func TestReconcileSettlesFromConsistentRead(t *testing.T) {
	fake := fakestripe.New(t, testKey) // Search lags an hour
	clk := newClock()
	svc, db := oncepay(t, newClient(t, fake.URL, 0), clk.Now)
	charged, lost := payment.DownstreamKey("m", "charged"), payment.DownstreamKey("m", "never-charged")
	fake.SetFaults(fakestripe.Faults{
		DropAfter: func(key string) bool { return key == charged },
		Inject: func(r *http.Request) (int, string, bool) {
			if r.Header.Get("Idempotency-Key") == lost { // fails before charging
				return 500, `{"error":{"type":"api_error","message":"boom"}}`, true
			}
			return 0, "", false
		},
	})
	for _, key := range []string{"charged", "never-charged"} {
		if _, err := svc.Pay(context.Background(), "m", key, request(2500, "pm_card_visa")); payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
			t.Fatalf("%s: Pay = %v, want outcome unknown", key, err)
		}
	}
	clk.Add(10 * time.Minute) // the client never retries: both are stale
	rec := &payment.Reconciler{Service: svc, StaleAfter: 5 * time.Minute, Limit: 10}
	res, err := rec.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Succeeded != 1 || res.Failed != 1 || res.Unknown != 0 {
		t.Errorf("reconcile = %s, want 1 succeeded, 1 failed", res)
	}
	counts := fake.Counts()
	if counts.SearchQueries == 0 || counts.ListQueries == 0 {
		t.Errorf("search queries %d, list queries %d: want both asked", counts.SearchQueries, counts.ListQueries)
	}
	a, _ := db.Attempt(context.Background(), "m", "charged")
	if a.Status != payment.Succeeded || a.ChargeID != counts.SucceededByKey[charged] || a.ResponseStatus != 201 {
		t.Errorf("charged: %s %d charge %q, want succeeded 201 with %q", a.Status, a.ResponseStatus, a.ChargeID, counts.SucceededByKey[charged])
	}
	b, _ := db.Attempt(context.Background(), "m", "never-charged")
	if b.Status != payment.Failed || b.FailureCode != "not_completed" {
		t.Errorf("never charged: %s %q, want failed not_completed", b.Status, b.FailureCode)
	}
	if counts.Created != 1 {
		t.Errorf("PaymentIntents created = %d, want 1", counts.Created)
	}
}

// A decline is a stored 402 carrying Stripe's decline code; a replay never
// reaches Stripe.
func TestDeclineIsStored402(t *testing.T) {
	for _, source := range []string{"pm_card_visa_chargeDeclinedInsufficientFunds", "tok_chargeDeclinedInsufficientFunds"} {
		t.Run(source, func(t *testing.T) {
			fake := fakestripe.New(t, testKey)
			svc, db := oncepay(t, newClient(t, fake.URL, 0), time.Now)
			first, err := svc.Pay(context.Background(), "m", "k", request(900, source))
			if err != nil {
				t.Fatal(err)
			}
			var p payment.Problem
			json.Unmarshal(first.Body, &p)
			if first.Status != 402 || p.Type != payment.ProblemDeclined || p.DeclineCode != "insufficient_funds" {
				t.Fatalf("first = %d %s, want 402 declined insufficient_funds", first.Status, first.Body)
			}
			attempts := fake.Counts().Attempts
			again, err := svc.Pay(context.Background(), "m", "k", request(900, source))
			if err != nil || !again.Replayed || !bytes.Equal(again.Body, first.Body) {
				t.Errorf("replay = %+v %v, want the stored 402", again, err)
			}
			if got := fake.Counts().Attempts; got != attempts {
				t.Errorf("HTTP attempts after the replay = %d, want %d", got, attempts)
			}
			if a, _ := db.Attempt(context.Background(), "m", "k"); a.Status != payment.Failed || a.FailureCode != "insufficient_funds" {
				t.Errorf("attempt %s %q, want failed insufficient_funds", a.Status, a.FailureCode)
			}
		})
	}
}

// A key Stripe already holds for another amount (oncepay forgot it after
// the retention) is a final 409 idempotency-key-reused: nothing charged.
func TestKeyReusedWithAnotherAmount(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	c := newClient(t, fake.URL, 0)
	svc, db := oncepay(t, c, time.Now)
	dk := payment.DownstreamKey("m", "reused")
	if _, err := c.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: dk, PaymentID: "pay_old", Amount: 500, Currency: "USD", Source: "pm_card_visa"}); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Pay(context.Background(), "m", "reused", request(700, "pm_card_visa"))
	if err != nil {
		t.Fatal(err)
	}
	var p payment.Problem
	json.Unmarshal(res.Body, &p)
	if res.Status != 409 || p.Type != payment.ProblemKeyReused {
		t.Errorf("Pay = %d %s, want a final 409 idempotency-key-reused", res.Status, res.Body)
	}
	if a, _ := db.Attempt(context.Background(), "m", "reused"); a.Status != payment.Failed {
		t.Errorf("attempt %s, want failed (final)", a.Status)
	}
	if n := fake.Counts().Created; n != 1 {
		t.Errorf("PaymentIntents created = %d, want 1 (the old one)", n)
	}
}

// A key Stripe refuses is a 503 service-unavailable at run time, with the
// lease released and nothing stored, and an error from Check at start.
func TestRefusedKey(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	c := newClient(t, fake.URL, 0)
	if err := c.Check(context.Background()); err != nil {
		t.Fatalf("Check with the right key = %v", err)
	}
	fake.SetKey("sk_test_rotated")
	if err := c.Check(context.Background()); !errors.Is(err, payment.ErrProviderUnavailable) {
		t.Errorf("Check with a refused key = %v, want ErrProviderUnavailable", err)
	}
	svc, db := oncepay(t, c, time.Now)
	_, err := svc.Pay(context.Background(), "m", "k", request(700, "pm_card_visa"))
	if payment.ErrorCode(err) != payment.EUNAVAILABLE || payment.ProblemOf(err).Type != payment.ProblemUnavailable {
		t.Fatalf("Pay = %v, want 503 service-unavailable", err)
	}
	if strings.Contains(err.Error(), testKey) || strings.Contains(payment.ErrorMessage(err), "sk_") {
		t.Errorf("error %q names the key", err)
	}
	a, _ := db.Attempt(context.Background(), "m", "k")
	if a.Status != payment.InProgress || a.LeaseLive(time.Now()) {
		t.Errorf("attempt %s lease live %v, want in progress with the lease released", a.Status, a.LeaseLive(time.Now()))
	}
	fake.SetKey(testKey) // the operator fixes it; the retry charges
	if res, err := svc.Pay(context.Background(), "m", "k", request(700, "pm_card_visa")); err != nil || res.Status != 201 {
		t.Errorf("retry = %d %v, want 201", res.Status, err)
	}
}

// What each Stripe answer becomes.
func TestClassification(t *testing.T) {
	const (
		decline = "decline"
		reused  = "reused"
		unavail = "unavailable"
		unknown = "unknown"
	)
	tests := []struct {
		name   string
		status int
		body   string
		want   string
		code   string
	}{
		{"card error", 402, `{"error":{"type":"card_error","code":"card_declined","decline_code":"stolen_card","message":"Your card was declined."}}`, decline, "stolen_card"},
		{"card error without decline code", 402, `{"error":{"type":"card_error","code":"expired_card","message":"Your card has expired."}}`, decline, "expired_card"},
		{"idempotency error", 400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, reused, ""},
		{"no such payment method", 400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_method","message":"No such PaymentMethod"}}`, decline, "resource_missing"},
		{"authentication", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, unavail, ""},
		{"permission", 403, `{"error":{"type":"invalid_request_error","message":"The provided key does not have the required permissions"}}`, unavail, ""},
		{"key in flight", 409, `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"in progress"}}`, unknown, ""},
		{"rate limited", 429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, unknown, ""},
		{"server error", 500, `{"error":{"type":"api_error","message":"Something went wrong"}}`, unknown, ""},
		{"bad gateway, not JSON", 502, `<html>bad gateway</html>`, unknown, ""},
		{"requires action", 200, `{"id":"pi_1","object":"payment_intent","status":"requires_action","amount":100,"currency":"usd"}`, decline, "requires_action"},
		{"processing", 200, `{"id":"pi_1","object":"payment_intent","status":"processing","amount":100,"currency":"usd"}`, unknown, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakestripe.New(t, testKey)
			fake.SetFaults(fakestripe.Faults{Inject: func(*http.Request) (int, string, bool) { return tt.status, tt.body, true }})
			_, err := newClient(t, fake.URL, 0).Charge(context.Background(), payment.ChargeRequest{
				IdempotencyKey: "oncepay_k", PaymentID: "pay_1", Amount: 100, Currency: "USD", Source: "pm_card_visa"})
			d, declined := payment.IsDecline(err)
			got := unknown
			switch {
			case err == nil:
				got = "success"
			case declined:
				got = decline
			case errors.Is(err, payment.ErrProviderKeyReused):
				got = reused
			case errors.Is(err, payment.ErrProviderUnavailable):
				got = unavail
			}
			if got != tt.want || declined && d.Code != tt.code {
				t.Errorf("Charge = %v, want %s %s", err, tt.want, tt.code)
			}
		})
	}
}

// Lookup finds a charge by the consistent list whatever Search says, uses
// Search when it does find one, and never answers when two PaymentIntents
// carry one key.
func TestLookup(t *testing.T) {
	fake := fakestripe.New(t, testKey)
	c := newClient(t, fake.URL, 0)
	ctx := context.Background()
	since := time.Now()
	ch, err := c.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "oncepay_a", PaymentID: "pay_a", Amount: 300, Currency: "EUR", Source: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Currency != "EUR" || ch.Amount != 300 || !strings.HasPrefix(ch.ID, "pi_") {
		t.Errorf("Charge = %+v, want 300 EUR on a PaymentIntent", ch)
	}
	got, found, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "oncepay_a", CreatedAt: since})
	if err != nil || !found || got.ID != ch.ID {
		t.Errorf("Lookup while Search lags = %+v %v %v, want %s", got, found, err, ch.ID)
	}
	if _, found, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "oncepay_b", CreatedAt: since}); found || err != nil {
		t.Errorf("Lookup of a key never used = %v %v, want not found", found, err)
	}

	fake.SetSearchLag(0)
	lists := fake.Counts().ListQueries
	if got, found, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "oncepay_a", CreatedAt: since}); err != nil || !found || got.ID != ch.ID {
		t.Errorf("Lookup with Search caught up = %+v %v %v", got, found, err)
	}
	if fake.Counts().ListQueries != lists {
		t.Errorf("Search found it, yet Lookup listed")
	}

	// A second PaymentIntent with the same oncepay_key (made by hand, say).
	fake.SetSearchLag(time.Hour)
	form := url.Values{"amount": {"300"}, "currency": {"eur"}, "confirm": {"true"}, "payment_method": {"pm_card_visa"}, "metadata[oncepay_key]": {"oncepay_a"}}
	req, _ := http.NewRequest("POST", fake.URL+"/v1/payment_intents", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Idempotency-Key", "by-hand")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, found, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "oncepay_a", CreatedAt: since}); err == nil {
		t.Errorf("Lookup with two PaymentIntents on one key = found %v, want an error", found)
	}
}

// A Stripe answer's code, decline_code and message are stored and shown
// (a 402's decline_code, a payment's failure_code) or logged: the secret
// key is redacted in each, as an answer that echoes the request may carry
// it.
func TestStripeAnswersRedactTheKey(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		status     int
	}{
		{"decline code", `{"error":{"type":"card_error","code":"card_declined","decline_code":"stolen_` + testKey + `","message":"Declined for ` + testKey + `."}}`, 402},
		{"code without a decline code", `{"error":{"type":"card_error","code":"expired_` + testKey + `","message":"Your card has expired."}}`, 402},
		{"invalid request code", `{"error":{"type":"invalid_request_error","code":"missing_` + testKey + `","message":"No such PaymentMethod"}}`, 400},
		{"code of an unknown outcome", `{"error":{"type":"api_error","code":"oops_` + testKey + `","message":"Something went wrong"}}`, 500},
		{"refund's failure reason", `{"id":"re_1","object":"refund","status":"failed","failure_reason":"lost_` + testKey + `","amount":100,"currency":"usd","created":1700000000}`, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fake := fakestripe.New(t, testKey)
			fake.SetFaults(fakestripe.Faults{Inject: func(*http.Request) (int, string, bool) { return tt.status, tt.body, true }})
			c := newClient(t, fake.URL, 0)
			var err error
			if strings.Contains(tt.body, `"object":"refund"`) {
				_, err = c.Refund(context.Background(), payment.ProviderRefundRequest{IdempotencyKey: "oncepay_re_k", ChargeID: "pi_1", Amount: 100, Currency: "USD"})
			} else {
				_, err = c.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: "oncepay_k", PaymentID: "pay_1", Amount: 100, Currency: "USD", Source: "pm_card_visa"})
			}
			if err == nil {
				t.Fatal("no error")
			}
			shown := err.Error()
			if d, ok := payment.IsDecline(err); ok {
				shown += " " + d.Code + " " + d.Message
				if !strings.Contains(d.Code, "[redacted]") {
					t.Errorf("decline code %q, want Stripe's code with the key redacted", d.Code)
				}
			}
			if strings.Contains(shown, testKey) {
				t.Errorf("%s carries the secret key", shown)
			}
		})
	}
}
