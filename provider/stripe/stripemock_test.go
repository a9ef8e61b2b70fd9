package stripe_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// stripeMock starts stripe-mock (scripts/test.sh installs it) on loopback
// ports it picks itself and returns its HTTP URL. Under CI a missing
// stripe-mock fails the test; elsewhere it skips.
func stripeMock(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		bin = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "stripe-mock")
		if _, err := os.Stat(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatal("stripe-mock is not installed (scripts/test.sh installs it)")
			}
			t.Skip("stripe-mock is not installed; scripts/test.sh installs it")
		}
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-mock did not say where it listens")
		return ""
	}
}

// recorded is one request the proxy passed to stripe-mock, and its answer.
type recorded struct {
	method, path   string
	idempotencyKey string
	form           url.Values
	status         int
}

// recorder sits between the client and stripe-mock and keeps every request.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (rec *recorder) proxy(t *testing.T, target string) string {
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		rec.mu.Lock() // the client makes one call at a time
		rec.reqs[len(rec.reqs)-1].status = resp.StatusCode
		rec.mu.Unlock()
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if r.Method == "GET" {
			form = r.URL.Query()
		}
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{method: r.Method, path: r.URL.Path, idempotencyKey: r.Header.Get("Idempotency-Key"), form: form})
		rec.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (rec *recorder) take() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := rec.reqs
	rec.reqs = nil
	return r
}

// Against stripe-mock, which validates every request against Stripe's
// OpenAPI spec: each create carries the Idempotency-Key header and the
// metadata, stripe-mock accepts the parameters, and its answers decode.
func TestStripeMock(t *testing.T) {
	rec := &recorder{}
	c := newClient(t, rec.proxy(t, stripeMock(t)), 0)
	ctx := context.Background()
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check = %v", err)
	}
	rec.take()

	for _, source := range []string{"pm_card_visa", "tok_visa"} {
		t.Run(source, func(t *testing.T) {
			dk := payment.DownstreamKey("m", source)
			_, err := c.Charge(ctx, payment.ChargeRequest{IdempotencyKey: dk, PaymentID: "pay_X1", Amount: 1999,
				Currency: "USD", Source: source, Description: "Order 7"})
			// stripe-mock answers a fixed PaymentIntent whose status is
			// requires_payment_method: oncepay must decode it and call the
			// outcome unknown, never a success or a decline.
			if err == nil || !strings.Contains(err.Error(), "PaymentIntent pi_") {
				t.Fatalf("Charge = %v, want stripe-mock's PaymentIntent decoded and found not succeeded", err)
			}
			if _, declined := payment.IsDecline(err); declined || errors.Is(err, payment.ErrProviderKeyReused) {
				t.Errorf("Charge = %v, want an unknown outcome", err)
			}
			reqs := rec.take()
			var pi *recorded
			for i, r := range reqs {
				if r.status != 200 {
					t.Errorf("%s %s: stripe-mock answered %d", r.method, r.path, r.status)
				}
				if r.method == "POST" && r.idempotencyKey == "" {
					t.Errorf("POST %s without an Idempotency-Key", r.path)
				}
				if r.path == "/v1/payment_intents" {
					pi = &reqs[i]
				}
			}
			if source == "tok_visa" {
				if len(reqs) != 2 || reqs[0].path != "/v1/payment_methods" || reqs[0].form.Get("card[token]") != "tok_visa" || reqs[0].idempotencyKey != dk+"_pm" {
					t.Errorf("requests %+v, want a PaymentMethod made from the token under %s_pm first", reqs, dk)
				}
			} else if len(reqs) != 1 {
				t.Errorf("%d requests, want 1", len(reqs))
			}
			if pi == nil {
				t.Fatal("no PaymentIntent create")
			}
			want := map[string]string{
				"amount": "1999", "currency": "usd", "confirm": "true", "description": "Order 7",
				"metadata[oncepay_key]": dk, "metadata[oncepay_payment]": "pay_X1",
				"automatic_payment_methods[enabled]": "true", "automatic_payment_methods[allow_redirects]": "never",
				"error_on_requires_action": "true",
			}
			for k, v := range want {
				if got := pi.form.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if pi.idempotencyKey != dk {
				t.Errorf("Idempotency-Key = %q, want %q", pi.idempotencyKey, dk)
			}
			if source == "pm_card_visa" && pi.form.Get("payment_method") != "pm_card_visa" {
				t.Errorf("payment_method = %q, want pm_card_visa", pi.form.Get("payment_method"))
			}
		})
	}

	// Lookup: Search and the list both decode; stripe-mock's fixtures carry
	// no oncepay_key, so the answer is a definite "not found".
	_, found, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: payment.DownstreamKey("m", "x"), CreatedAt: time.Now()})
	if err != nil || found {
		t.Errorf("Lookup = %v %v, want not found", found, err)
	}
	var sawSearch, sawList bool
	for _, r := range rec.take() {
		if r.status != 200 {
			t.Errorf("%s %s: stripe-mock answered %d", r.method, r.path, r.status)
		}
		switch r.path {
		case "/v1/payment_intents/search":
			sawSearch = strings.Contains(r.form.Get("query"), "metadata['oncepay_key']")
		case "/v1/payment_intents":
			sawList = r.form.Get("created[gte]") != ""
		}
	}
	if !sawSearch || !sawList {
		t.Errorf("search %v, list by created %v: want both", sawSearch, sawList)
	}
}

// Against stripe-mock: a Refund's create carries the Idempotency-Key header
// and the documented parameters (payment_intent, amount, reason, oncepay's
// metadata), stripe-mock accepts them, and its answers decode; the lookup
// lists the PaymentIntent's refunds, whose fixtures carry no oncepay_key.
func TestStripeMockRefund(t *testing.T) {
	rec := &recorder{}
	c := newClient(t, rec.proxy(t, stripeMock(t)), 0)
	ctx := context.Background()
	dk := payment.RefundDownstreamKey("m", "refund-1")
	r, err := c.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: dk, RefundID: "re_X1", PaymentID: "pay_X1",
		ChargeID: "pi_X1", Amount: 500, Currency: "USD", Reason: "requested_by_customer"})
	if err != nil {
		t.Fatalf("Refund = %v, want stripe-mock's refund decoded", err)
	}
	if !strings.HasPrefix(r.ID, "re_") || r.IdempotencyKey != dk || r.ChargeID != "pi_X1" || r.Currency != strings.ToUpper(r.Currency) {
		t.Errorf("Refund = %+v, want a re_ refund under %s of pi_X1, currency upper case", r, dk)
	}
	reqs := rec.take()
	if len(reqs) != 1 || reqs[0].method != "POST" || reqs[0].path != "/v1/refunds" {
		t.Fatalf("requests %+v, want one POST /v1/refunds", reqs)
	}
	if reqs[0].status != 200 {
		t.Errorf("POST /v1/refunds: stripe-mock answered %d", reqs[0].status)
	}
	if reqs[0].idempotencyKey != dk {
		t.Errorf("Idempotency-Key = %q, want %q", reqs[0].idempotencyKey, dk)
	}
	want := map[string]string{
		"payment_intent": "pi_X1", "amount": "500", "reason": "requested_by_customer",
		"metadata[oncepay_key]": dk, "metadata[oncepay_refund]": "re_X1", "metadata[oncepay_payment]": "pay_X1",
	}
	for k, v := range want {
		if got := reqs[0].form.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	_, found, err := c.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: dk, ChargeID: "pi_X1", CreatedAt: time.Now()})
	if err != nil || found {
		t.Errorf("LookupRefund = %v %v, want not found", found, err)
	}
	reqs = rec.take()
	if len(reqs) == 0 {
		t.Fatal("LookupRefund made no request")
	}
	for _, r := range reqs {
		if r.status != 200 || r.method != "GET" || r.path != "/v1/refunds" || r.form.Get("payment_intent") != "pi_X1" {
			t.Errorf("%s %s?%s: %d, want GET /v1/refunds?payment_intent=pi_X1 answered 200", r.method, r.path, r.form.Encode(), r.status)
		}
	}
}
