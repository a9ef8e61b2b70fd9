package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/workshop"
)

// waitFor polls a JavaScript condition until it holds.
func waitFor(t *testing.T, ctx context.Context, cond string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond)); err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", cond)
}

// The workshop page in a real browser: with responses lost after charging,
// a retry storm makes the naive lane charge one checkout several times and
// the oncepay lane exactly once; each forgotten case shows its outcome.
func TestWorkshopInBrowser(t *testing.T) {
	e := newEnv(t, envOptions{workshop: true})
	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(e.Server.URL+"/demo"))
	waitFor(t, ctx, `document.body.dataset.ready === "true"`)
	key := eval[string](t, ctx, `document.querySelector("#checkout-key").textContent`)
	if !payment.ValidKey(key) {
		t.Fatalf("checkout key = %q, want a valid key", key)
	}
	// The key belongs to the checkout, not to the page load: a reload keeps it.
	run(t, ctx, chromedp.Reload())
	waitFor(t, ctx, `document.body.dataset.ready === "true"`)
	if again := eval[string](t, ctx, `document.querySelector("#checkout-key").textContent`); again != key {
		t.Errorf("checkout key after reload = %q, want %q", again, key)
	}

	run(t, ctx, chromedp.Click(chromedp.ID("fault-lose")))
	for e.Sim.Faults().FailAfterCharge != 1 { // the knob reaches the provider
		time.Sleep(10 * time.Millisecond)
	}
	run(t, ctx, chromedp.Click(chromedp.ID("storm")))
	waitFor(t, ctx, `!document.querySelector("#storm").disabled`)
	waitFor(t, ctx, `Number(document.querySelector("#oncepay-count").textContent) === 1 && Number(document.querySelector("#naive-count").textContent) > 1`)

	charges, err := e.Sim.Charges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var naive, real int
	for _, c := range charges {
		switch {
		case c.IdempotencyKey == payment.DownstreamKey("demo", key):
			real++
		case strings.HasPrefix(c.IdempotencyKey, workshop.NaiveKeyPrefix(key)):
			naive++
		}
	}
	if real != 1 || naive < 2 {
		t.Errorf("ledger for checkout %s: oncepay %d, naive %d; want 1 and more than 1", key, real, naive)
	}
	if shown := eval[int](t, ctx, `Number(document.querySelector("#naive-count").textContent)`); shown != naive {
		t.Errorf("naive counter = %d, want the ledger's %d", shown, naive)
	}
	e.screenshot(t, ctx, "workshop.png")

	for _, tt := range []struct{ button, log, outcome string }{
		{"case-reuse", "case-reuse-log", "idempotency-key-reused"},
		{"case-inprogress", "case-inprogress-log", "request-in-progress"},
		{"case-crash", "case-crash-log", "succeeded"},
	} {
		run(t, ctx, chromedp.Click(chromedp.ID(tt.button)))
		waitFor(t, ctx, `!document.querySelector("#`+tt.button+`").disabled && document.querySelectorAll("#`+tt.log+` li").length > 1`)
		outcomes := eval[[]string](t, ctx, `[...document.querySelectorAll("#`+tt.log+` li")].map(li => li.dataset.outcome || "")`)
		if !strings.Contains(strings.Join(outcomes, " "), tt.outcome) {
			t.Errorf("%s: outcomes %q, want %q", tt.button, outcomes, tt.outcome)
		}
	}
	crash := eval[[]string](t, ctx, `[...document.querySelectorAll("#case-crash-log li")].map(li => li.textContent)`)
	if len(crash) < 5 || !strings.Contains(crash[1], "in_progress") || !strings.Contains(crash[4], "201") {
		t.Errorf("crash story = %q, want stuck in progress, then reconciled, then the retry's 201", crash)
	}
	e.screenshot(t, ctx, "workshop-cases.png")

	run(t, ctx, chromedp.Click(chromedp.ID("new-checkout")))
	if next := eval[string](t, ctx, `document.querySelector("#checkout-key").textContent`); next == key || !payment.ValidKey(next) {
		t.Errorf("key after New checkout = %q, want a new valid key (was %q)", next, key)
	}
}

// Outside demo mode there is no route to the workshop or its naive path.
func TestNaivePathOnlyInDemo(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	_, secret := e.apiKey("shop")
	for _, path := range []string{"/demo/naive/payments", "/demo/crash", "/demo/reconcile"} {
		r := e.do("POST", path, []byte(visa), "Idempotency-Key", "k", "Content-Type", "application/json", "Authorization", "Bearer "+secret)
		if r.Status != 404 {
			t.Errorf("serve: POST %s = %d, want 404", path, r.Status)
		}
	}
	if r := e.do("GET", "/demo", nil); r.Status != 404 {
		t.Errorf("serve: GET /demo = %d, want 404", r.Status)
	}
	if n := len(e.ledger()); n != 0 {
		t.Errorf("ledger has %d charges, want none", n)
	}
}
