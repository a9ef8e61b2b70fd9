package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
)

// oncepay is a real oncepay in demo mode: SQLite files in a temporary
// directory, the simulated provider, and HTTP over a loopback socket. It
// records every payment request it gets.
type oncepay struct {
	URL string
	Sim *sim.Sim

	mu       sync.Mutex
	requests map[string][]seen // by the "intent" metadata of the body
}

// seen is one request as it reached the server.
type seen struct {
	key  string // its Idempotency-Key
	body string
	at   time.Time
}

func newOncepay(t *testing.T, faults sim.Faults) *oncepay {
	t.Helper()
	e := oncepaytest.Open(t, oncepaytest.Options{Faults: faults})
	o := &oncepay{Sim: e.Sim, requests: map[string][]seen{}}
	srv := httptest.NewServer(o.record(server.New(server.Config{Payments: e.Service, Sim: e.Sim.Handler(), Log: e.Log})))
	o.URL = srv.URL
	t.Cleanup(srv.Close)
	return o
}

// record notes every POST /v1/payments (by the "intent" metadata) and every
// refund (as "refund of <amount>") before next serves it.
func (o *oncepay) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/refunds") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req client.RefundRequest
			json.Unmarshal(body, &req)
			o.mu.Lock()
			label := fmt.Sprintf("refund of %d", req.Amount)
			o.requests[label] = append(o.requests[label], seen{r.Header.Get("Idempotency-Key"), string(body), time.Now()})
			o.mu.Unlock()
		}
		if r.Method == http.MethodPost && r.URL.Path == "/v1/payments" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req client.PaymentRequest
			json.Unmarshal(body, &req)
			o.mu.Lock()
			label := req.Metadata["intent"]
			o.requests[label] = append(o.requests[label], seen{r.Header.Get("Idempotency-Key"), string(body), time.Now()})
			o.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (o *oncepay) seen(label string) []seen {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[label]
}

// charges is the simulated provider's ledger: what the bank saw.
func (o *oncepay) charges(t *testing.T) []payment.Charge {
	t.Helper()
	c, err := o.Sim.Charges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fast retries at once where the server allows, so tests wait only for
// the Retry-After the server sends.
var fast = client.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond, Attempts: 20}

func request(label, source string) client.PaymentRequest {
	return client.PaymentRequest{Amount: 1999, Currency: "EUR", Source: source, Description: "Order " + label,
		Metadata: map[string]string{"intent": label}}
}

// With the provider losing most answers, concurrent intents each end with
// exactly one charge, and every attempt of an intent carries its one key.
func TestPayUnderFaults(t *testing.T) {
	t.Parallel()
	o := newOncepay(t, sim.Faults{FailAfterCharge: 0.7, FailBeforeCharge: 0.2})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	const n = 20
	intents := make([]*client.Intent, n)
	payments := make([]*client.Payment, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		intents[i] = client.NewIntent(request(fmt.Sprint(i), "tok_visa"))
		wg.Go(func() { payments[i], errs[i] = c.Pay(context.Background(), intents[i]) })
	}
	wg.Wait()

	byKey := map[string][]payment.Charge{}
	for _, ch := range o.charges(t) {
		byKey[ch.IdempotencyKey] = append(byKey[ch.IdempotencyKey], ch)
	}
	attempts := 0
	for i, in := range intents {
		if errs[i] != nil {
			t.Errorf("intent %d: Pay: %v", i, errs[i])
			continue
		}
		charges := byKey[payment.DownstreamKey(server.DemoScope, in.Key())]
		if len(charges) != 1 {
			t.Errorf("intent %d: %d charges in the ledger, want 1", i, len(charges))
		} else if payments[i].ChargeID != charges[0].ID || payments[i].Status != "succeeded" {
			t.Errorf("intent %d: payment %s charge %s, want succeeded with the ledger's %s", i, payments[i].Status, payments[i].ChargeID, charges[0].ID)
		}
		reqs := o.seen(fmt.Sprint(i))
		attempts += len(reqs)
		for j, r := range reqs {
			if r.key != in.Key() || r.body != reqs[0].body {
				t.Errorf("intent %d attempt %d: key %q body %s, want the intent's key %q and the first body %s", i, j, r.key, r.body, in.Key(), reqs[0].body)
			}
		}
	}
	if len(byKey) != n {
		t.Errorf("ledger has charges under %d keys, want %d", len(byKey), n)
	}
	if attempts <= n {
		t.Errorf("%d requests for %d intents: the faults forced no retry", attempts, n)
	}
	t.Logf("%d requests for %d intents", attempts, n)
}

// A 503's Retry-After is the least the client waits before the retry.
func TestPayHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		first := len(times) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"type":%q,"title":"Payment outcome unknown","status":503}`, client.ProblemOutcomeUnknown)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_1","object":"payment","status":"succeeded","amount":1999,"currency":"EUR","idempotency_key":%q,"created_at":"2026-11-30T03:13:36.694Z"}`,
			r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, Backoff: fast}
	intent := client.NewIntent(request("ra", "tok_visa"))
	p, err := c.Pay(context.Background(), intent)
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	if p.ID != "pay_1" || p.IdempotencyKey != intent.Key() {
		t.Errorf("payment = %+v, want pay_1 under the intent's key", p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 2 {
		t.Fatalf("%d requests, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Errorf("retried after %v, want at least the Retry-After of 1s", gap)
	}
}

// A decline is final: one request, and the error says why and which payment.
func TestPayStopsOnDecline(t *testing.T) {
	o := newOncepay(t, sim.Faults{})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	_, err := c.Pay(context.Background(), client.NewIntent(request("declined", "tok_chargeDeclined")))
	var e *client.Error
	if !client.IsDeclined(err) || !errors.As(err, &e) {
		t.Fatalf("Pay = %v, want a decline", err)
	}
	if e.Status != 402 || e.DeclineCode != "card_declined" || !strings.HasPrefix(e.PaymentID, "pay_") {
		t.Errorf("error = %+v, want 402 card_declined with a payment id", e)
	}
	if client.IsRetryable(err) {
		t.Error("IsRetryable(decline) = true, want false")
	}
	if n := len(o.seen("declined")); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if n := len(o.charges(t)); n != 0 {
		t.Errorf("ledger has %d charges, want 0", n)
	}
}

// A key already used for another payment is final: one request, no charge.
// The same key with the same request, as after a restart, is the stored
// payment.
func TestResumeIntent(t *testing.T) {
	o := newOncepay(t, sim.Faults{})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	first := client.NewIntent(request("first", "tok_visa"))
	paid, err := c.Pay(context.Background(), first)
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}

	again, err := c.Pay(context.Background(), client.ResumeIntent(first.Key(), first.Request()))
	if err != nil || again.ID != paid.ID || !again.Replayed {
		t.Errorf("resumed Pay = %+v, %v; want the replay of %s", again, err, paid.ID)
	}

	other := request("other", "tok_visa")
	other.Amount = 5000
	_, err = c.Pay(context.Background(), client.ResumeIntent(first.Key(), other))
	if !client.IsKeyReused(err) || client.IsRetryable(err) {
		t.Fatalf("Pay with the key of another payment = %v, want final key reused", err)
	}
	if n := len(o.seen("other")); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
	if n := len(o.charges(t)); n != 1 {
		t.Errorf("ledger has %d charges, want 1", n)
	}

	got, err := c.Get(context.Background(), paid.ID)
	if err != nil || got.ChargeID != paid.ChargeID || got.Metadata["intent"] != "first" {
		t.Errorf("Get = %+v, %v; want %+v", got, err, paid)
	}
	_, err = c.Get(context.Background(), "pay_NOPE")
	if e := (*client.Error)(nil); !errors.As(err, &e) || e.Status != 404 || e.Type != client.ProblemNotFound {
		t.Errorf("Get of an unknown id = %v, want 404 not found", err)
	}
}

// A dropped connection is retried with the same key and the same body.
func TestPayRetriesNetworkErrors(t *testing.T) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{key: r.Header.Get("Idempotency-Key"), body: string(body)})
		n := len(got)
		mu.Unlock()
		if n <= 2 { // the answer is lost on the way back
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":"pay_1","object":"payment","status":"succeeded","amount":1999,"currency":"EUR","created_at":"2026-11-30T03:13:36.694Z"}`)
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, Backoff: fast}
	intent := client.NewIntent(request("net", "tok_visa"))
	if _, err := c.Pay(context.Background(), intent); err != nil {
		t.Fatalf("Pay: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("%d requests, want 3", len(got))
	}
	for i, r := range got {
		if r.key != intent.Key() || r.body != got[0].body {
			t.Errorf("attempt %d: key %q body %s, want %q and %s", i, r.key, r.body, intent.Key(), got[0].body)
		}
	}
}

// When the attempts run out before a final answer, the error says the
// outcome is unknown and carries the last problem.
func TestPayGivesUp(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"type":%q,"title":"Service unavailable","status":503}`, client.ProblemUnavailable)
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, Backoff: client.Backoff{Base: time.Millisecond, Attempts: 3}}
	_, err := c.Pay(context.Background(), client.NewIntent(request("down", "tok_visa")))
	var e *client.Error
	if !client.IsRetryable(err) || !errors.As(err, &e) || e.Type != client.ProblemUnavailable {
		t.Errorf("Pay = %v, want a retryable service-unavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 3 {
		t.Errorf("%d requests, want 3", requests)
	}
}

// Keys are fresh UUIDv4s, and the intent keeps its own copy of the request.
func TestNewIntent(t *testing.T) {
	req := request("k", "tok_visa")
	a, b := client.NewIntent(req), client.NewIntent(req)
	if a.Key() == b.Key() {
		t.Errorf("two intents share the key %s", a.Key())
	}
	if len(a.Key()) != 36 || a.Key()[14] != '4' || !strings.Contains("89ab", a.Key()[19:20]) {
		t.Errorf("key %s is not a UUIDv4", a.Key())
	}
	req.Metadata["intent"] = "changed"
	if got := a.Request().Metadata["intent"]; got != "k" {
		t.Errorf("intent's metadata = %q after the caller's map changed, want %q", got, "k")
	}
}

// An invalid request is final, and the error names the field at fault, so
// a caller can point at it.
func TestPayNamesTheInvalidParam(t *testing.T) {
	o := newOncepay(t, sim.Faults{})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	req := request("long", "tok_visa")
	req.Metadata["note"] = strings.Repeat("x", payment.MaxMetadataValueLen+1)
	_, err := c.Pay(context.Background(), client.NewIntent(req))
	var e *client.Error
	if !errors.As(err, &e) || e.Type != client.ProblemInvalidRequest || e.Param != "metadata[note]" {
		t.Fatalf("Pay = %v (%+v), want invalid-request with param metadata[note]", err, e)
	}
	if !strings.Contains(e.Error(), "metadata[note]") {
		t.Errorf("Error() = %q, want it to name the param", e.Error())
	}
	if client.IsRetryable(err) {
		t.Error("IsRetryable(invalid request) = true, want false")
	}
}
