package sim_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

func TestWebhookSignature(t *testing.T) {
	secret := sim.NewWebhookSecret()
	now := time.Now()
	body := []byte(`{"type":"charge.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"id":"ch_1","idempotency_key":"k","payment_id":"pay_1","amount":100,"currency":"EUR","created_at":"2026-01-01T00:00:00Z"}}`)
	h, err := sim.SignWebhook(secret, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := sim.VerifyWebhook(secret, h, body, now)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != "msg_1" || ev.Kind != payment.EventSucceeded || ev.Charge.ID != "ch_1" || ev.PaymentID != "pay_1" {
		t.Errorf("event = %+v", ev)
	}
	stale, _ := sim.SignWebhook(secret, "msg_1", now.Add(-6*time.Minute), body)
	tampered := append([]byte{}, body...)
	tampered[len(tampered)-3] = '1'
	for name, tc := range map[string]struct {
		secret string
		h      http.Header
		body   []byte
	}{
		"wrong secret":  {sim.NewWebhookSecret(), h, body},
		"tampered body": {secret, h, tampered},
		"stale":         {secret, stale, body},
		"no signature":  {secret, http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": h["Webhook-Timestamp"]}, body},
	} {
		if _, err := sim.VerifyWebhook(tc.secret, tc.h, tc.body, now); !errors.Is(err, sim.ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", name, err)
		}
	}
}

// The sim delivers each event until it is accepted, backing off between
// tries, and the duplicate knob sends each delivery twice.
func TestWebhookRedelivery(t *testing.T) {
	secret := sim.NewWebhookSecret()
	var mu sync.Mutex
	received := map[string]int{}
	var refuse atomic.Int64
	refuse.Store(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := sim.VerifyWebhook(secret, r.Header, body, time.Now())
		if err != nil {
			t.Errorf("verify: %v", err)
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		received[ev.ID]++
		mu.Unlock()
		if refuse.Add(-1) >= 0 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	s := MustOpen(t)
	if err := s.SetWebhook(sim.WebhookConfig{URL: srv.URL, Secret: secret, FirstRetry: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k1", PaymentID: "pay_1", Amount: 100, Currency: "EUR", Source: "tok_visa"}); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, s, 1)
	mu.Lock()
	for id, n := range received {
		if n != 3 {
			t.Errorf("event %s received %d times, want 3 (two refused, one accepted)", id, n)
		}
	}
	mu.Unlock()

	if err := s.SetFaults(sim.Faults{WebhookDuplicate: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k2", PaymentID: "pay_2", Amount: 100, Currency: "EUR", Source: "tok_chargeDeclined"})
	if _, ok := payment.IsDecline(err); !ok {
		t.Fatalf("Charge = %v, want a decline", err)
	}
	waitDelivered(t, s, 2)
	delivered, _ := s.WebhookStats()
	twice := 0
	for _, n := range delivered {
		if n == 2 {
			twice++
		}
	}
	if twice != 1 {
		t.Errorf("delivered = %v, want the decline's event accepted twice", delivered)
	}
}

func waitDelivered(t *testing.T, s *sim.Sim, events int) {
	t.Helper()
	for range 500 {
		if d, _ := s.WebhookStats(); len(d) >= events {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d events delivered in 5s", events)
}
