package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
)

// paid makes a succeeded payment of 1999 and returns it.
func paid(t *testing.T, c *client.Client) *client.Payment {
	t.Helper()
	p, err := c.Pay(context.Background(), client.NewIntent(request("paid", "tok_visa")))
	if err != nil {
		t.Fatalf("Pay: %v", err)
	}
	return p
}

// With the provider losing most answers, concurrent refund intents of one
// payment, each refunded by two callers at once, each end with exactly one
// provider refund; every attempt of an intent carries its one key and body.
func TestRefundUnderFaults(t *testing.T) {
	t.Parallel()
	o := newOncepay(t, sim.Faults{})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	p := paid(t, c)
	if err := o.Sim.SetFaults(sim.Faults{FailAfterCharge: 0.7, FailBeforeCharge: 0.2}); err != nil {
		t.Fatal(err)
	}
	amounts := []int64{100, 200, 300}
	intents := make([]*client.RefundIntent, len(amounts))
	refunds := make([][2]*client.Refund, len(amounts))
	errs := make([][2]error, len(amounts))
	var wg sync.WaitGroup
	for i, amount := range amounts {
		intents[i] = client.NewRefundIntent(p.ID, client.RefundRequest{Amount: amount, Reason: "requested_by_customer"})
		for j := range 2 {
			wg.Go(func() { refunds[i][j], errs[i][j] = c.Refund(context.Background(), intents[i]) })
		}
	}
	wg.Wait()
	o.Sim.SetFaults(sim.Faults{})

	provider, err := o.Sim.Refunds(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]payment.ProviderRefund{}
	for _, r := range provider {
		byKey[r.IdempotencyKey] = append(byKey[r.IdempotencyKey], r)
	}
	attempts := 0
	for i, in := range intents {
		made := byKey[payment.RefundDownstreamKey(server.DemoScope, in.Key())]
		if len(made) != 1 {
			t.Errorf("refund %d: %d provider refunds, want 1", i, len(made))
			continue
		}
		for j := range 2 {
			r := refunds[i][j]
			if errs[i][j] != nil {
				t.Errorf("refund %d caller %d: %v", i, j, errs[i][j])
			} else if r.Status != "succeeded" || r.ProviderRefundID != made[0].ID || r.Amount != amounts[i] || r.PaymentID != p.ID || r.IdempotencyKey != in.Key() {
				t.Errorf("refund %d caller %d = %+v, want succeeded, %d of %s under its key, the provider's %s", i, j, r, amounts[i], p.ID, made[0].ID)
			}
		}
		reqs := o.seen(fmt.Sprintf("refund of %d", amounts[i]))
		attempts += len(reqs)
		for k, r := range reqs {
			if r.key != in.Key() || r.body != reqs[0].body {
				t.Errorf("refund %d attempt %d: key %q body %s, want the intent's key %q and the first body %s", i, k, r.key, r.body, in.Key(), reqs[0].body)
			}
		}
	}
	if attempts <= 2*len(amounts) {
		t.Errorf("%d requests for %d refund calls: the faults forced no retry", attempts, 2*len(amounts))
	}
	got, err := c.Get(context.Background(), p.ID)
	if err != nil || got.AmountRefunded != 600 || len(got.Refunds) != 3 {
		t.Errorf("Get = %+v, %v; want 600 refunded in 3 refunds", got, err)
	}
	t.Logf("%d requests for %d refund calls", attempts, 2*len(amounts))
}

// A 503's Retry-After is the least the client waits before retrying a
// refund, with the same key.
func TestRefundHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{key: r.Header.Get("Idempotency-Key"), at: time.Now()})
		first := len(got) == 1
		mu.Unlock()
		if r.URL.Path != "/v1/payments/pay_1/refunds" {
			http.NotFound(w, r)
			return
		}
		if first {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"type":%q,"title":"Payment outcome unknown","status":503}`, client.ProblemOutcomeUnknown)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"re_1","object":"refund","payment_id":"pay_1","status":"succeeded","amount":500,"currency":"EUR","idempotency_key":%q,"created_at":"2026-11-30T03:13:36.694Z"}`,
			r.Header.Get("Idempotency-Key"))
	}))
	defer srv.Close()
	c := &client.Client{BaseURL: srv.URL, Backoff: fast}
	intent := client.NewRefundIntent("pay_1", client.RefundRequest{Amount: 500})
	r, err := c.Refund(context.Background(), intent)
	if err != nil {
		t.Fatalf("Refund: %v", err)
	}
	if r.ID != "re_1" || r.Amount != 500 || r.IdempotencyKey != intent.Key() {
		t.Errorf("refund = %+v, want re_1 of 500 under the intent's key", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0].key != intent.Key() || got[1].key != intent.Key() {
		t.Fatalf("requests %+v, want 2 under the intent's key", got)
	}
	if gap := got[1].at.Sub(got[0].at); gap < time.Second {
		t.Errorf("retried after %v, want at least the Retry-After of 1s", gap)
	}
}

// A final 4xx stops the retries at once: more than is left, and a key
// resumed with another request. Nothing reaches the provider; the refund
// made before is replayed to its own key.
func TestRefundStopsOnFinal4xx(t *testing.T) {
	o := newOncepay(t, sim.Faults{})
	c := &client.Client{BaseURL: o.URL, Backoff: fast}
	p := paid(t, c)
	first := client.NewRefundIntent(p.ID, client.RefundRequest{Amount: 1500})
	if _, err := c.Refund(context.Background(), first); err != nil {
		t.Fatalf("Refund: %v", err)
	}
	for _, tt := range []struct {
		name, label, problem string
		status               int
		intent               *client.RefundIntent
	}{
		{"more than is left", "refund of 600", client.ProblemRefundExceeds, 409,
			client.NewRefundIntent(p.ID, client.RefundRequest{Amount: 600})},
		{"key reused", "refund of 400", client.ProblemKeyReused, 409,
			client.ResumeRefundIntent(first.Key(), p.ID, client.RefundRequest{Amount: 400})},
		{"payment unknown", "refund of 1", client.ProblemNotFound, 404,
			client.NewRefundIntent("pay_none", client.RefundRequest{Amount: 1})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Refund(context.Background(), tt.intent)
			var e *client.Error
			if !errors.As(err, &e) || e.Type != tt.problem || e.Status != tt.status || client.IsRetryable(err) {
				t.Fatalf("Refund = %v, want a final %d %s", err, tt.status, tt.problem)
			}
			if n := len(o.seen(tt.label)); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
	again, err := c.Refund(context.Background(), client.ResumeRefundIntent(first.Key(), p.ID, client.RefundRequest{Amount: 1500}))
	if err != nil || !again.Replayed || again.Amount != 1500 {
		t.Errorf("Refund resumed = %+v, %v; want the first refund, replayed", again, err)
	}
	if rs, _ := o.Sim.Refunds(context.Background()); len(rs) != 1 {
		t.Errorf("provider refunds = %d, want 1", len(rs))
	}
}

// The client's problem types are the OpenAPI document's: each one it names
// is in the ProblemType enum, so a caller branching on one can get it.
func TestProblemTypesAreTheContract(t *testing.T) {
	f, err := os.Open("../web/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	documented := map[string]bool{}
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "ProblemType:":
			in = true
		case in && strings.HasPrefix(strings.TrimSpace(line), "- /problems/"):
			documented[strings.TrimPrefix(strings.TrimSpace(line), "- ")] = true
		case in && len(documented) > 0:
			in = false
		}
	}
	for _, typ := range []string{
		client.ProblemInvalidRequest, client.ProblemInvalidKey, client.ProblemUnauthorized, client.ProblemNotFound,
		client.ProblemMethodNotAllowed, client.ProblemKeyReused, client.ProblemKeyExpired, client.ProblemInProgress,
		client.ProblemDeclined, client.ProblemNotCompleted, client.ProblemOutcomeUnknown, client.ProblemUnavailable,
		client.ProblemTooLarge, client.ProblemUnsupportedMedia, client.ProblemUnsupportedEncoding, client.ProblemCrossOrigin,
		client.ProblemTooManyRequests, client.ProblemInternal, client.ProblemNotRefundable, client.ProblemRefundExceeds,
		client.ProblemRefundDeclined, client.ProblemRefundNotCompleted,
	} {
		if !documented[typ] {
			t.Errorf("%s is not in the OpenAPI document's ProblemType enum (%d types)", typ, len(documented))
		}
	}
}
