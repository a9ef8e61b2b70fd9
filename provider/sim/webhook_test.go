package sim_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
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
		// Every copy of a delivery is counted before the delivery ends:
		// the count alone can be read between a duplicate's two copies.
		if d, _ := s.WebhookStats(); len(d) >= events && s.WebhooksInFlight() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d events delivered in 5s", events)
}

// A secret is taken as the Standard Webhooks libraries take it: the
// "whsec_" prefix optional, the base64 padded or not, a key of any length
// but none. Every form of one key signs as that key's HMAC.
func TestWebhookSecretForms(t *testing.T) {
	key := []byte("a key of 23 bytes, odd.") // base64 with one "=" of padding
	short := []byte("8 bytes!")
	padded := base64.StdEncoding.EncodeToString(key)
	unpadded := base64.RawStdEncoding.EncodeToString(key)
	if padded == unpadded {
		t.Fatal("the key's base64 has no padding to leave out")
	}
	now := time.Now()
	body := []byte(`{"type":"charge.succeeded"}`)
	for _, tt := range []struct {
		name, secret string
		key          []byte
		short        bool
	}{
		{"whsec_ and padded", "whsec_" + padded, key, false},
		{"no prefix", padded, key, false},
		{"unpadded", "whsec_" + unpadded, key, false},
		{"no prefix, unpadded", unpadded, key, false},
		{"short key", "whsec_" + base64.StdEncoding.EncodeToString(short), short, true},
	} {
		if err := sim.CheckWebhookSecret(tt.secret); err != nil {
			t.Errorf("%s: CheckWebhookSecret(%q) = %v, want nil", tt.name, tt.secret, err)
			continue
		}
		if got := sim.ShortWebhookSecret(tt.secret); got != tt.short {
			t.Errorf("%s: ShortWebhookSecret = %v, want %v", tt.name, got, tt.short)
		}
		h, err := sim.SignWebhook(tt.secret, "msg_1", now, body)
		if err != nil {
			t.Fatalf("%s: SignWebhook: %v", tt.name, err)
		}
		m := hmac.New(sha256.New, tt.key)
		fmt.Fprintf(m, "msg_1.%d.%s", now.Unix(), body)
		if want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil)); h.Get("webhook-signature") != want {
			t.Errorf("%s: signature %s, want %s (the HMAC with the key itself)", tt.name, h.Get("webhook-signature"), want)
		}
		if _, err := sim.VerifyWebhook("whsec_"+base64.StdEncoding.EncodeToString(tt.key), h, body, now); err != nil {
			t.Errorf("%s: the canonical form of the key does not verify its signature: %v", tt.name, err)
		}
	}
	for _, secret := range []string{"", "whsec_", "whsec_not base64!", "whsec_=="} {
		if err := sim.CheckWebhookSecret(secret); err == nil {
			t.Errorf("CheckWebhookSecret(%q) = nil, want an error", secret)
		}
	}
}
