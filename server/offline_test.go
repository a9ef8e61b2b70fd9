package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
)

// clock is a test's time, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// offlineEnv is a demo-scope server whose merchant takes payments offline
// (at most 10.00 each, 25.00 queued per currency, for an hour), with the
// provider failing as faults says.
func offlineEnv(t *testing.T, faults sim.Faults) (*env, *clock) {
	t.Helper()
	c := &clock{t: time.Now().UTC()}
	e := newEnv(t, envOptions{now: c.now, faults: faults})
	lim := payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 2500, MaxAge: time.Hour}
	if err := e.DB.SetOfflineLimits(context.Background(), server.DemoScope, &lim); err != nil {
		t.Fatal(err)
	}
	return e, c
}

func (e *env) setFaults(f sim.Faults) {
	e.t.Helper()
	if err := e.Sim.SetFaults(f); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) forward() payment.ForwardResult {
	e.t.Helper()
	res, err := e.Forwarder.RunOnce(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// While the provider cannot be reached, a payment within the merchant's
// limits is answered 202 queued, stored and replayed byte for byte; one
// over a limit gets today's 503 and is never charged; a declined one is
// never queued. When the provider is back the forwarder charges each
// queued payment once, GET shows it succeeded, and its replay is still the
// 202 it first got.
func TestOfflineQueueAndForward(t *testing.T) {
	e, _ := offlineEnv(t, sim.Faults{FailBeforeCharge: 1})
	first := e.pay("till-1", visa)
	if first.Status != 202 || first.payment(t).Status != payment.Queued {
		t.Fatalf("payment on a dead link = %d %s, want 202 queued", first.Status, first.Body)
	}
	if again := e.pay("till-1", visa); again.Status != 202 || string(again.Body) != string(first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay = %d %s (replayed %q), want the 202's bytes", again.Status, again.Body, again.Header.Get("Idempotent-Replayed"))
	}
	e.pay("till-2", visa)
	over := e.pay("till-3", visa) // 3000 queued would pass 2500
	if over.Status != 503 || over.problemType() != payment.ProblemOutcomeUnknown {
		t.Errorf("payment over the total = %d %s, want 503 outcome unknown", over.Status, over.Body)
	}
	big := e.pay("till-big", `{"amount":1001,"currency":"EUR","source":"tok_visa"}`)
	if big.Status != 503 {
		t.Errorf("payment over the max amount = %d %s, want 503", big.Status, big.Body)
	}
	usd := e.pay("till-usd", `{"amount":1000,"currency":"USD","source":"tok_visa"}`)
	if usd.Status != 202 {
		t.Errorf("payment in another currency = %d %s, want 202: each currency has its own total", usd.Status, usd.Body)
	}
	e.setFaults(sim.Faults{})
	if d := e.pay("till-declined", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`); d.Status != 402 {
		t.Errorf("declined payment = %d %s, want 402: a decline is never queued", d.Status, d.Body)
	}
	m := e.scrape()
	for series, want := range map[string]float64{
		`oncepay_queued_payments{currency="EUR"}`:                             2,
		`oncepay_queued_amount{currency="EUR"}`:                               2000,
		`oncepay_queued_payments{currency="USD"}`:                             1,
		`oncepay_offline_payments_total{currency="EUR",verdict="queued"}`:     2,
		`oncepay_offline_payments_total{currency="EUR",verdict="over_total"}`: 1,
		`oncepay_offline_amount_total{currency="EUR",verdict="over_amount"}`:  1001,
		`oncepay_payment_requests_total{outcome="queued"}`:                    3,
		`oncepay_payment_requests_total{outcome="declined"}`:                  1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	list := e.do("GET", "/v1/payments?status=queued", nil)
	var page payment.List[payment.View]
	if err := json.Unmarshal(list.Body, &page); err != nil || list.Status != 200 || len(page.Data) != 3 || page.Object != "list" {
		t.Fatalf("GET /v1/payments?status=queued = %d %s, want the 3 queued", list.Status, list.Body)
	}
	if res := e.forward(); res.Succeeded != 3 || res.Checked != 3 {
		t.Errorf("forward = %v, want 3 succeeded", res)
	}
	if res := e.forward(); res.Checked != 0 {
		t.Errorf("second forward = %v, want nothing due", res)
	}
	m = e.scrape()
	if got := m[`oncepay_forwards_total{outcome="succeeded"}`]; got != 3 {
		t.Errorf("forwards succeeded = %v, want 3", got)
	}
	if _, ok := m[`oncepay_queued_payments{currency="EUR"}`]; ok {
		t.Error("oncepay_queued_payments still reports EUR after the queue emptied")
	}
	ledger := e.ledger()
	for _, key := range []string{"till-1", "till-2", "till-usd"} {
		if n := len(ledger[payment.DownstreamKey(server.DemoScope, key)]); n != 1 {
			t.Errorf("%s: %d charges, want 1", key, n)
		}
	}
	for _, key := range []string{"till-3", "till-big"} {
		if n := len(ledger[payment.DownstreamKey(server.DemoScope, key)]); n != 0 {
			t.Errorf("%s (refused offline): %d charges, want 0", key, n)
		}
	}
	id := first.payment(t).ID
	if got := e.do("GET", "/v1/payments/"+id, nil); got.payment(t).Status != payment.Succeeded || got.payment(t).ChargeID == "" {
		t.Errorf("GET after forwarding = %s, want succeeded with its charge", got.Body)
	}
	if again := e.pay("till-1", visa); string(again.Body) != string(first.Body) {
		t.Errorf("replay after forwarding = %s, want the first 202's bytes", again.Body)
	}
	// The over-limit payments were left in progress, released: the till's
	// retry, now that the link is back, charges them as usual.
	if r := e.pay("till-3", visa); r.Status != 201 {
		t.Errorf("retry of an over-limit payment with the link back = %d %s, want 201", r.Status, r.Body)
	}
}

// A merchant without offline limits gets today's 503 on a dead link, and
// nothing is queued.
func TestOfflineOffByDefault(t *testing.T) {
	e := newEnv(t, envOptions{faults: sim.Faults{FailBeforeCharge: 1}})
	if r := e.pay("k", visa); r.Status != 503 || r.problemType() != payment.ProblemOutcomeUnknown {
		t.Errorf("payment on a dead link without offline = %d %s, want 503", r.Status, r.Body)
	}
	if res := e.forward(); res.Checked != 0 {
		t.Errorf("forward = %v, want nothing queued", res)
	}
}

// A payment whose answer was lost (charged, then the link died) is queued
// as one the provider may have seen: the forwarder asks by key first and
// finds the charge, never charging again, even at a provider that does not
// dedupe.
func TestOfflineLostAnswerForwardedOnce(t *testing.T) {
	e, _ := offlineEnv(t, sim.Faults{FailAfterCharge: 1, NoDedupe: true})
	if r := e.pay("lost", visa); r.Status != 202 {
		t.Fatalf("payment whose answer was lost = %d %s, want 202", r.Status, r.Body)
	}
	e.setFaults(sim.Faults{NoDedupe: true})
	if res := e.forward(); res.Succeeded != 1 {
		t.Errorf("forward = %v, want 1 succeeded", res)
	}
	if n := len(e.ledger()[payment.DownstreamKey(server.DemoScope, "lost")]); n != 1 {
		t.Errorf("charges = %d, want 1: the forwarder must find the first charge", n)
	}
}

// Past its max age with nothing at the provider, a queued payment expires
// and is never charged after; one the provider did charge (its answer
// lost) is found by the lookup and succeeds.
func TestOfflineExpiry(t *testing.T) {
	e, c := offlineEnv(t, sim.Faults{FailBeforeCharge: 1})
	silent := e.pay("silent", visa).payment(t)
	e.setFaults(sim.Faults{FailAfterCharge: 1})
	charged := e.pay("charged", visa).payment(t)
	e.setFaults(sim.Faults{FailBeforeCharge: 1}) // still down: charges fail, lookups answer
	c.add(time.Hour)
	res := e.forward()
	if res.Expired != 1 || res.Succeeded != 1 {
		t.Errorf("forward past the max age = %v, want 1 expired, 1 succeeded", res)
	}
	e.setFaults(sim.Faults{})
	e.forward()
	if got := e.do("GET", "/v1/payments/"+silent.ID, nil).payment(t); got.Status != payment.Expired {
		t.Errorf("silent payment = %s, want expired", got.Status)
	}
	if got := e.do("GET", "/v1/payments/"+charged.ID, nil).payment(t); got.Status != payment.Succeeded {
		t.Errorf("charged payment = %s, want succeeded", got.Status)
	}
	ledger := e.ledger()
	if n := len(ledger[payment.DownstreamKey(server.DemoScope, "silent")]); n != 0 {
		t.Errorf("expired payment: %d charges, want 0", n)
	}
}

// A payment too close to its max age to be charged within one lease is
// neither charged nor expired: the forwarder waits for the age to pass.
func TestOfflineNoChargeNearExpiry(t *testing.T) {
	e, c := offlineEnv(t, sim.Faults{FailBeforeCharge: 1})
	p := e.pay("late", visa).payment(t)
	e.setFaults(sim.Faults{})
	c.add(time.Hour - time.Second) // the lease is longer than what is left
	if res := e.forward(); res.Unknown != 1 {
		t.Errorf("forward near the max age = %v, want it left queued", res)
	}
	if n := len(e.ledger()[payment.DownstreamKey(server.DemoScope, "late")]); n != 0 {
		t.Errorf("charges = %d, want 0", n)
	}
	c.add(time.Minute)
	e.forward()
	if got := e.do("GET", "/v1/payments/"+p.ID, nil).payment(t); got.Status != payment.Expired {
		t.Errorf("after the max age = %s, want expired", got.Status)
	}
}

// GET /v1/payments pages by id, newest first, within the merchant only.
func TestListPayments(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	_, a := e.apiKey("a")
	_, b := e.apiKey("b")
	var ids []string
	for _, key := range []string{"1", "2", "3"} {
		ids = append(ids, e.pay(key, visa, "Authorization", "Bearer "+a).payment(t).ID)
	}
	e.pay("1", visa, "Authorization", "Bearer "+b)
	list := func(q string) payment.List[payment.View] {
		t.Helper()
		r := e.do("GET", "/v1/payments"+q, nil, "Authorization", "Bearer "+a)
		var l payment.List[payment.View]
		if err := json.Unmarshal(r.Body, &l); err != nil || r.Status != 200 {
			t.Fatalf("GET /v1/payments%s = %d %s", q, r.Status, r.Body)
		}
		return l
	}
	got := func(l payment.List[payment.View]) []string {
		var s []string
		for _, v := range l.Data {
			s = append(s, v.ID)
		}
		return s
	}
	if l := list("?limit=2"); !l.HasMore || len(l.Data) != 2 || l.Data[0].ID != ids[2] || l.Data[1].ID != ids[1] {
		t.Errorf("first page = %v has_more %v, want %v, %v and more", got(l), l.HasMore, ids[2], ids[1])
	}
	if l := list("?limit=2&starting_after=" + ids[1]); l.HasMore || len(l.Data) != 1 || l.Data[0].ID != ids[0] {
		t.Errorf("next page = %v has_more %v, want %v alone", got(l), l.HasMore, ids[0])
	}
	if l := list("?limit=1&ending_before=" + ids[0]); !l.HasMore || len(l.Data) != 1 || l.Data[0].ID != ids[1] {
		t.Errorf("page before %s = %v has_more %v, want %v and more", ids[0], got(l), l.HasMore, ids[1])
	}
	if l := list("?status=failed"); len(l.Data) != 0 {
		t.Errorf("failed payments = %v, want none", got(l))
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?status=paid", "?starting_after=a&ending_before=b"} {
		if r := e.do("GET", "/v1/payments"+q, nil, "Authorization", "Bearer "+a); r.Status != 400 || r.problemType() != payment.ProblemInvalidRequest {
			t.Errorf("GET /v1/payments%s = %d %s, want 400", q, r.Status, r.Body)
		}
	}
}

// The admin page shows the queue, its money at risk and each payment; its
// "Forward now" runs the forwarder, and a cross-site form cannot.
func TestAdminQueuePage(t *testing.T) {
	e, _ := offlineEnv(t, sim.Faults{FailBeforeCharge: 1})
	p := e.pay("till-1", `{"amount":999,"currency":"EUR","source":"tok_visa"}`).payment(t)
	page := e.do("GET", "/admin/queue", nil)
	for _, want := range []string{p.ID, "9.99 EUR at risk", "Forward now"} {
		if page.Status != 200 || !strings.Contains(string(page.Body), want) {
			t.Errorf("GET /admin/queue = %d, want %q in it", page.Status, want)
		}
	}
	e.setFaults(sim.Faults{})
	forged := e.do("POST", "/admin/forward", nil, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if forged.Status != 403 {
		t.Errorf("cross-site POST /admin/forward = %d, want 403", forged.Status)
	}
	if n := len(e.ledger()[payment.DownstreamKey(server.DemoScope, "till-1")]); n != 0 {
		t.Fatalf("charges after a forged forward = %d, want 0", n)
	}
	r := e.do("POST", "/admin/forward", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), "Forwarded 1 due: 1 succeeded") {
		t.Errorf("POST /admin/forward (redirect followed) = %d, want the flash of 1 succeeded", r.Status)
	}
	if got := e.do("GET", "/admin/queue", nil); !strings.Contains(string(got.Body), "No payment is queued") {
		t.Error("the queue page still lists a payment after forwarding")
	}
}

// A queued payment the bank declines when it is forwarded ends failed with
// the decline's code: the merchant's offline risk, counted. Its 202 stays
// what a retry of its key gets.
func TestOfflineDeclinedWhenForwarded(t *testing.T) {
	e, _ := offlineEnv(t, sim.Faults{FailBeforeCharge: 1})
	body := `{"amount":800,"currency":"EUR","source":"tok_chargeDeclinedInsufficientFunds"}`
	first := e.pay("risky", body)
	if first.Status != 202 {
		t.Fatalf("payment on a dead link = %d %s, want 202", first.Status, first.Body)
	}
	e.setFaults(sim.Faults{})
	if res := e.forward(); res.Declined != 1 {
		t.Errorf("forward = %v, want 1 declined", res)
	}
	got := e.do("GET", "/v1/payments/"+first.payment(t).ID, nil).payment(t)
	if got.Status != payment.Failed || got.FailureCode != "insufficient_funds" {
		t.Errorf("GET after the decline = %s %q, want failed insufficient_funds", got.Status, got.FailureCode)
	}
	if again := e.pay("risky", body); again.Status != 202 || string(again.Body) != string(first.Body) {
		t.Errorf("retry = %d %s, want the 202", again.Status, again.Body)
	}
	if got := e.scrape()[`oncepay_forwards_total{outcome="declined"}`]; got != 1 {
		t.Errorf("forwards declined = %v, want 1", got)
	}
}

// A provider's event about a payment queued offline (charged by a call
// whose answer was lost) is not an alarm: it is left to the forwarder,
// which finds the charge by key and settles the payment succeeded.
func TestOfflineQueuedEventLeftToForwarder(t *testing.T) {
	e, _ := offlineEnv(t, sim.Faults{FailAfterCharge: 1})
	r := e.pay("lost", visa)
	if r.Status != 202 {
		t.Fatalf("payment whose answer was lost = %d %s, want 202", r.Status, r.Body)
	}
	e.setFaults(sim.Faults{})
	a, err := e.DB.Attempt(context.Background(), server.DemoScope, "lost")
	if err != nil {
		t.Fatal(err)
	}
	charges := e.ledger()[payment.DownstreamKey(server.DemoScope, "lost")]
	if len(charges) != 1 {
		t.Fatalf("ledger = %d charges, want 1", len(charges))
	}
	got := e.webhook("msg_queued_1", time.Now(), simWebhookSecret, simEvent(a, charges[0]))
	if got.Status != 200 || !strings.Contains(string(got.Body), `"ignored"`) {
		t.Errorf("event about a queued payment = %d %s, want 200 ignored", got.Status, got.Body)
	}
	if n := e.scrape()[`oncepay_webhook_events_refused_total{provider="sim",reason="conflict"}`]; n != 0 {
		t.Errorf("conflicts counted = %v, want 0: a queued payment is not settled yet", n)
	}
	if res := e.forward(); res.Succeeded != 1 {
		t.Errorf("forward = %v, want 1 succeeded", res)
	}
	if p := e.do("GET", "/v1/payments/"+a.ID, nil).payment(t); p.Status != payment.Succeeded || p.ChargeID != charges[0].ID {
		t.Errorf("payment = %s %s, want succeeded as %s", p.Status, p.ChargeID, charges[0].ID)
	}
}
