package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/internal/oncepaytest"
	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// VerifyEvent accepts the deliveries the Standard Webhooks reference
// library accepts and refuses those it refuses: one as signed, and every
// way of spoiling it (body, id or timestamp changed, signed too long ago
// or ahead, by another secret, another version, cut short, a header
// missing). It refuses one more: an event whose id is not its webhook-id.
func TestVerifyEventAgreesWithTheReferenceLibrary(t *testing.T) {
	secret, other := payment.NewEndpointSecret(), payment.NewEndpointSecret()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	whOther, _ := standardwebhooks.NewWebhook(other)
	const id = "evt_HOOR9KF6B7PSGO5V3ORKP2FALP"
	body := []byte(`{"id":"` + id + `","object":"event","type":"payment.succeeded","created":1796040000,"data":{"object":{"id":"pay_1","object":"payment","status":"succeeded"}}}`)
	now := time.Now()
	sign := func(w *standardwebhooks.Webhook, id string, at time.Time, b []byte) string {
		sig, err := w.Sign(id, at, b)
		if err != nil {
			t.Fatal(err)
		}
		return sig
	}
	header := func(id, ts, sig string) http.Header {
		h := http.Header{}
		for name, v := range map[string]string{client.HeaderWebhookID: id, client.HeaderWebhookTimestamp: ts, client.HeaderWebhookSignature: sig} {
			if v != "" {
				h.Set(name, v)
			}
		}
		return h
	}
	unix := func(at time.Time) string { return strconv.FormatInt(at.Unix(), 10) }
	good := sign(wh, id, now, body)
	tampered := append([]byte{}, body...)
	tampered[len(tampered)-3] = 'X'
	otherID := []byte(strings.Replace(string(body), id, "evt_OTHER", 1))

	for _, c := range []struct {
		name    string
		h       http.Header
		body    []byte
		want    bool // client.VerifyEvent accepts it
		refWant bool // the reference library accepts it
	}{
		{"as signed", header(id, unix(now), good), body, true, true},
		{"body changed", header(id, unix(now), good), tampered, false, false},
		{"webhook-id changed", header("evt_OTHER", unix(now), good), body, false, false},
		{"webhook-timestamp changed", header(id, unix(now.Add(time.Second)), good), body, false, false},
		{"signed 4 minutes ago", header(id, unix(now.Add(-4*time.Minute)), sign(wh, id, now.Add(-4*time.Minute), body)), body, true, true},
		{"signed 6 minutes ago", header(id, unix(now.Add(-6*time.Minute)), sign(wh, id, now.Add(-6*time.Minute), body)), body, false, false},
		{"signed 4 minutes ahead", header(id, unix(now.Add(4*time.Minute)), sign(wh, id, now.Add(4*time.Minute), body)), body, true, true},
		{"signed 6 minutes ahead", header(id, unix(now.Add(6*time.Minute)), sign(wh, id, now.Add(6*time.Minute), body)), body, false, false},
		{"another secret", header(id, unix(now), sign(whOther, id, now, body)), body, false, false},
		{"rotation: another secret's, then ours", header(id, unix(now), sign(whOther, id, now, body)+" "+good), body, true, true},
		{"another version", header(id, unix(now), "v2,"+strings.TrimPrefix(good, "v1,")), body, false, false},
		{"cut short", header(id, unix(now), good[:len(good)-4]), body, false, false},
		{"no signature", header(id, unix(now), ""), body, false, false},
		{"no id", header("", unix(now), good), body, false, false},
		{"no timestamp", header(id, "", good), body, false, false},
		{"timestamp not a number", header(id, "soon", good), body, false, false},
		{"an event whose id is not its webhook-id", header(id, unix(now), sign(wh, id, now, otherID)), otherID, false, true},
	} {
		ev, err := client.VerifyEvent(secret, c.h, c.body)
		if got := err == nil; got != c.want {
			t.Errorf("%s: VerifyEvent = %v, want accepted %v", c.name, err, c.want)
		}
		if err != nil && !errors.Is(err, client.ErrEventNotVerified) {
			t.Errorf("%s: the error %v is not ErrEventNotVerified", c.name, err)
		}
		if err == nil && (ev.ID != id || ev.Type != client.EventPaymentSucceeded) {
			t.Errorf("%s: the event = %+v, want %s payment.succeeded", c.name, ev, id)
		}
		if got := wh.Verify(c.body, c.h) == nil; got != c.refWant {
			t.Errorf("%s: the reference library accepted %v, want %v", c.name, got, c.refWant)
		}
	}
	// An EventVerifier's clock and tolerance are its own.
	v := client.EventVerifier{Secrets: []string{other, secret}, Tolerance: time.Hour, Now: func() time.Time { return now.Add(50 * time.Minute) }}
	if _, err := v.Verify(header(id, unix(now), good), body); err != nil {
		t.Errorf("EventVerifier with an hour's tolerance, 50 minutes on = %v, want accepted", err)
	}
}

// A real delivery: oncepay's deliverer sends a payment's event to an
// endpoint that verifies it with VerifyEvent, and it is the event oncepay
// holds; during a rotation of the secret, either secret verifies it.
func TestVerifyEventOfARealDelivery(t *testing.T) {
	ctx := context.Background()
	e := oncepaytest.Open(t, oncepaytest.Options{})
	m, err := e.DB.CreateMerchant(ctx, "Shop", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		secrets  []string // the secrets each delivery is verified with
		verified []*client.Event
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		for _, s := range secrets {
			ev, err := client.VerifyEvent(s, r.Header, body)
			if err != nil {
				t.Errorf("VerifyEvent with %s...: %v", s[:10], err)
				http.Error(w, "bad signature", http.StatusUnauthorized)
				return
			}
			verified = append(verified, ev)
		}
	}))
	t.Cleanup(hook.Close)
	ep, err := payment.NewEndpoint(m.ID, hook.URL, nil, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DB.CreateEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	dlv, err := payment.NewDeliverer(payment.Deliverer{Store: e.DB, Sender: outbound.New(outbound.Options{AllowInsecure: true})})
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(key string, with ...string) {
		t.Helper()
		mu.Lock()
		secrets, verified = with, nil
		mu.Unlock()
		res, err := e.Service.Pay(ctx, m.ID, key, payment.Request{Amount: 1999, Currency: "EUR", Source: "tok_visa"})
		if err != nil {
			t.Fatal(err)
		}
		var p client.Payment
		if err := json.Unmarshal(res.Body, &p); err != nil {
			t.Fatal(err)
		}
		if res, err := dlv.RunOnce(ctx); err != nil || res.Delivered != 1 {
			t.Fatalf("RunOnce = %+v, %v, want 1 delivered", res, err)
		}
		held, err := e.DB.OutboxEvents(ctx, payment.OutboxFilter{Scope: m.ID, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(verified) != len(with) {
			t.Fatalf("verified %d times, want %d", len(verified), len(with))
		}
		for _, ev := range verified {
			got, err := ev.Payment()
			if ev.ID != held[0].ID || err != nil || got.ID != p.ID || got.Status != client.StatusSucceeded {
				t.Errorf("verified %s about %+v (%v), want %s about %s, succeeded", ev.ID, got, err, held[0].ID, p.ID)
			}
		}
	}
	deliver("before", ep.Secret)
	rotated := payment.NewEndpointSecret()
	if err := e.DB.RotateEndpointSecret(ctx, ep.ID, rotated, time.Now().Add(payment.SecretPreviousFor)); err != nil {
		t.Fatal(err)
	}
	deliver("during", rotated, ep.Secret)
}
