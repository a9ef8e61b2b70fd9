package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// refund posts a refund of payment id under key.
func (e *env) refund(id, key, body string, headers ...string) response {
	e.t.Helper()
	return e.do("POST", "/v1/payments/"+id+"/refunds", []byte(body), append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, headers...)...)
}

// refundUntilFinal retries a refund as a client should: the same key and
// body after a 409 in progress or a 503, until a final answer.
func (e *env) refundUntilFinal(id, key, body string) response {
	e.t.Helper()
	for {
		r := e.refund(id, key, body)
		if r.Status != 503 && r.problemType() != payment.ProblemInProgress {
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// paid makes a succeeded payment of 1000 and returns its id.
func (e *env) paid(key string, headers ...string) string {
	e.t.Helper()
	r := e.pay(key, visa, headers...)
	if r.Status != 201 {
		e.t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	return r.payment(e.t).ID
}

// providerRefunds is what the simulated provider refunded, in total (its
// refunds the bank returned gave nothing back) and by idempotency key
// (every refund).
func (e *env) providerRefunds() (total int64, byKey map[string]int) {
	e.t.Helper()
	rs, err := e.Sim.Refunds(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	byKey = map[string]int{}
	for _, r := range rs {
		byKey[r.IdempotencyKey]++
		if r.Status != "failed" { // the bank returned it: nothing given back
			total += r.Amount
		}
	}
	return total, byKey
}

// 1,000 concurrent retries of one refund: one provider refund call, and
// every answer the same bytes.
func TestRefundStormOneKey(t *testing.T) {
	e := newEnv(t, envOptions{faults: sim.Faults{NoDedupe: true}})
	id := e.paid("order-1")
	const n = 1000
	bodies := make(chan response, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { bodies <- e.refundUntilFinal(id, "refund-1", `{"amount":400}`) })
	}
	wg.Wait()
	close(bodies)
	var first string
	for r := range bodies {
		if r.Status != 201 {
			t.Fatalf("refund = %d %s, want 201", r.Status, r.Body)
		}
		if first == "" {
			first = string(r.Body)
		}
		if string(r.Body) != first {
			t.Fatalf("answers differ:\n%s\n%s", first, r.Body)
		}
	}
	dk := payment.RefundDownstreamKey(demoScope, "refund-1")
	if c := e.Calls()[dk]; c.Refunds != 1 {
		t.Errorf("provider refund calls = %d, want 1", c.Refunds)
	}
	if total, _ := e.providerRefunds(); total != 400 {
		t.Errorf("provider refunded %d, want 400", total)
	}
	if v := e.do("GET", "/v1/payments/"+id, nil).payment(t); v.AmountRefunded != 400 || len(v.Refunds) != 1 {
		t.Errorf("payment = %+v, want 400 refunded in one refund", v)
	}
}

const demoScope = "demo"

// 50 different refunds, each of 30%, race on one payment: at most 3 reach
// the provider, the others are refused before it, and the refunded total
// never exceeds the charge, in oncepay and at the provider. With lost
// responses and failures, clients retry and reconcile settles the rest:
// the provider's total is oncepay's. On each store.
func TestRefundRaceManyKeys(t *testing.T) {
	for _, st := range stores {
		for _, tt := range []struct {
			name   string
			faults sim.Faults
		}{
			{"healthy", sim.Faults{NoDedupe: true}},
			{"lost responses", sim.Faults{FailBeforeCharge: 0.1, FailAfterCharge: 0.4}},
		} {
			t.Run(st.name+"/"+tt.name, func(t *testing.T) { refundRace(t, envOptions{postgres: st.postgres}, tt.faults) })
		}
	}
}

func refundRace(t *testing.T, o envOptions, faults sim.Faults) {
	e := newEnv(t, o)
	id := e.paid("order-1")
	if err := e.Sim.SetFaults(faults); err != nil {
		t.Fatal(err)
	}
	const keys = 50
	results := make(chan response, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() { results <- e.refundUntilFinal(id, fmt.Sprintf("refund-%d", k), `{"amount":300}`) })
	}
	wg.Wait()
	close(results)
	var created int
	for r := range results {
		switch {
		case r.Status == 201:
			created++
		case r.Status == 409 && r.problemType() == payment.ProblemRefundExceeds:
		default:
			t.Errorf("refund = %d %s, want 201 or 409 %s", r.Status, r.Body, payment.ProblemRefundExceeds)
		}
	}
	e.Sim.SetFaults(sim.Faults{})
	total, byKey := e.providerRefunds()
	var called int
	for _, c := range e.Sim.Calls() {
		if c.Refunds > 0 {
			called++
		}
	}
	if created > 3 || called > 3 || total > 1000 {
		t.Errorf("%d refunds created, %d keys reached the provider, %d refunded; want at most 3, 3, 1000", created, called, total)
	}
	for k, n := range byKey {
		if n != 1 {
			t.Errorf("provider refunds under %s = %d, want 1", k, n)
		}
	}
	v := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if v.AmountRefunded != total || v.AmountRefunded != int64(created)*300 {
		t.Errorf("oncepay refunded %d (%d created), provider %d; want equal", v.AmountRefunded, created, total)
	}
}

// A refund's lost provider answer is a 503 naming the refund and its
// payment, like every refund problem: the merchant can read the refund, in
// progress, and the retry with the same key learns it was made.
func TestRefundOutcomeUnknownNamesIt(t *testing.T) {
	e := newEnv(t, envOptions{})
	id := e.paid("order-1")
	e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
	r := e.refund(id, "refund-lost", `{"amount":300}`)
	e.Sim.SetFaults(sim.Faults{})
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	if r.Status != 503 || p.Type != payment.ProblemOutcomeUnknown || p.PaymentID != id || p.RefundID == "" {
		t.Fatalf("lost refund answer = %d %s, want 503 outcome unknown naming payment %s and the refund", r.Status, r.Body, id)
	}
	var list struct{ Data []payment.RefundView }
	json.Unmarshal(e.do("GET", "/v1/payments/"+id+"/refunds", nil).Body, &list)
	if len(list.Data) != 1 || list.Data[0].ID != p.RefundID || list.Data[0].Status != payment.InProgress {
		t.Errorf("refunds after the 503 = %+v, want refund %s in progress", list.Data, p.RefundID)
	}
	r = e.refund(id, "refund-lost", `{"amount":300}`)
	var v payment.RefundView
	json.Unmarshal(r.Body, &v)
	if r.Status != 201 || v.ID != p.RefundID || v.Amount != 300 {
		t.Errorf("retry = %d %s, want 201 of refund %s", r.Status, r.Body, p.RefundID)
	}
	if total, byKey := e.providerRefunds(); total != 300 || len(byKey) != 1 {
		t.Errorf("provider refunded %d under %d keys, want 300 under one", total, len(byKey))
	}
}

// A refund whose owner died after the provider refunded is settled by
// reconcile asking the provider by key, and its amount counts as refunded.
func TestReconcileStuckRefund(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{now: clock})
	id := e.paid("order-1")
	ctx := context.Background()
	req, err := payment.ParseRefundRequest(id, []byte(`{"amount":250}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, refunded := range []bool{true, false} {
		key := fmt.Sprintf("stuck-%v", refunded)
		a := payment.NewRefundAttempt("demo", key, req, clock(), time.Second)
		if ok, err := e.DB.Claim(ctx, &a); !ok || err != nil {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		if refunded {
			p, _ := e.DB.Payment(ctx, "demo", id)
			if _, err := e.Sim.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: payment.RefundDownstreamKey("demo", key),
				ChargeID: p.ChargeID, Amount: 250, Currency: "EUR"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v := e.do("GET", "/v1/payments/"+id, nil).payment(t); v.AmountRefunded != 0 || len(v.Refunds) != 2 {
		t.Fatalf("before reconcile: %+v", v)
	}
	mu.Lock()
	now = now.Add(10 * time.Minute)
	mu.Unlock()
	res, err := e.Reconciler.RunOnce(ctx)
	if err != nil || res.Succeeded != 1 || res.Failed != 1 {
		t.Fatalf("reconcile = %+v, %v; want one succeeded, one not completed", res, err)
	}
	v := e.do("GET", "/v1/payments/"+id, nil).payment(t)
	if total, _ := e.providerRefunds(); v.AmountRefunded != 250 || total != 250 {
		t.Errorf("refunded: oncepay %d, provider %d; want 250 both", v.AmountRefunded, total)
	}
	// The not-completed one gave its reservation back: the rest is refundable.
	if r := e.refund(id, "rest", `{}`); r.Status != 201 {
		t.Errorf("refund of the rest = %d %s", r.Status, r.Body)
	}
	if v := e.do("GET", "/v1/payments/"+id, nil).payment(t); v.AmountRefunded != 1000 {
		t.Errorf("refunded %d, want 1000", v.AmountRefunded)
	}
}

// After its key's record is purged the payment is still readable and
// refundable, and the same key with the same body is told it expired,
// naming the payment: never a second charge, even with the provider's own
// key memory off.
func TestPaymentOutlivesItsKey(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{now: clock, faults: sim.Faults{NoDedupe: true}})
	id := e.paid("order-1")
	if r := e.refund(id, "refund-1", `{"amount":100,"reason":"requested_by_customer"}`); r.Status != 201 {
		t.Fatalf("refund = %d %s", r.Status, r.Body)
	}
	mu.Lock()
	now = now.Add(25 * time.Hour)
	mu.Unlock()
	res, err := (&payment.Purger{Store: e.DB, Now: clock, Retention: 24 * time.Hour, BatchSize: 10}).RunOnce(context.Background())
	if err != nil || res.Deleted != 2 {
		t.Fatalf("purge = %+v, %v; want both keys' records deleted", res, err)
	}
	g := e.do("GET", "/v1/payments/"+id, nil)
	v := g.payment(t)
	if g.Status != 200 || v.Status != payment.Succeeded || v.AmountRefunded != 100 || len(v.Refunds) != 1 || v.IdempotencyKey != "" {
		t.Fatalf("GET after purge = %d %s", g.Status, g.Body)
	}
	for _, tt := range []struct{ name, path, key, body, id string }{
		{"payment", "/v1/payments", "order-1", visa, id},
		{"refund", "/v1/payments/" + id + "/refunds", "refund-1", `{"amount":100,"reason":"requested_by_customer"}`, id},
	} {
		r := e.do("POST", tt.path, []byte(tt.body), "Idempotency-Key", tt.key, "Content-Type", "application/json")
		var p payment.Problem
		json.Unmarshal(r.Body, &p)
		if r.Status != 409 || p.Type != payment.ProblemKeyExpired || p.PaymentID != tt.id {
			t.Errorf("%s retried after purge = %d %s, want 409 %s naming %s", tt.name, r.Status, r.Body, payment.ProblemKeyExpired, tt.id)
		}
	}
	if l := e.ledger(); len(l) != 1 {
		t.Errorf("ledger = %v, want one charge", l)
	}
	if total, _ := e.providerRefunds(); total != 100 {
		t.Errorf("provider refunded %d, want 100", total)
	}
	if r := e.refund(id, "refund-2", `{}`); r.Status != 201 {
		t.Errorf("a new refund after the purge = %d %s", r.Status, r.Body)
	}
	if v := e.do("GET", "/v1/payments/"+id, nil).payment(t); v.AmountRefunded != 1000 {
		t.Errorf("refunded %d, want 1000", v.AmountRefunded)
	}
}

// A refund the service refuses is a documented 4xx, reserves nothing and
// leaves its key usable.
func TestRefundBadInput(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	_, shopA := e.apiKey("Shop A")
	_, shopB := e.apiKey("Shop B")
	auth := func(secret string) []string { return []string{"Authorization", "Bearer " + secret} }
	id := e.paid("order-1", auth(shopA)...)
	other := e.paid("order-1", auth(shopB)...)
	declined := e.pay("order-2", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`, auth(shopA)...)
	if declined.Status != 402 {
		t.Fatalf("declined payment = %d", declined.Status)
	}
	var dp payment.Problem
	json.Unmarshal(declined.Body, &dp)
	for _, tt := range []struct {
		name, id, body string
		status         int
		typ            string
	}{
		{"negative", id, `{"amount":-1}`, 400, payment.ProblemInvalidRequest},
		{"zero", id, `{"amount":0}`, 400, payment.ProblemInvalidRequest},
		{"fractional", id, `{"amount":1.5}`, 400, payment.ProblemInvalidRequest},
		{"over the rest", id, `{"amount":1001}`, 409, payment.ProblemRefundExceeds},
		{"unknown reason", id, `{"reason":"because"}`, 400, payment.ProblemInvalidRequest},
		{"unknown field", id, `{"amount":1,"currency":"EUR"}`, 400, payment.ProblemInvalidRequest},
		{"malformed", id, `{"amount":`, 400, payment.ProblemInvalidRequest},
		{"foreign payment id", "pay_NOSUCHPAYMENT", `{}`, 404, payment.ProblemNotFound},
		{"other merchant's payment", other, `{}`, 404, payment.ProblemNotFound},
		{"declined payment", dp.PaymentID, `{}`, 409, payment.ProblemNotRefundable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.refund(tt.id, "refund-key", tt.body, auth(shopA)...)
			if r.Status != tt.status || r.problemType() != tt.typ {
				t.Errorf("refund = %d %s, want %d %s", r.Status, r.Body, tt.status, tt.typ)
			}
		})
	}
	if total, _ := e.providerRefunds(); total != 0 {
		t.Errorf("provider refunded %d, want nothing", total)
	}
	if p, err := e.DB.Payment(context.Background(), e.scopeOf(t, id, shopA), id); err != nil || p.AmountReserved != 0 || p.AmountRefunded != 0 {
		t.Errorf("payment after refusals = %+v, %v; want nothing reserved", p, err)
	}
	// The key was never spent: a good refund under it works.
	if r := e.refund(id, "refund-key", `{"amount":1000}`, auth(shopA)...); r.Status != 201 {
		t.Errorf("refund with the same key afterwards = %d %s", r.Status, r.Body)
	}
	// Nothing is left now, so another refund is refused, and sends nothing.
	if r := e.refund(id, "refund-key-2", `{}`, auth(shopA)...); r.Status != 409 || r.problemType() != payment.ProblemRefundExceeds {
		t.Errorf("refund of a refunded payment = %d %s", r.Status, r.Body)
	}
	if total, _ := e.providerRefunds(); total != 1000 {
		t.Errorf("provider refunded %d, want 1000", total)
	}
}

// scopeOf is the merchant scope payment id belongs to, read as its owner.
func (e *env) scopeOf(t *testing.T, id, secret string) string {
	t.Helper()
	var v struct{ ID string }
	r := e.do("GET", "/v1/payments/"+id, nil, "Authorization", "Bearer "+secret)
	json.Unmarshal(r.Body, &v)
	if v.ID != id {
		t.Fatalf("GET %s = %d", id, r.Status)
	}
	p, err := e.DB.ListAttempts(context.Background(), payment.AttemptFilter{Search: id, Limit: 1})
	if err != nil || len(p) != 1 {
		t.Fatalf("attempt of %s: %v", id, err)
	}
	return p[0].Scope
}

// An empty body needs no Content-Type and refunds all that is left, as the
// document says; a body without one is still 415.
func TestRefundEmptyBodyWithoutContentType(t *testing.T) {
	e := newEnv(t, envOptions{})
	id := e.paid("unlabelled")
	if r := e.do("POST", "/v1/payments/"+id+"/refunds", []byte(`{"amount":100}`), "Idempotency-Key", "unlabelled-body"); r.Status != 415 || r.problemType() != payment.ProblemUnsupportedMedia {
		t.Errorf("body without Content-Type = %d %s, want 415 %s", r.Status, r.Body, payment.ProblemUnsupportedMedia)
	}
	r := e.do("POST", "/v1/payments/"+id+"/refunds", nil, "Idempotency-Key", "unlabelled-empty")
	if r.Status != 201 {
		t.Fatalf("empty body without Content-Type = %d %s, want 201", r.Status, r.Body)
	}
	var rf payment.RefundView
	if err := json.Unmarshal(r.Body, &rf); err != nil || rf.Amount != 1000 {
		t.Errorf("refund = %s (%v), want all 1000 refunded", r.Body, err)
	}
}
