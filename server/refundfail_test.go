package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
)

// simRefundEvent is the simulated provider's event of type typ (refund.
// succeeded or refund.failed) about the refund v of oncepay, made at the
// provider as pr under key.
func simRefundEvent(typ string, v payment.RefundView, prID, key string) []byte {
	code := ""
	if typ == sim.EventRefundFailed {
		code = sim.ReturnedCode
	}
	return fmt.Appendf(nil, `{"type":%q,"timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"idempotency_key":%q,"payment_id":%q,"refund_id":%q,"amount":%d,"currency":%q,"created_at":"2026-01-01T00:00:00Z","failure_code":%q}}`,
		typ, prID, key, v.PaymentID, v.ID, v.Amount, v.Currency, code)
}

// refundView reads a refund's 201 body.
func refundView(t *testing.T, r response) payment.RefundView {
	t.Helper()
	var v payment.RefundView
	if err := json.Unmarshal(r.Body, &v); err != nil || v.ID == "" {
		t.Fatalf("refund body %q: %v", r.Body, err)
	}
	return v
}

// delivery is one signed copy of a provider event.
type delivery struct {
	id   string
	body []byte
}

// deliverAll posts every delivery at once, in a shuffled order, from its
// own goroutine, each redelivered as a sender does (after a 503) until it
// is answered 200; it returns how many answers were 503 on the way.
func (e *env) deliverAll(ds []delivery) (busy int) {
	e.t.Helper()
	rand.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
	)
	for _, d := range ds {
		wg.Go(func() {
			<-start
			for try := 0; ; try++ {
				r := e.webhook(d.id, time.Now(), simWebhookSecret, d.body)
				if r.Status == 200 {
					return
				}
				if r.Status != 503 || r.Header.Get("Retry-After") == "" || try > 200 {
					e.t.Errorf("delivery of %s = %d %s, want 200, or 503 with Retry-After", d.id, r.Status, r.Body)
					return
				}
				mu.Lock()
				busy++
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	close(start)
	wg.Wait()
	return busy
}

// outboxOf is the types of the merchant's events about object id, oldest
// first.
func (e *env) outboxOf(id string) []payment.EventType {
	e.t.Helper()
	es, err := e.DB.OutboxEvents(context.Background(), payment.OutboxFilter{Scope: server.DemoScope, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	var types []payment.EventType
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].ObjectID == id {
			types = append(types, es[i].Type)
		}
	}
	return types
}

// The bank fails a refund after oncepay recorded it succeeded. Its
// failure arrives five times at once, as two events (refund.failed, and a
// second id for the same fact, as Stripe sends refund.failed and
// charge.refund.updated), mixed with the refund's own success event, in
// no order, while another refund of the payment stands. Once: the refund
// is failed, its 400 refundable again, one
// refund.failed in the outbox; the original refund's replay is its first
// answer, byte for byte; a second refund of all that is left takes the
// restored balance; the provider's refunded total and oncepay's agree. On
// each store.
func TestRefundFailedAfterSuccessAppliedOnce(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { refundFailedOnce(t, envOptions{postgres: st.postgres}) })
	}
}

func refundFailedOnce(t *testing.T, o envOptions) {
	ctx := context.Background()
	e := newEnv(t, o)
	id := e.paid("order-returned")
	first := e.refund(id, "refund-returned", `{"amount":400}`)
	if first.Status != 201 {
		t.Fatalf("refund = %d %s", first.Status, first.Body)
	}
	v := refundView(t, first)
	// Another refund stands beside it, so that giving the 400 back twice
	// would still satisfy the payment's CHECK (nothing below zero).
	if r := e.refund(id, "refund-kept", `{"amount":400}`); r.Status != 201 {
		t.Fatalf("second refund = %d %s", r.Status, r.Body)
	}
	key := payment.RefundDownstreamKey(server.DemoScope, "refund-returned")
	if _, err := e.Sim.FailRefund(ctx, v.ProviderRefundID, ""); err != nil {
		t.Fatal(err)
	}
	failed := simRefundEvent(sim.EventRefundFailed, v, v.ProviderRefundID, key)
	var ds []delivery
	for i := range 5 {
		ds = append(ds, delivery{fmt.Sprintf("msg_failed_%d", i%2), failed})
	}
	ds = append(ds, delivery{"msg_made", simRefundEvent(sim.EventRefundSucceeded, v, v.ProviderRefundID, key)},
		delivery{"msg_made", simRefundEvent(sim.EventRefundSucceeded, v, v.ProviderRefundID, key)})
	busy := e.deliverAll(ds)
	t.Logf("%d deliveries at once: %d answered 503 on the way", len(ds), busy)

	for _, ev := range e.events() {
		if !ev.State.Final() {
			t.Errorf("event %s = %s (%s), want final", ev.ID, ev.State, ev.LastError)
		}
	}
	p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if p.AmountRefunded != 400 || len(p.Refunds) != 2 || p.Refunds[0].Status != payment.Failed || p.Refunds[0].FailureCode != sim.ReturnedCode ||
		p.Refunds[1].Status != payment.Succeeded {
		t.Fatalf("payment = refunded %d, refunds %+v; want the 400 of the kept refund, the other failed %s", p.AmountRefunded, p.Refunds, sim.ReturnedCode)
	}
	if got := e.outboxOf(v.ID); len(got) != 2 || got[0] != payment.EventRefundSucceeded || got[1] != payment.EventRefundFailed {
		t.Errorf("outbox events of the refund = %v, want refund.succeeded, then exactly one refund.failed", got)
	}
	replay := e.refund(id, "refund-returned", `{"amount":400}`)
	if replay.Status != 201 || string(replay.Body) != string(first.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay of the refund = %d %s, want its first answer, byte for byte, replayed", replay.Status, replay.Body)
	}
	rest := e.refund(id, "refund-rest", `{}`)
	if rest.Status != 201 || refundView(t, rest).Amount != 600 {
		t.Fatalf("refund of all that is left = %d %s, want 201 of 600, the returned 400 included", rest.Status, rest.Body)
	}
	p = e.do("GET", "/v1/payments/"+id, nil).payment(t)
	total, _ := e.providerRefunds()
	if p.AmountRefunded != 1000 || total != p.AmountRefunded {
		t.Errorf("refunded: oncepay %d, the provider %d; want both 1000", p.AmountRefunded, total)
	}
}

// A refund whose answer was lost is still in progress when the bank's
// failure of it arrives, five copies at once with its success event: the
// event takes the refund over and asks the provider, which says it failed,
// and records that, once: the reservation is given back, one refund.failed
// and no refund.succeeded in the outbox, and the client's retry gets the
// stored decline.
func TestRefundFailedWhileInProgressSettlesOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{})
	id := e.paid("order-lost")
	e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
	if r := e.refund(id, "refund-lost", `{"amount":300}`); r.Status != 503 {
		t.Fatalf("refund with its answer lost = %d %s, want 503", r.Status, r.Body)
	}
	e.Sim.SetFaults(sim.Faults{})
	a, err := e.DB.Attempt(ctx, server.DemoScope, "refund-lost")
	if err != nil || a.Status != payment.InProgress {
		t.Fatalf("refund attempt = %+v, %v; want in progress", a, err)
	}
	rs, _ := e.Sim.Refunds(ctx)
	if len(rs) != 1 {
		t.Fatalf("provider refunds = %+v, want one", rs)
	}
	if _, err := e.Sim.FailRefund(ctx, rs[0].ID, ""); err != nil {
		t.Fatal(err)
	}
	v := payment.RefundView{ID: a.ID, PaymentID: id, Amount: 300, Currency: "EUR"}
	key := payment.RefundDownstreamKey(server.DemoScope, "refund-lost")
	var ds []delivery
	for range 5 {
		ds = append(ds, delivery{"msg_failed", simRefundEvent(sim.EventRefundFailed, v, rs[0].ID, key)})
	}
	ds = append(ds, delivery{"msg_made", simRefundEvent(sim.EventRefundSucceeded, v, rs[0].ID, key)})
	e.deliverAll(ds)
	if got := e.outboxOf(a.ID); len(got) != 1 || got[0] != payment.EventRefundFailed {
		t.Errorf("outbox events of the refund = %v, want exactly one refund.failed", got)
	}
	p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if pp, _ := e.DB.Payment(ctx, server.DemoScope, id); p.AmountRefunded != 0 || pp.AmountReserved != 0 {
		t.Errorf("payment = refunded %d, reserved %d; want the reservation given back", p.AmountRefunded, pp.AmountReserved)
	}
	if r := e.refund(id, "refund-lost", `{"amount":300}`); r.Status != 402 || r.problemType() != payment.ProblemRefundDeclined {
		t.Errorf("the client's retry = %d %s, want the stored 402 decline", r.Status, r.Body)
	}
}

// A refund failure that does not come from the provider's endpoint, or is
// not what the provider says, changes nothing: a forged one (another
// secret) is refused and stored nowhere; one naming another provider
// refund is ignored; one posted to another provider's endpoint is
// ignored and counted; one the provider contradicts (it says the refund
// succeeded) is held failed with its reason, on the inbox page, counted,
// and tried again: once the bank has failed the refund, the redelivery
// applies it.
func TestRefundFailureNotFromTheProviderChangesNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{stripeWebhooks: true})
	id := e.paid("order-forged")
	first := e.refund(id, "refund-forged", `{"amount":400}`)
	v := refundView(t, first)
	key := payment.RefundDownstreamKey(server.DemoScope, "refund-forged")
	body := simRefundEvent(sim.EventRefundFailed, v, v.ProviderRefundID, key)
	unchanged := func(when string) {
		t.Helper()
		p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
		if p.AmountRefunded != 400 || p.Refunds[0].Status != payment.Succeeded {
			t.Errorf("%s: payment = refunded %d, refund %s; want 400, succeeded", when, p.AmountRefunded, p.Refunds[0].Status)
		}
		if got := e.outboxOf(v.ID); len(got) != 1 {
			t.Errorf("%s: outbox events of the refund = %v, want only its success", when, got)
		}
	}
	if r := e.webhook("msg_forged", time.Now(), "whsec_"+strings.Repeat("A", 32), body); r.Status != 400 {
		t.Errorf("forged = %d %s, want 400", r.Status, r.Body)
	}
	if len(e.events()) != 0 {
		t.Errorf("a forged event was stored")
	}
	unchanged("forged")
	if r := e.webhook("msg_other_refund", time.Now(), simWebhookSecret, simRefundEvent(sim.EventRefundFailed, v, "re_sim_another", key)); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"ignored"`) {
		t.Errorf("event naming another provider refund = %d %s, want 200 ignored", r.Status, r.Body)
	}
	unchanged("another provider refund")
	stripeBody := fmt.Appendf(nil, `{"id":"evt_refund_failed","object":"event","api_version":"2024-06-20","created":1700000000,"livemode":false,"pending_webhooks":1,
		"type":"refund.failed","data":{"object":{"id":%q,"object":"refund","amount":400,"currency":"eur","status":"failed","failure_reason":"lost_or_stolen_card",
		"payment_intent":"pi_x","created":1700000000,"metadata":{"oncepay_key":%q,"oncepay_refund":%q,"oncepay_payment":%q}}}}`,
		v.ProviderRefundID, key, v.ID, id)
	if r := e.stripeWebhook(stripeBody); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"ignored"`) {
		t.Errorf("refund failure at Stripe's endpoint = %d %s, want 200 ignored", r.Status, r.Body)
	}
	unchanged("another provider")

	r := e.webhook("msg_early", time.Now(), simWebhookSecret, body)
	if r.Status != 503 || r.problemType() != payment.ProblemEventNotApplied {
		t.Fatalf("failure the provider contradicts = %d %s, want 503 not applied", r.Status, r.Body)
	}
	unchanged("contradicted")
	ev, err := e.DB.InboxEvent(ctx, "sim", "msg_early")
	want := "Held: this event says refund " + v.ID + " failed, and the provider, asked by its key, says it succeeded. The refund stays succeeded."
	if err != nil || ev.State != payment.EventFailedState || ev.LastError != want {
		t.Errorf("held event = %+v, %v; want failed with %q", ev, err, want)
	}
	if page := string(e.do("GET", "/admin/events?state=failed", nil).Body); !strings.Contains(page, "says it succeeded. The refund stays succeeded.") {
		t.Errorf("the inbox page does not show why the event is held")
	}
	metrics := string(e.do("GET", "/metrics", nil).Body)
	for _, want := range []string{`oncepay_webhook_events_refused_total{provider="sim",reason="contradicted"} 1`,
		`oncepay_webhook_events_refused_total{provider="stripe",reason="other_provider"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if _, err := e.Sim.FailRefund(ctx, v.ProviderRefundID, ""); err != nil {
		t.Fatal(err)
	}
	if r := e.webhook("msg_early", time.Now(), simWebhookSecret, body); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Errorf("redelivery once the bank failed the refund = %d %s, want 200 processed", r.Status, r.Body)
	}
	if p := e.do("GET", "/v1/payments/"+id, nil).payment(t); p.AmountRefunded != 0 || p.Refunds[0].Status != payment.Failed {
		t.Errorf("payment after the redelivery = refunded %d, refund %s; want 0, failed", p.AmountRefunded, p.Refunds[0].Status)
	}
}

// The simulated provider's own events, with the bank failing every refund
// after taking it (fail_refund_later) and its webhooks duplicated,
// reordered and delayed: with no client retry, the events alone bring
// oncepay to the ledger's answer, and a second round of refunds against
// the restored balances too.
func TestSimRefundsFailedLaterMatchLedger(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{})
	if err := e.Sim.SetWebhook(sim.WebhookConfig{URL: e.Server.URL + "/v1/webhooks/sim", Secret: simWebhookSecret,
		FirstRetry: 20 * time.Millisecond, MaxRetryWait: 200 * time.Millisecond, MaxAttempts: 40}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	ids := make([]string, n)
	for i := range n {
		ids[i] = e.paid(fmt.Sprintf("order-%d", i))
	}
	e.Sim.SetFaults(sim.Faults{FailRefundLater: 1, WebhookDuplicate: 0.5, WebhookReorder: 0.5, WebhookDelay: 50 * time.Millisecond})
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if r := e.refund(id, fmt.Sprintf("refund-%d", i), `{"amount":600}`); r.Status != 201 {
				t.Errorf("refund %d = %d %s, want 201 (the bank took it)", i, r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	e.Sim.SetFaults(sim.Faults{})
	waitQuiet(t, e)
	for i, id := range ids {
		p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
		if p.AmountRefunded != 0 || len(p.Refunds) != 1 || p.Refunds[0].Status != payment.Failed {
			t.Errorf("payment %d = refunded %d, refunds %+v; want its refund failed, nothing refunded", i, p.AmountRefunded, p.Refunds)
			continue
		}
		if got := e.outboxOf(p.Refunds[0].ID); len(got) != 2 || got[1] != payment.EventRefundFailed {
			t.Errorf("payment %d: outbox events of its refund = %v, want refund.succeeded, refund.failed", i, got)
		}
		if r := e.refund(id, fmt.Sprintf("again-%d", i), `{"amount":1000}`); r.Status != 201 {
			t.Errorf("payment %d: a refund of the whole amount after the failure = %d %s, want 201", i, r.Status, r.Body)
		}
	}
	waitQuiet(t, e)
	total, _ := e.providerRefunds()
	var ours int64
	for _, id := range ids {
		ours += e.do("GET", "/v1/payments/"+id, nil).payment(t).AmountRefunded
	}
	if total != ours || ours != 1000*n {
		t.Errorf("refunded: the provider %d, oncepay %d; want both %d", total, ours, 1000*n)
	}
	if _, gaveUp := e.Sim.WebhookStats(); gaveUp != 0 {
		t.Errorf("the sim gave up on %d events", gaveUp)
	}
	_ = ctx
}

// waitQuiet waits until the sim has no event left to deliver.
func waitQuiet(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for e.Sim.WebhooksInFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still in flight after 60s", e.Sim.WebhooksInFlight())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A dispute, as the simulated provider sends it: the payment stays
// succeeded and shows its dispute; payment.disputed once, then, closed,
// payment.dispute_closed once, however often the events arrive.
func TestSimDisputeShownOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{})
	if err := e.Sim.SetWebhook(sim.WebhookConfig{URL: e.Server.URL + "/v1/webhooks/sim", Secret: simWebhookSecret,
		FirstRetry: 20 * time.Millisecond, MaxRetryWait: 200 * time.Millisecond, MaxAttempts: 40}); err != nil {
		t.Fatal(err)
	}
	id := e.paid("order-disputed")
	p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	e.Sim.SetFaults(sim.Faults{WebhookDuplicate: 1})
	d, err := e.Sim.Dispute(ctx, p.ChargeID, "fraudulent")
	if err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, e)
	p = e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if want := (payment.Dispute{ID: d.ID, Status: "needs_response", Reason: "fraudulent", Amount: 1000}); p.Status != payment.Succeeded || p.Dispute == nil || *p.Dispute != want {
		t.Errorf("payment = %s, dispute %+v; want succeeded, %+v", p.Status, p.Dispute, want)
	}
	if _, err := e.Sim.CloseDispute(ctx, d.ID, "lost"); err != nil {
		t.Fatal(err)
	}
	waitQuiet(t, e)
	p = e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if p.Status != payment.Succeeded || p.Dispute == nil || p.Dispute.Status != "lost" {
		t.Errorf("payment = %s, dispute %+v; want succeeded, lost", p.Status, p.Dispute)
	}
	want := []payment.EventType{payment.EventPaymentSucceeded, payment.EventPaymentDisputed, payment.EventPaymentDisputeClosed}
	if got := e.outboxOf(id); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("outbox events of the payment = %v, want %v", got, want)
	}
	list := e.do("GET", "/v1/events?type=payment.dispute_closed", nil)
	if list.Status != 200 || !strings.Contains(string(list.Body), `"dispute":{"id":"`+d.ID+`","status":"lost"`) {
		t.Errorf("GET /v1/events?type=payment.dispute_closed = %d %s, want the payment with its lost dispute", list.Status, list.Body)
	}
}

// A database and a sim ledger made before refunds could fail after they
// succeeded and before disputes (commit ea45566, testdata/made-by-ea45566)
// open migrated: the old payment shows no dispute, and its old refund,
// whose key's record was purged, is failed by the bank at the migrated
// sim and by its event at oncepay, tied by the provider's refund id
// alone: its 500 is refundable again, once, and both totals agree after a
// refund of all that is left. A new payment of the old merchant can be
// disputed. (This file's payments are rebuilt by the expired-keys
// migration, which brings the dispute columns; TestMigrateDatabaseMadeBeforeDisputes
// takes the step that adds them.)
func TestMigrateDatabaseMadeBeforeRefundFailures(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{dir: testdataCopy(t, "made-by-ea45566"), auth: true})
	const (
		secret   = "opk_2P7EZ3U3OWNUHFQTXBFJHBL5EFTQU5QSH5L5VHZITSZGCBPF7IOX"
		paid     = "pay_HONV7TQRFCR3LSSKBLWH6KEBWU"
		refund   = "re_HONV7TSRPJVGN4SVIW7AW7VVTE"
		prRefund = "re_sim_lhe5tw77srgc4oxzlfra"
	)
	auth := []string{"Authorization", "Bearer " + secret}
	old := e.do("GET", "/v1/payments/"+paid, nil, auth...)
	if p := old.payment(t); old.Status != 200 || p.Dispute != nil || p.AmountRefunded != 500 || strings.Contains(string(old.Body), `"dispute"`) {
		t.Fatalf("the old payment = %d %s, want 500 refunded and no dispute field", old.Status, old.Body)
	}
	pr, err := e.Sim.FailRefund(ctx, prRefund, "")
	if err != nil || pr.Status != "failed" {
		t.Fatalf("FailRefund on the old ledger = %+v, %v", pr, err)
	}
	v := payment.RefundView{ID: refund, PaymentID: paid, Amount: 500, Currency: "EUR"}
	body := simRefundEvent(sim.EventRefundFailed, v, prRefund, pr.IdempotencyKey)
	for range 2 {
		if r := e.webhook("msg_old_refund_failed", time.Now(), simWebhookSecret, body); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
			t.Fatalf("the old refund's failure = %d %s, want 200 processed", r.Status, r.Body)
		}
	}
	p := e.do("GET", "/v1/payments/"+paid, nil, auth...).payment(t)
	if p.AmountRefunded != 0 || len(p.Refunds) != 1 || p.Refunds[0].Status != payment.Failed {
		t.Fatalf("the old payment after its refund failed = refunded %d, refunds %+v; want 0, failed", p.AmountRefunded, p.Refunds)
	}
	stored, err := e.DB.PaymentByID(ctx, paid)
	if err != nil {
		t.Fatal(err)
	}
	es, err := e.DB.OutboxEvents(ctx, payment.OutboxFilter{Scope: stored.Scope, Type: payment.EventRefundFailed, Limit: 10})
	if err != nil || len(es) != 1 || es[0].ObjectID != refund {
		t.Errorf("refund.failed events = %+v, %v; want one, of the old refund", es, err)
	}
	if r := e.refund(paid, "r-after", `{}`, auth...); r.Status != 201 || refundView(t, r).Amount != 2000 {
		t.Errorf("refund of all that is left = %d %s, want 201 of 2000", r.Status, r.Body)
	}
	total, _ := e.providerRefunds()
	if p := e.do("GET", "/v1/payments/"+paid, nil, auth...).payment(t); p.AmountRefunded != 2000 || total != 2000 {
		t.Errorf("refunded: oncepay %d, the provider %d; want both 2000", p.AmountRefunded, total)
	}

	r := e.pay("p-disputed", visa, auth...)
	if r.Status != 201 {
		t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	np := r.payment(t)
	d, err := e.Sim.Dispute(ctx, np.ChargeID, "")
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Appendf(nil, `{"type":"charge.dispute.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"charge_id":%q,"amount":1000,"currency":"EUR","status":"needs_response"}}`, d.ID, np.ChargeID)
	if r := e.webhook("msg_dispute", time.Now(), simWebhookSecret, ev); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Fatalf("dispute = %d %s, want 200 processed", r.Status, r.Body)
	}
	if got := e.do("GET", "/v1/payments/"+np.ID, nil, auth...).payment(t); got.Dispute == nil || got.Dispute.ID != d.ID || got.Status != payment.Succeeded {
		t.Errorf("the disputed payment = %s, dispute %+v; want succeeded, disputed as %s", got.Status, got.Dispute, d.ID)
	}
}

// A database and sim ledger made just before refunds could fail after they
// succeeded and before disputes (commit d234d04, demo mode,
// testdata/made-by-d234d04: order-1 of 2000 EUR with refund-1 of 500,
// order-2 of 700 USD) open migrated: the old answers replay byte for
// byte with no dispute field; the old refund, failed by the bank at the
// migrated sim and by its event, gives its 500 back once; a new payment
// on the migrated file is disputed and shows it.
func TestMigrateDatabaseMadeBeforeDisputes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{dir: testdataCopy(t, "made-by-d234d04")})
	const (
		paid      = "pay_HOOV0UIWOLEF7EMPOHR7ZI7SGR"
		refunded  = `{"id":"re_HOOV0W705U6F2XMTUCDTGLQXKQ","object":"refund","payment_id":"pay_HOOV0UIWOLEF7EMPOHR7ZI7SGR","status":"succeeded","amount":500,"currency":"EUR","provider_refund_id":"re_sim_p3tb25tm3e4g7loomydd","idempotency_key":"refund-1","created_at":"2026-12-02T01:16:15.407Z"}`
		otherPaid = `{"id":"pay_HOOV0WDCILLWZRFQRODRSIJBVG","object":"payment","status":"succeeded","amount":700,"currency":"USD","charge_id":"ch_hoov0wde3ecuvisqkn6tzkq","amount_refunded":0,"refunds":[],"idempotency_key":"order-2","created_at":"2026-12-02T01:16:15.703Z"}`
	)
	if r := e.pay("order-2", `{"amount":700,"currency":"USD","source":"tok_visa"}`); r.Status != 201 || strings.TrimSpace(string(r.Body)) != otherPaid {
		t.Errorf("order-2 after the migration = %d %s, want the replayed %s", r.Status, r.Body, otherPaid)
	}
	first := e.refund(paid, "refund-1", `{"amount":500}`)
	if first.Status != 201 || strings.TrimSpace(string(first.Body)) != refunded {
		t.Fatalf("refund-1 after the migration = %d %s, want the replayed %s", first.Status, first.Body, refunded)
	}
	v := refundView(t, first)
	if _, err := e.Sim.FailRefund(ctx, v.ProviderRefundID, ""); err != nil {
		t.Fatal(err)
	}
	key := payment.RefundDownstreamKey(server.DemoScope, "refund-1")
	for range 2 {
		if r := e.webhook("msg_d234d04_failed", time.Now(), simWebhookSecret, simRefundEvent(sim.EventRefundFailed, v, v.ProviderRefundID, key)); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
			t.Fatalf("the old refund's failure = %d %s, want 200 processed", r.Status, r.Body)
		}
	}
	if p := e.do("GET", "/v1/payments/"+paid, nil).payment(t); p.AmountRefunded != 0 || p.Refunds[0].Status != payment.Failed || p.Dispute != nil {
		t.Errorf("the old payment = refunded %d, refund %s, dispute %+v; want 0, failed, none", p.AmountRefunded, p.Refunds[0].Status, p.Dispute)
	}
	if got := e.outboxOf(v.ID); len(got) != 2 || got[0] != payment.EventRefundSucceeded || got[1] != payment.EventRefundFailed {
		t.Errorf("outbox events of the old refund = %v, want its refund.succeeded, then one refund.failed", got)
	}
	if r := e.refund(paid, "refund-2", `{}`); r.Status != 201 || refundView(t, r).Amount != 2000 {
		t.Errorf("refund of all that is left = %d %s, want 201 of 2000", r.Status, r.Body)
	}
	if total, _ := e.providerRefunds(); total != 2000 {
		t.Errorf("the provider refunded %d, want 2000 as oncepay", total)
	}
	np := e.pay("order-3", visa).payment(t)
	d, err := e.Sim.Dispute(ctx, np.ChargeID, "duplicate")
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Appendf(nil, `{"type":"charge.dispute.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"charge_id":%q,"amount":1000,"currency":"EUR","status":"needs_response"}}`, d.ID, np.ChargeID)
	if r := e.webhook("msg_d234d04_dispute", time.Now(), simWebhookSecret, ev); r.Status != 200 || !strings.Contains(string(r.Body), `"state":"processed"`) {
		t.Fatalf("dispute = %d %s, want 200 processed", r.Status, r.Body)
	}
	if got := e.do("GET", "/v1/payments/"+np.ID, nil).payment(t); got.Dispute == nil || got.Dispute.Reason != "duplicate" || got.Status != payment.Succeeded {
		t.Errorf("the disputed payment = %s, dispute %+v; want succeeded, disputed as duplicate", got.Status, got.Dispute)
	}
}

// The events of a refund the bank failed and of a dispute, and the
// payment that shows its dispute, are what the OpenAPI document says: in
// GET /v1/events, GET /v1/payments/{id}, and as the body of the document's
// webhook of each event's type.
func TestRefundFailureAndDisputeMatchOpenAPI(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, envOptions{})
	s := loadSpec(t, e)
	id := e.paid("order-spec")
	v := refundView(t, e.refund(id, "refund-spec", `{"amount":300}`))
	if _, err := e.Sim.FailRefund(ctx, v.ProviderRefundID, ""); err != nil {
		t.Fatal(err)
	}
	key := payment.RefundDownstreamKey(server.DemoScope, "refund-spec")
	if r := e.webhook("msg_spec_failed", time.Now(), simWebhookSecret, simRefundEvent(sim.EventRefundFailed, v, v.ProviderRefundID, key)); r.Status != 200 {
		t.Fatalf("refund failure = %d %s", r.Status, r.Body)
	}
	p := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	d, err := e.Sim.Dispute(ctx, p.ChargeID, "")
	if err != nil {
		t.Fatal(err)
	}
	ev := fmt.Appendf(nil, `{"type":"charge.dispute.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":%q,"charge_id":%q}}`, d.ID, p.ChargeID)
	if r := e.webhook("msg_spec_dispute", time.Now(), simWebhookSecret, ev); r.Status != 200 {
		t.Fatalf("dispute = %d %s", r.Status, r.Body)
	}
	got := e.do("GET", "/v1/payments/"+id, nil)
	s.check("disputed payment", "GET", "/v1/payments/"+id, got)
	if !strings.Contains(string(got.Body), `"dispute":{"id":"`+d.ID) {
		t.Errorf("payment = %s, want its dispute", got.Body)
	}
	list := e.do("GET", "/v1/events", nil)
	s.check("events", "GET", "/v1/events", list)
	var page struct{ Data []json.RawMessage }
	if err := json.Unmarshal(list.Body, &page); err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, b := range page.Data {
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		typ := v["type"].(string)
		types[typ] = true
		hook := s.doc.Webhooks[typ]
		if hook == nil || hook.Post == nil {
			t.Errorf("event type %s has no webhook in the document", typ)
			continue
		}
		schema := hook.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
		if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("event %s does not match webhooks.%s: %v", b, typ, err)
		}
	}
	for _, want := range []string{"refund.failed", "payment.disputed"} {
		if !types[want] {
			t.Errorf("events = %v, want a %s", types, want)
		}
	}
}
