package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// 1,000 concurrent requests with one key and one body, for 10 keys at once:
// one charge call per key, and every answer is the stored 201 or a 409 in
// progress. Again against a provider that charges every call it gets (no
// dedupe): then only oncepay's claim keeps the ledger at one charge a key.
// On each store.
func TestConcurrentSameKeyStorm(t *testing.T) {
	for _, st := range stores {
		for _, tt := range []struct {
			name   string
			perKey int
			faults sim.Faults
		}{
			{"provider dedupes", 1000, sim.Faults{Latency: 50 * time.Millisecond}},
			{"provider charges every call", 300, sim.Faults{Latency: 50 * time.Millisecond, NoDedupe: true}},
		} {
			t.Run(st.name+"/"+tt.name, func(t *testing.T) {
				storm(t, envOptions{faults: tt.faults, postgres: st.postgres}, 10, tt.perKey)
			})
		}
	}
}

func storm(t *testing.T, o envOptions, keys, perKey int) {
	e := newEnv(t, o)
	type result struct {
		key string
		r   response
	}
	results := make(chan result, keys*perKey)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k := range keys {
		key := fmt.Sprintf("storm-%d", k)
		for range perKey {
			wg.Go(func() {
				<-start
				results <- result{key, e.pay(key, visa)}
			})
		}
	}
	begun := time.Now()
	close(start)
	wg.Wait()
	close(results)
	elapsed := time.Since(begun)

	bodies := map[string]map[string]bool{}
	var created, replayed, inProgress int
	for res := range results {
		switch {
		case res.r.Status == 201:
			created++
			if res.r.Header.Get("Idempotent-Replayed") == "true" {
				replayed++
			}
			if bodies[res.key] == nil {
				bodies[res.key] = map[string]bool{}
			}
			bodies[res.key][string(res.r.Body)] = true
		case res.r.Status == 409 && res.r.problemType() == payment.ProblemInProgress:
			inProgress++
			if res.r.Header.Get("Retry-After") == "" {
				t.Errorf("409 in progress without Retry-After")
			}
		default:
			t.Errorf("key %s: status %d %s, want 201 or 409 in progress", res.key, res.r.Status, res.r.Body)
		}
	}
	ledger, calls := e.ledger(), e.Calls()
	if len(ledger) != keys {
		t.Errorf("ledger has charges for %d keys, want %d", len(ledger), keys)
	}
	for k := range keys {
		key := fmt.Sprintf("storm-%d", k)
		dk := payment.DownstreamKey("demo", key)
		if c := calls[dk]; c.Charges != 1 || c.Lookups != 0 {
			t.Errorf("key %s: provider calls = %+v, want one charge and no lookup", key, c)
		}
		charges := ledger[dk]
		if len(charges) != 1 {
			t.Fatalf("key %s: %d charges, want 1", key, len(charges))
		}
		if len(bodies[key]) != 1 {
			t.Errorf("key %s: %d distinct 201 bodies, want 1", key, len(bodies[key]))
		}
		for b := range bodies[key] {
			if !strings.Contains(b, charges[0].ID) {
				t.Errorf("key %s: 201 %s does not name the ledger's charge %s", key, b, charges[0].ID)
			}
		}
	}
	t.Logf("storm: %d requests in %v: %d 201 (%d replayed), %d 409 in progress, %d charges",
		keys*perKey, elapsed.Round(time.Millisecond), created, replayed, inProgress, len(ledger))
}

// The provider charges but its answer is lost, most of the time. Clients
// retrying with their key end with exactly one charge each, made by one
// charge call (each retry finds it by lookup), and the 201 they finally get
// names the ledger's charge; the same against a provider without dedupe.
// On each store.
func TestLostResponsesRetried(t *testing.T) {
	for _, st := range stores {
		for _, dedupe := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dedupe=%v", st.name, dedupe), func(t *testing.T) {
				lostResponsesRetried(t, envOptions{faults: sim.Faults{FailAfterCharge: 0.8, NoDedupe: !dedupe}, postgres: st.postgres})
			})
		}
	}
}

func lostResponsesRetried(t *testing.T, o envOptions) {
	e := newEnv(t, o)
	const clients = 20
	var wg sync.WaitGroup
	finals := make([]response, clients)
	for i := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("lost-%d", i)
			for try := 0; try < 200; try++ {
				r := e.pay(key, visa)
				if r.Status == 503 && r.problemType() == payment.ProblemOutcomeUnknown {
					if r.Header.Get("Retry-After") == "" {
						t.Errorf("503 outcome unknown without Retry-After")
					}
					continue
				}
				if r.Status == 409 && r.problemType() == payment.ProblemInProgress {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				finals[i] = r
				return
			}
		})
	}
	wg.Wait()
	ledger, calls := e.ledger(), e.Calls()
	for i, r := range finals {
		key := fmt.Sprintf("lost-%d", i)
		if r.Status != 201 {
			t.Fatalf("key %s: final status %d %s, want 201", key, r.Status, r.Body)
		}
		dk := payment.DownstreamKey("demo", key)
		charges := ledger[dk]
		if len(charges) != 1 {
			t.Fatalf("key %s: %d charges, want 1", key, len(charges))
		}
		if c := calls[dk]; c.Charges != 1 {
			t.Errorf("key %s: provider calls = %+v, want one charge call", key, c)
		}
		if got := r.payment(t).ChargeID; got != charges[0].ID {
			t.Errorf("key %s: charge_id = %s, want the ledger's %s", key, got, charges[0].ID)
		}
	}
	if len(ledger) != clients {
		t.Errorf("ledger has %d keys, want %d", len(ledger), clients)
	}
}

// Two merchants with the same Idempotency-Key get two independent payments
// and can neither read nor replay each other's.
func TestSameKeyTwoMerchants(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	scopeA, a := e.apiKey("shop-a")
	scopeB, b := e.apiKey("shop-b")
	ra := e.pay("order-1", visa, "Authorization", "Bearer "+a)
	rb := e.pay("order-1", `{"amount":2500,"currency":"USD","source":"tok_visa"}`, "Authorization", "Bearer "+b)
	if ra.Status != 201 || rb.Status != 201 {
		t.Fatalf("statuses = %d, %d, want 201, 201 (%s %s)", ra.Status, rb.Status, ra.Body, rb.Body)
	}
	pa, pb := ra.payment(t), rb.payment(t)
	if pa.ID == pb.ID || pa.ChargeID == pb.ChargeID {
		t.Errorf("payments share id or charge: %+v %+v", pa, pb)
	}
	ledger := e.ledger()
	if len(ledger[payment.DownstreamKey(scopeA, "order-1")]) != 1 || len(ledger[payment.DownstreamKey(scopeB, "order-1")]) != 1 {
		t.Errorf("ledger = %v, want one charge for each merchant", ledger)
	}
	if r := e.do("GET", "/v1/payments/"+pb.ID, nil, "Authorization", "Bearer "+a); r.Status != 404 {
		t.Errorf("A reads B's payment: status %d, want 404", r.Status)
	}
	if r := e.do("GET", "/v1/payments/"+pa.ID, nil, "Authorization", "Bearer "+a); r.Status != 200 || !bytes.Equal(r.Body, ra.Body) {
		t.Errorf("A reads its own payment: %d %s, want 200 %s", r.Status, r.Body, ra.Body)
	}
	if r := e.pay("order-1", visa, "Authorization", "Bearer "+a); !bytes.Equal(r.Body, ra.Body) {
		t.Errorf("A's replay = %s, want its own %s", r.Body, ra.Body)
	}
	if r := e.pay("order-1", visa, "Authorization", "Bearer "+b); r.Status != 409 || r.problemType() != payment.ProblemKeyReused {
		t.Errorf("B sends A's body under its own key: %d %s, want 409 key reused", r.Status, r.Body)
	}
}

// A restart on the same files replays byte for byte, successes and declines.
func TestReplayAfterRestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, envOptions{dir: dir})
	ok := e.pay("restart-ok", `{"amount":1999,"currency":"GBP","source":"tok_visa","description":"Tea <b>&</b> cake","metadata":{"order":"42","é":"ü"}}`)
	declined := e.pay("restart-declined", `{"amount":500,"currency":"GBP","source":"tok_chargeDeclinedInsufficientFunds"}`)
	if ok.Status != 201 || declined.Status != 402 {
		t.Fatalf("statuses = %d, %d, want 201, 402", ok.Status, declined.Status)
	}
	e.Close()

	e2 := newEnv(t, envOptions{dir: dir})
	for _, tt := range []struct {
		key, body string
		first     response
	}{
		{"restart-ok", `{"metadata":{"é":"ü","order":"42"},"amount":1999,"currency":"GBP","source":"tok_visa","description":"Tea <b>&</b> cake"}`, ok},
		{"restart-declined", `{"amount":500,"currency":"GBP","source":"tok_chargeDeclinedInsufficientFunds"}`, declined},
	} {
		r := e2.pay(tt.key, tt.body)
		if r.Status != tt.first.Status || !bytes.Equal(r.Body, tt.first.Body) {
			t.Errorf("%s after restart = %d %q, want %d %q", tt.key, r.Status, r.Body, tt.first.Status, tt.first.Body)
		}
		if r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s after restart: no Idempotent-Replayed header", tt.key)
		}
		if r.Header.Get("Content-Type") != tt.first.Header.Get("Content-Type") {
			t.Errorf("%s: Content-Type = %q, want %q", tt.key, r.Header.Get("Content-Type"), tt.first.Header.Get("Content-Type"))
		}
	}
	if n := len(e2.ledger()); n != 1 {
		t.Errorf("ledger has %d charges, want 1", n)
	}
}

// A decline is final: stored, replayed, and never retried at the provider.
func TestDeclineStoredAndReplayed(t *testing.T) {
	e := newEnv(t, envOptions{})
	body := `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`
	first := e.pay("declined", body)
	if first.Status != 402 || first.problemType() != payment.ProblemDeclined {
		t.Fatalf("first = %d %s, want 402 declined", first.Status, first.Body)
	}
	e.Sim.SetFaults(sim.Faults{FailBeforeCharge: 1}) // a replay that reached the provider would fail
	again := e.pay("declined", body)
	if again.Status != 402 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay = %d %s, want the stored 402 %s", again.Status, again.Body, first.Body)
	}
	if got := e.counts()[payment.Failed]; got != 1 {
		t.Errorf("failed attempts = %d, want 1", got)
	}
}

// A retry while the first request still runs gets 409 with Retry-After.
func TestRetryWhileInProgress(t *testing.T) {
	e := newEnv(t, envOptions{faults: sim.Faults{Latency: 500 * time.Millisecond}})
	done := make(chan response)
	go func() { done <- e.pay("slow", visa) }()
	for { // wait for the first request's claim
		if _, err := e.DB.Attempt(context.Background(), "demo", "slow"); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r := e.pay("slow", visa)
	if r.Status != 409 || r.problemType() != payment.ProblemInProgress || r.Header.Get("Retry-After") != "1" {
		t.Errorf("retry while in progress = %d %v %s, want 409 in progress with Retry-After: 1", r.Status, r.Header, r.Body)
	}
	if first := <-done; first.Status != 201 {
		t.Errorf("first = %d %s, want 201", first.Status, first.Body)
	}
}

// A lost provider answer is a 503 that stores nothing and releases the
// lease, so the very next retry takes over, asks the provider, and learns
// the charge without charging again.
func TestOutcomeUnknownThenRecovered(t *testing.T) {
	e := newEnv(t, envOptions{faults: sim.Faults{FailAfterCharge: 1}})
	r := e.pay("unknown", visa)
	if r.Status != 503 || r.problemType() != payment.ProblemOutcomeUnknown || r.Header.Get("Retry-After") == "" {
		t.Fatalf("lost answer = %d %v %s, want 503 outcome unknown with Retry-After", r.Status, r.Header, r.Body)
	}
	a, err := e.DB.Attempt(context.Background(), "demo", "unknown")
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != payment.InProgress || !a.LeaseExpiresAt.IsZero() || a.ResponseBody != nil {
		t.Errorf("attempt after 503 = %s lease %v body %q, want in progress, no lease, nothing stored", a.Status, a.LeaseExpiresAt, a.ResponseBody)
	}
	// The 503 names the payment, which the merchant can read while it waits.
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	if p.PaymentID != a.ID {
		t.Errorf("503 payment_id = %q, want %q", p.PaymentID, a.ID)
	}
	if got := e.do("GET", "/v1/payments/"+a.ID, nil); got.Status != 200 || got.payment(t).Status != payment.InProgress {
		t.Errorf("GET the payment of the 503 = %d %s, want 200 in progress", got.Status, got.Body)
	}
	e.Sim.SetFaults(sim.Faults{NoDedupe: true}) // charging again would charge twice: the retry must find the charge by lookup
	r = e.pay("unknown", visa)
	dk := payment.DownstreamKey("demo", "unknown")
	charges := e.ledger()[dk]
	if r.Status != 201 || len(charges) != 1 || r.payment(t).ChargeID != charges[0].ID {
		t.Fatalf("retry = %d %s with ledger %v, want 201 naming the one charge", r.Status, r.Body, charges)
	}
	if c := e.Calls()[dk]; c.Charges != 1 || c.Lookups != 1 {
		t.Errorf("provider calls = %+v, want the first request's charge and the retry's lookup", c)
	}
}

// An owner that died holding its claim leaves a lease that expires; the next
// retry takes over. If the provider has the charge it is reported, else the
// retry charges with the same downstream key.
func TestTakeOverAbandonedClaim(t *testing.T) {
	for _, charged := range []bool{true, false} {
		t.Run(fmt.Sprintf("charged=%v", charged), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			req, _ := payment.ParseRequest([]byte(visa))
			past := time.Now().Add(-time.Minute)
			dead := payment.NewAttempt("demo", "abandoned", req, past, time.Second)
			if ok, err := e.DB.Claim(context.Background(), &dead); !ok || err != nil {
				t.Fatalf("Claim = %v, %v", ok, err)
			}
			dk := payment.DownstreamKey("demo", "abandoned")
			var want string
			if charged {
				c, err := e.Sim.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: dk,
					Amount: 1000, Currency: "EUR", Source: "tok_visa"})
				if err != nil {
					t.Fatal(err)
				}
				want = c.ID
			}
			// A provider without dedupe: a charge call the lookup should
			// have spared shows as a second charge.
			e.Sim.SetFaults(sim.Faults{NoDedupe: true})
			calls0 := e.Calls()[dk].Charges
			r := e.pay("abandoned", visa)
			charges := e.ledger()[dk]
			if r.Status != 201 || len(charges) != 1 {
				t.Fatalf("takeover = %d %s, ledger %v; want 201 and one charge", r.Status, r.Body, charges)
			}
			wantCalls := sim.Calls{IdempotencyKey: dk, Charges: 1, Lookups: 1} // the lookup, then the charge
			if charged {
				wantCalls.Charges = calls0 // found by the lookup: no charge call
			}
			if got := e.Calls()[dk]; got != wantCalls {
				t.Errorf("provider calls = %+v, want %+v", got, wantCalls)
			}
			if charged && r.payment(t).ChargeID != want {
				t.Errorf("charge_id = %s, want the existing %s", r.payment(t).ChargeID, want)
			}
			if got := r.payment(t).ID; got != dead.ID {
				t.Errorf("payment id = %s, want the claimed %s", got, dead.ID)
			}
		})
	}
}

// A client that hangs up mid-charge does not abandon the charge: it is
// recorded, and the client's retry gets it.
func TestClientHangsUpMidCharge(t *testing.T) {
	e := newEnv(t, envOptions{faults: sim.Faults{Latency: 300 * time.Millisecond}})
	impatient := &http.Client{Timeout: 50 * time.Millisecond}
	req, _ := http.NewRequest("POST", e.Server.URL+"/v1/payments", strings.NewReader(visa))
	req.Header.Set("Idempotency-Key", "hangs-up")
	req.Header.Set("Content-Type", "application/json")
	if _, err := impatient.Do(req); err == nil {
		t.Fatal("the impatient client got an answer; want it to give up first")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		a, err := e.DB.Attempt(context.Background(), "demo", "hangs-up")
		if err == nil && a.Status == payment.Succeeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempt = %+v, %v; want it succeeded after the client left", a, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := e.pay("hangs-up", visa)
	charges := e.ledger()[payment.DownstreamKey("demo", "hangs-up")]
	if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" || len(charges) != 1 || r.payment(t).ChargeID != charges[0].ID {
		t.Errorf("retry = %d %s with ledger %v, want the replayed 201 of the one charge", r.Status, r.Body, charges)
	}
}

// "usd" (as Stripe's clients write it) and "USD" are one payment: a retry
// in the other case replays the first answer, which says "USD".
func TestCurrencyCaseIsOnePayment(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := e.pay("cur", `{"amount":700,"currency":"usd","source":"tok_visa"}`)
	if first.Status != 201 || first.payment(t).Currency != "USD" {
		t.Fatalf("first = %d %s, want 201 in USD", first.Status, first.Body)
	}
	again := e.pay("cur", `{"amount":700,"currency":"USD","source":"tok_visa"}`)
	if again.Status != 201 || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry in upper case = %d %s, want the replayed %s", again.Status, again.Body, first.Body)
	}
	if n := len(e.ledger()); n != 1 {
		t.Errorf("ledger has %d keys charged, want 1", n)
	}
}
