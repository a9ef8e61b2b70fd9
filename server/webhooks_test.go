package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// simEvent is the simulated provider's charge.succeeded body for c.
func simEvent(a *payment.Attempt, c payment.Charge) []byte {
	return fmt.Appendf(nil, `{"type":"charge.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"idempotency_key":%q,"payment_id":%q,"amount":%d,"currency":%q,"created_at":"2026-01-01T00:00:00Z"}}`,
		c.ID, payment.DownstreamKey(a.Scope, a.Key), a.ID, c.Amount, c.Currency)
}

// webhook posts body to /v1/webhooks/sim signed as event id at ts.
func (e *env) webhook(id string, ts time.Time, secret string, body []byte) response {
	e.t.Helper()
	h, err := sim.SignWebhook(secret, id, ts, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.do("POST", "/v1/webhooks/sim", body, "webhook-id", h.Get("webhook-id"),
		"webhook-timestamp", h.Get("webhook-timestamp"), "webhook-signature", h.Get("webhook-signature"), "Content-Type", "application/json")
}

// stuck pays under key with the answer lost: in progress, lease released,
// and charged in the ledger.
func (e *env) stuck(key string) (*payment.Attempt, payment.Charge) {
	e.t.Helper()
	e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
	r := e.pay(key, visa)
	e.Sim.SetFaults(sim.Faults{})
	if r.Status != 503 {
		e.t.Fatalf("pay = %d %s, want 503", r.Status, r.Body)
	}
	a, err := e.DB.Attempt(context.Background(), "demo", key)
	if err != nil {
		e.t.Fatal(err)
	}
	charges := e.ledger()[payment.DownstreamKey("demo", key)]
	if len(charges) != 1 {
		e.t.Fatalf("ledger has %d charges under the key, want 1", len(charges))
	}
	return a, charges[0]
}

// stripeIntentEvent is Stripe's event id of type typ about a PaymentIntent
// naming a's payment and downstream key, as a Stripe-signed delivery
// carries it: one that failed, or one that succeeded as charge ch.
func stripeIntentEvent(id, typ string, a *payment.Attempt, ch string) []byte {
	intent := fmt.Sprintf(`{"id":%q,"object":"payment_intent","amount":%d,"currency":%q,"status":"succeeded","created":1700000000,
		"metadata":{"oncepay_key":%q,"oncepay_payment":%q}}`, ch, a.Amount, strings.ToLower(a.Currency), payment.DownstreamKey(a.Scope, a.Key), a.ID)
	if typ == "payment_intent.payment_failed" {
		intent = fmt.Sprintf(`{"id":"pi_declined","object":"payment_intent","amount":%d,"currency":%q,"status":"requires_payment_method","created":1700000000,
		"metadata":{"oncepay_key":%q,"oncepay_payment":%q},
		"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`,
			a.Amount, strings.ToLower(a.Currency), payment.DownstreamKey(a.Scope, a.Key), a.ID)
	}
	return fmt.Appendf(nil, `{"id":%q,"object":"event","api_version":"2024-06-20","created":1700000000,"livemode":false,
		"pending_webhooks":1,"type":%q,"data":{"object":%s}}`, id, typ, intent)
}

// stripeWebhook posts body to /v1/webhooks/stripe signed with Stripe's
// secret, now.
func (e *env) stripeWebhook(body []byte) response {
	e.t.Helper()
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeWebhookSecret, Timestamp: time.Now()}).Header
	return e.do("POST", "/v1/webhooks/stripe", body, "Stripe-Signature", sig, "Content-Type", "application/json")
}

// uncharged pays under key with the call failing before the provider
// charged: in progress, lease released, nothing in the ledger.
func (e *env) uncharged(key string) *payment.Attempt {
	e.t.Helper()
	e.Sim.SetFaults(sim.Faults{FailBeforeCharge: 1})
	r := e.pay(key, visa)
	e.Sim.SetFaults(sim.Faults{})
	if r.Status != 503 {
		e.t.Fatalf("pay = %d %s, want 503", r.Status, r.Body)
	}
	a, err := e.DB.Attempt(context.Background(), "demo", key)
	if err != nil {
		e.t.Fatal(err)
	}
	if n := len(e.ledger()[payment.DownstreamKey("demo", key)]); n != 0 {
		e.t.Fatalf("ledger has %d charges under the key, want none", n)
	}
	return a
}

func (e *env) events() []payment.InboxEvent {
	e.t.Helper()
	evs, err := e.DB.ListEvents(context.Background(), payment.EventFilter{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return evs
}

// Anything not signed by the provider, now, over exactly this body is 4xx,
// and nothing is stored.
func TestWebhookRefusesUnverified(t *testing.T) {
	e := newEnv(t, envOptions{})
	a, c := e.stuck("k-refused")
	body := simEvent(a, c)
	now := time.Now()
	old, _ := sim.SignWebhook(simWebhookSecret, "msg_1", now.Add(-time.Hour), body)
	send := func(h http.Header, b []byte) response {
		return e.do("POST", "/v1/webhooks/sim", b, "webhook-id", h.Get("webhook-id"),
			"webhook-timestamp", h.Get("webhook-timestamp"), "webhook-signature", h.Get("webhook-signature"))
	}
	replayed := old.Clone() // an old delivery, its timestamp made fresh
	replayed.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	oversize := append(append([]byte{}, body[:len(body)-1]...), []byte(`,"pad":"`+strings.Repeat("x", 300<<10)+`"}`)...)
	for _, tc := range []struct {
		name   string
		r      response
		status int
	}{
		{"wrong secret", e.webhook("msg_1", now, sim.NewWebhookSecret(), body), 400},
		{"stale timestamp", send(old, body), 400},
		{"old body, fresh timestamp", send(replayed, body), 400},
		{"no signature", e.do("POST", "/v1/webhooks/sim", body, "webhook-id", "msg_1", "webhook-timestamp", fmt.Sprint(now.Unix())), 400},
		{"body changed", func() response {
			h, _ := sim.SignWebhook(simWebhookSecret, "msg_1", now, body)
			return send(h, append([]byte(" "), body...))
		}(), 400},
		{"oversize, even if signed", e.webhook("msg_1", now, simWebhookSecret, oversize), 413},
		{"a provider with no secret", e.do("POST", "/v1/webhooks/stripe", body, "Stripe-Signature", "t=1,v1=00"), 404},
	} {
		if tc.r.Status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, tc.r.Status, tc.r.Body, tc.status)
		}
	}
	if evs := e.events(); len(evs) != 0 {
		t.Errorf("inbox holds %d events, want none", len(evs))
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-refused"); got.Status != payment.InProgress {
		t.Errorf("attempt = %s, want still in progress", got.Status)
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	for _, want := range []string{`{outcome="invalid",provider="sim",type=""} 5`, `{outcome="too_large",provider="sim",type=""} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks the refused webhooks, %s", want)
		}
	}
}

// The inbox page lists the latest hundred events, newest first.
func TestAdminEventsPageLists(t *testing.T) {
	e := newEnv(t, envOptions{})
	now := time.Now()
	for i := range 60 {
		ev := payment.InboxEvent{Event: payment.Event{Provider: "sim", ID: fmt.Sprintf("evt_%03d", i), Type: "customer.created", Kind: payment.EventOther},
			State: payment.EventReceived, ReceivedAt: now.Add(time.Duration(i) * time.Millisecond), UpdatedAt: now}
		if ok, err := e.DB.ReceiveEvent(context.Background(), &ev); !ok || err != nil {
			t.Fatalf("ReceiveEvent = %v, %v", ok, err)
		}
	}
	page := string(e.do("GET", "/admin/events", nil).Body)
	if !strings.Contains(page, "evt_000") || !strings.Contains(page, "evt_059") {
		t.Errorf("the inbox page does not list all 60 events")
	}
	if strings.Index(page, "evt_059") > strings.Index(page, "evt_000") {
		t.Errorf("the inbox page is not newest first")
	}
}

// An attempt stuck after a lost response, with no reconcile running: the
// provider's event settles it, and the client's retry replays the charge.
func TestWebhookSettlesStuckPayment(t *testing.T) {
	e := newEnv(t, envOptions{})
	a, c := e.stuck("k-stuck")
	r := e.webhook("msg_stuck", time.Now(), simWebhookSecret, simEvent(a, c))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Fatalf("webhook = %d %s, want 200 processed", r.Status, r.Body)
	}
	retry := e.pay("k-stuck", visa)
	if retry.Status != 201 || retry.Header.Get("Idempotent-Replayed") != "true" || retry.payment(t).ChargeID != c.ID {
		t.Fatalf("retry = %d %s, want a 201 replay of charge %s", retry.Status, retry.Body, c.ID)
	}
	again := e.webhook("msg_stuck", time.Now(), simWebhookSecret, simEvent(a, c))
	if again.Status != 200 || !strings.Contains(string(again.Body), `"duplicate":true`) {
		t.Fatalf("redelivery = %d %s, want a 200 duplicate", again.Status, again.Body)
	}
	if n := len(e.ledger()[payment.DownstreamKey("demo", "k-stuck")]); n != 1 {
		t.Errorf("ledger holds %d charges, want 1", n)
	}
}

// A provider's signature moves only the payments made through it. With
// both webhook secrets set, Stripe-signed events about a payment made
// through the simulated provider, one saying it was declined and one that
// it succeeded, are refused: ignored (final, so Stripe stops), the reason
// on the inbox page, counted. The payment waits for its own provider,
// whose event then settles it. On each store.
func TestWebhookFromAnotherProviderRefused(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			webhookFromAnotherProvider(t, envOptions{stripeWebhooks: true, postgres: st.postgres})
		})
	}
}

func webhookFromAnotherProvider(t *testing.T, o envOptions) {
	e := newEnv(t, o)
	a, c := e.stuck("k-cross")
	for _, tc := range []struct{ id, typ string }{
		{"evt_cross_declined", "payment_intent.payment_failed"},
		{"evt_cross_succeeded", "payment_intent.succeeded"},
	} {
		r := e.stripeWebhook(stripeIntentEvent(tc.id, tc.typ, a, "pi_elsewhere"))
		if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"ignored"`) {
			t.Errorf("Stripe's %s about the simulated provider's payment = %d %s, want 200 ignored", tc.typ, r.Status, r.Body)
		}
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-cross"); got.Status != payment.InProgress {
		t.Fatalf("attempt = %s %q %q, want still in progress", got.Status, got.FailureCode, got.ChargeID)
	}
	page := string(e.do("GET", "/admin/events?state=ignored", nil).Body)
	if n := strings.Count(page, "not applied: the payment was made through sim, not the provider of the stripe endpoint"); n != 2 {
		t.Errorf("the inbox page gives the reason %d times, want 2", n)
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	if want := `oncepay_webhook_events_refused_total{provider="stripe",reason="other_provider"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}

	r := e.webhook("msg_own", time.Now(), simWebhookSecret, simEvent(a, c))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Fatalf("the simulated provider's own event = %d %s, want 200 processed", r.Status, r.Body)
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-cross"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("attempt = %s %q, want succeeded with %s", got.Status, got.ChargeID, c.ID)
	}
}

// A success event is a hint, confirmed by asking the provider by the
// payment's key. A signed charge.succeeded naming a made-up charge, about
// a payment the provider never charged, settles nothing: the event is held
// failed (503, so its sender tries again), with the reason on the inbox
// page, counted; the client's retry then charges once, as if the event
// had never come.
func TestWebhookSuccessTheProviderDoesNotKnowIsHeld(t *testing.T) {
	e := newEnv(t, envOptions{})
	a := e.uncharged("k-never-charged")
	forged := simEvent(a, payment.Charge{ID: "ch_made_up", Amount: a.Amount, Currency: a.Currency})
	r := e.webhook("msg_forged", time.Now(), simWebhookSecret, forged)
	if r.Status != 503 || r.problemType() != payment.ProblemEventNotApplied {
		t.Fatalf("webhook = %d %s, want 503 %s", r.Status, r.Body, payment.ProblemEventNotApplied)
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-never-charged"); got.Status != payment.InProgress || got.ChargeID != "" {
		t.Fatalf("attempt = %s %q, want still in progress, no charge", got.Status, got.ChargeID)
	}
	if evs := e.events(); len(evs) != 1 || evs[0].State != payment.EventFailedState {
		t.Fatalf("inbox = %+v, want the event failed", evs)
	}
	page := string(e.do("GET", "/admin/events?state=failed", nil).Body)
	if !strings.Contains(page, "msg_forged") || !strings.Contains(page, "the provider has no charge under this payment&#39;s key") {
		t.Errorf("the inbox page does not show the failed event with its reason")
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	if want := `oncepay_webhook_events_refused_total{provider="sim",reason="unconfirmed"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	retry := e.pay("k-never-charged", visa)
	charges := e.ledger()[payment.DownstreamKey("demo", "k-never-charged")]
	if retry.Status != 201 || len(charges) != 1 || retry.payment(t).ChargeID != charges[0].ID {
		t.Errorf("retry = %d %s with %d charges, want 201 naming the one charge", retry.Status, retry.Body, len(charges))
	}
}

// What the provider says is recorded, not what the event claims: a
// charge.succeeded naming a made-up charge, or a charge.failed, about a
// payment the provider did charge settles it with the provider's charge.
func TestWebhookRecordsWhatTheProviderSays(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, tc := range []struct {
		key  string
		body func(a *payment.Attempt) []byte
	}{
		{"k-made-up-charge", func(a *payment.Attempt) []byte {
			return simEvent(a, payment.Charge{ID: "ch_made_up", Amount: a.Amount, Currency: a.Currency})
		}},
		{"k-said-declined", func(a *payment.Attempt) []byte {
			return fmt.Appendf(nil, `{"type":"charge.failed","timestamp":"2026-01-01T00:00:00Z","data":{"idempotency_key":%q,"payment_id":%q,"amount":%d,"currency":%q,"failure_code":"card_declined","failure_message":"Declined."}}`,
				payment.DownstreamKey(a.Scope, a.Key), a.ID, a.Amount, a.Currency)
		}},
	} {
		a, c := e.stuck(tc.key)
		r := e.webhook("msg_"+tc.key, time.Now(), simWebhookSecret, tc.body(a))
		if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
			t.Errorf("%s: webhook = %d %s, want 200 processed", tc.key, r.Status, r.Body)
		}
		retry := e.pay(tc.key, visa)
		if retry.Status != 201 || retry.Header.Get("Idempotent-Replayed") != "true" || retry.payment(t).ChargeID != c.ID {
			t.Errorf("%s: retry = %d %s, want a 201 replay of the provider's charge %s", tc.key, retry.Status, retry.Body, c.ID)
		}
	}
}

// A success event whose charge is for another amount or currency than the
// payment never settles it as succeeded, though the provider did charge the
// payment: the event is not about that charge. Ignored, with the reason,
// counted; the client's retry then gets the provider's charge.
func TestWebhookChargeForAnotherAmountNeverSettles(t *testing.T) {
	e := newEnv(t, envOptions{})
	a, c := e.stuck("k-other-amount")
	for _, tc := range []struct {
		id     string
		charge payment.Charge
	}{
		{"msg_other_amount", payment.Charge{ID: c.ID, Amount: a.Amount + 1, Currency: a.Currency}},
		{"msg_other_currency", payment.Charge{ID: c.ID, Amount: a.Amount, Currency: "USD"}},
	} {
		r := e.webhook(tc.id, time.Now(), simWebhookSecret, simEvent(a, tc.charge))
		if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"ignored"`) {
			t.Errorf("%s: webhook = %d %s, want 200 ignored", tc.id, r.Status, r.Body)
		}
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-other-amount"); got.Status != payment.InProgress {
		t.Fatalf("attempt = %s %q, want still in progress", got.Status, got.ChargeID)
	}
	if page := string(e.do("GET", "/admin/events", nil).Body); !strings.Contains(page, "not applied: the event&#39;s charge is 1001 EUR, the payment 1000 EUR") ||
		!strings.Contains(page, "not applied: the event&#39;s charge is 1000 USD, the payment 1000 EUR") {
		t.Errorf("the inbox page does not give the reasons")
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	if want := `oncepay_webhook_events_refused_total{provider="sim",reason="mismatch"} 2`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if retry := e.pay("k-other-amount", visa); retry.Status != 201 || retry.payment(t).ChargeID != c.ID {
		t.Errorf("retry = %d %s, want 201 with the provider's charge %s", retry.Status, retry.Body, c.ID)
	}
}

// A success event naming another charge than the one a succeeded payment
// recorded says money may have moved twice: it changes nothing the client
// holds, and is not marked processed in silence but held failed for an
// operator: the reason on the inbox page, an error in the log, a count.
// Its sender is told 503, so it redelivers, and each try asks again.
func TestWebhookSecondChargeFlagged(t *testing.T) {
	logs := &syncBuffer{}
	e := newEnv(t, envOptions{log: logs})
	paid := e.pay("k-paid-once", visa)
	if paid.Status != 201 {
		t.Fatalf("pay = %d %s", paid.Status, paid.Body)
	}
	a, err := e.DB.Attempt(context.Background(), "demo", "k-paid-once")
	if err != nil {
		t.Fatal(err)
	}
	r := e.webhook("msg_second", time.Now(), simWebhookSecret, simEvent(a, payment.Charge{ID: "ch_second", Amount: a.Amount, Currency: a.Currency}))
	if r.Status != 503 || r.problemType() != payment.ProblemEventNotApplied {
		t.Fatalf("webhook = %d %s, want 503 not applied", r.Status, r.Body)
	}
	want := "Held: flagged for an operator: the payment succeeded as charge " + a.ChargeID + ", and this event says charge ch_second succeeded: money may have moved twice."
	if evs := e.events(); len(evs) != 1 || evs[0].State != payment.EventFailedState || evs[0].LastError != want {
		t.Errorf("inbox = %+v, want the event held failed with %q", evs, want)
	}
	if page := string(e.do("GET", "/admin/events", nil).Body); !strings.Contains(page, want) {
		t.Errorf("the inbox page does not flag the event")
	}
	if !strings.Contains(logs.String(), `"level":"ERROR","msg":"event disagrees with a final attempt; not applied"`) {
		t.Errorf("the second charge was not logged as an error")
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	if want := `oncepay_webhook_events_refused_total{provider="sim",reason="conflict"} 1`; !strings.Contains(metrics, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-paid-once"); got.Status != payment.Succeeded || got.ChargeID != a.ChargeID ||
		string(got.ResponseBody) != string(paid.Body) {
		t.Errorf("attempt = %s %q, want unchanged", got.Status, got.ChargeID)
	}
}

// A lookup that fails leaves the event to be tried again, and the payment
// as it was: released, as stale as before. Once the provider answers, the
// sender's next delivery settles it.
func TestWebhookLookupErrorLeavesEventToRetry(t *testing.T) {
	e := newEnv(t, envOptions{})
	a, c := e.stuck("k-lookup-fails")
	e.Sim.SetFaults(sim.Faults{FailLookup: 1})
	r := e.webhook("msg_lookup", time.Now(), simWebhookSecret, simEvent(a, c))
	e.Sim.SetFaults(sim.Faults{})
	if r.Status != 503 || r.problemType() != payment.ProblemEventNotApplied {
		t.Fatalf("webhook while lookups fail = %d %s, want 503 %s", r.Status, r.Body, payment.ProblemEventNotApplied)
	}
	got, _ := e.DB.Attempt(context.Background(), "demo", "k-lookup-fails")
	if got.Status != payment.InProgress || got.LeaseLive(time.Now()) || !got.UpdatedAt.Equal(a.UpdatedAt) {
		t.Fatalf("attempt = %s, lease live %v, updated %v; want in progress, released, updated %v as before",
			got.Status, got.LeaseLive(time.Now()), got.UpdatedAt, a.UpdatedAt)
	}
	if evs := e.events(); len(evs) != 1 || evs[0].State != payment.EventFailedState || !strings.Contains(evs[0].LastError, "could not confirm") {
		t.Fatalf("inbox = %+v, want the event failed, its cause given", evs)
	}
	r = e.webhook("msg_lookup", time.Now(), simWebhookSecret, simEvent(a, c))
	if r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Fatalf("redelivery = %d %s, want 200 processed", r.Status, r.Body)
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-lookup-fails"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("attempt = %s %q, want succeeded with %s", got.Status, got.ChargeID, c.ID)
	}
}

// The same signed delivery 100 times at once over HTTP: applied once, and
// every answer is 200 or a 503 the sender redelivers. On each store.
func TestWebhookConcurrentDuplicates(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { webhookDuplicates(t, envOptions{postgres: st.postgres}) })
	}
}

func webhookDuplicates(t *testing.T, o envOptions) {
	e := newEnv(t, o)
	a, c := e.stuck("k-dup")
	body := simEvent(a, c)
	h, _ := sim.SignWebhook(simWebhookSecret, "msg_dup", time.Now(), body)
	const copies = 100
	statuses := make(chan int, copies)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := e.do("POST", "/v1/webhooks/sim", body, "webhook-id", h.Get("webhook-id"),
				"webhook-timestamp", h.Get("webhook-timestamp"), "webhook-signature", h.Get("webhook-signature"))
			if r.Status == 503 && r.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After: %s", r.Body)
			}
			statuses <- r.Status
		}()
	}
	close(start)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	t.Logf("%d concurrent deliveries over HTTP: %v (status: count)", copies, count)
	if count[200]+count[503] != copies || count[200] == 0 {
		t.Errorf("statuses = %v, want only 200 and 503, at least one 200", count)
	}
	evs := e.events()
	if len(evs) != 1 || evs[0].State != payment.EventProcessed || evs[0].Attempts != 1 {
		t.Fatalf("inbox = %+v, want one event processed in one try", evs)
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-dup"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("attempt = %s %q, want succeeded with %s", got.Status, got.ChargeID, c.ID)
	}
}

// The simulated provider's own webhooks under load, with lost responses,
// declines, duplicates, reordering and delay, and no client retry and no
// reconcile: the events alone bring every attempt to the ledger's answer.
func TestSimWebhooksUnderFaultsMatchLedger(t *testing.T) {
	e := newEnv(t, envOptions{})
	if err := e.Sim.SetWebhook(sim.WebhookConfig{URL: e.Server.URL + "/v1/webhooks/sim", Secret: simWebhookSecret, FirstRetry: 20 * time.Millisecond, MaxRetryWait: 200 * time.Millisecond, MaxAttempts: 30}); err != nil {
		t.Fatal(err)
	}
	if err := e.Sim.SetFaults(sim.Faults{FailAfterCharge: 0.3, WebhookDuplicate: 0.5, WebhookReorder: 0.3, WebhookDelay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	const payments, workers = 200, 16
	keys := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				token := "tok_visa"
				if i%5 == 0 {
					token = "tok_chargeDeclined"
				}
				e.pay(fmt.Sprintf("load-%d", i), fmt.Sprintf(`{"amount":%d,"currency":"EUR","source":%q}`, 100+i, token))
			}
		}()
	}
	for i := range payments {
		keys <- i
	}
	close(keys)
	wg.Wait()

	ctx := context.Background()
	// Wait for the sim's deliveries to end (an event the reorder knob held
	// back may not have been sent yet when the last attempt settles), then
	// for every attempt settled and every event final.
	var pending, open, inFlight int
	for range 300 {
		inFlight = e.Sim.WebhooksInFlight()
		pending, open = e.counts()[payment.InProgress], 0
		for _, ev := range e.events() {
			if !ev.State.Final() {
				open++
			}
		}
		if inFlight == 0 && pending == 0 && open == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if inFlight != 0 || pending != 0 || open != 0 {
		t.Fatalf("%d deliveries in flight, %d attempts in progress, %d events not final after 15s of deliveries", inFlight, pending, open)
	}
	ledger := e.ledger()
	for i := range payments {
		key := fmt.Sprintf("load-%d", i)
		a, err := e.DB.Attempt(ctx, "demo", key)
		if err != nil {
			t.Fatal(err)
		}
		charges := ledger[payment.DownstreamKey("demo", key)]
		switch {
		case i%5 == 0 && (a.Status != payment.Failed || len(charges) != 0):
			t.Errorf("%s: %s with %d charges, want failed (declined) with none", key, a.Status, len(charges))
		case i%5 != 0 && (a.Status != payment.Succeeded || len(charges) != 1 || a.ChargeID != charges[0].ID):
			t.Errorf("%s: %s %q with %d charges, want succeeded with the ledger's one", key, a.Status, a.ChargeID, len(charges))
		}
	}
	states := map[payment.EventState]int{}
	for _, ev := range e.events() {
		states[ev.State]++
	}
	_, gaveUp := e.Sim.WebhookStats()
	t.Logf("inbox after %d payments: %v; sim gave up on %d events", payments, states, gaveUp)
	if states[payment.EventFailedState]+states[payment.EventProcessing]+states[payment.EventReceived] != 0 {
		t.Errorf("inbox states = %v, want every event final", states)
	}
}

// webhookResponses are one real answer of each kind the webhook endpoint gives.
type webhookResponses struct {
	processed, invalid, tooLarge, unknown, busy, failed response
}

func webhookAnswers(t *testing.T, e *env, scope string) webhookResponses {
	t.Helper()
	ctx := context.Background()
	lost := func(key string) (*payment.Attempt, payment.Charge) {
		e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
		defer e.Sim.SetFaults(sim.Faults{})
		a := payment.Request{Amount: 700, Currency: "EUR", Source: "tok_visa"}
		if _, err := e.Service.Pay(ctx, scope, key, a); payment.ErrorCode(err) != payment.EOUTCOMEUNKNOWN {
			t.Fatalf("Pay = %v, want outcome unknown", err)
		}
		at, _ := e.DB.Attempt(ctx, scope, key)
		return at, e.ledger()[payment.DownstreamKey(scope, key)][0]
	}
	var w webhookResponses
	now := time.Now()
	a, c := lost("spec-webhook")
	w.processed = e.webhook("msg_spec_ok", now, simWebhookSecret, simEvent(a, c))
	w.invalid = e.webhook("msg_spec_bad", now, sim.NewWebhookSecret(), simEvent(a, c))
	w.tooLarge = e.webhook("msg_spec_big", now, simWebhookSecret, []byte(`{"pad":"`+strings.Repeat("x", 300<<10)+`"}`))
	w.unknown = e.do("POST", "/v1/webhooks/stripe", []byte(`{}`))

	// Another copy holds the event under a live lease.
	held := payment.InboxEvent{Event: payment.Event{Provider: "sim", ID: "msg_spec_busy", Type: "charge.succeeded"},
		State: payment.EventReceived, ReceivedAt: now, UpdatedAt: now}
	if ok, err := e.DB.ReceiveEvent(ctx, &held); !ok || err != nil {
		t.Fatalf("ReceiveEvent = %v, %v", ok, err)
	}
	if _, ok, err := e.DB.BeginEvent(ctx, "sim", held.ID, 0, now, now.Add(time.Hour)); !ok || err != nil {
		t.Fatalf("BeginEvent = %v, %v", ok, err)
	}
	w.busy = e.webhook(held.ID, now, simWebhookSecret, simEvent(a, c))

	// A live request holds the payment the event is about.
	b, bc := lost("spec-webhook-held")
	if _, ok, err := e.DB.TakeOver(ctx, scope, "spec-webhook-held", b.Fence, now, now.Add(time.Hour)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	w.failed = e.webhook("msg_spec_held", now, simWebhookSecret, simEvent(b, bc))
	return w
}

// A Stripe webhook whose signature verified but that oncepay cannot read (a
// thin event notification) says so, not that the signature failed; one
// signed an hour ahead of the clock is refused as unverified.
func TestStripeWebhookRefusalSaysWhy(t *testing.T) {
	e := newEnv(t, envOptions{stripeWebhooks: true})
	thin := []byte(`{"id":"evt_test_thin","object":"v2.core.event","type":"v1.billing.meter.error_report_triggered",
		"livemode":false,"created":"2024-09-17T06:20:52.246Z","related_object":{"id":"mtr_1","type":"billing.meter","url":"/v1/billing/meters/mtr_1"}}`)
	r := e.stripeWebhook(thin)
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	if r.Status != 400 || p.Type != payment.ProblemInvalidWebhook || !strings.Contains(p.Detail, "thin event notification") || strings.Contains(p.Detail, "did not verify") {
		t.Errorf("thin event = %d %s, want 400 %s saying the thin event is not read", r.Status, r.Body, payment.ProblemInvalidWebhook)
	}

	body := stripeIntentEvent("evt_ahead", "payment_intent.succeeded", &payment.Attempt{ID: "pay_1", Scope: "s", Key: "k", Amount: 1000, Currency: "EUR"}, "pi_ahead")
	sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: stripeWebhookSecret, Timestamp: time.Now().Add(time.Hour)}).Header
	r = e.do("POST", "/v1/webhooks/stripe", body, "Stripe-Signature", sig, "Content-Type", "application/json")
	json.Unmarshal(r.Body, &p)
	if r.Status != 400 || p.Type != payment.ProblemInvalidWebhook || !strings.Contains(p.Detail, "did not verify") {
		t.Errorf("timestamp an hour ahead = %d %s, want 400 %s", r.Status, r.Body, payment.ProblemInvalidWebhook)
	}
	if n, err := e.DB.ListEvents(context.Background(), payment.EventFilter{Limit: 10}); err != nil || len(n) != 0 {
		t.Errorf("inbox = %v, %v; want nothing stored", n, err)
	}
}
