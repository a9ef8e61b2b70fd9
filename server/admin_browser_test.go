package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oncepay/oncepay/payment"
)

// newBrowser starts headless Chromium with a fresh profile and no network
// chatter of its own. Without Chromium the test skips, except in CI, where
// a missing browser is a failure (scripts/test.sh installs it).
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	return newBrowserFor(t, 60*time.Second)
}

// newBrowserFor is newBrowser for a test whose steps take up to d in all.
func newBrowserFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("chromium not found: CI must install it (scripts/test.sh does)")
		}
		t.Skip("chromium not installed; scripts/test.sh installs it")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless, chromedp.NoSandbox, chromedp.NoFirstRun, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, d)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// run runs browser steps or fails the test.
func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// xssPayloads would each set document.title if they ever ran as markup.
// They have no spaces, so they fit in an Idempotency-Key too.
var xssPayloads = []string{
	`<script>document.title='pwned'</script>`,
	`<img/src=x/onerror=document.title='pwned'>`,
	`<svg/onload=document.title='pwned'>`,
}

// The admin page in a real browser: it lists what the API created, shows
// stored payloads as text that never runs, filters, searches, and
// "reconcile now" settles a stale attempt.
func TestAdminInBrowser(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{now: clock})
	ctx := newBrowser(t)

	for i, key := range []string{"order-1001", "order-1002", "order-1003"} {
		if r := e.pay(key, `{"amount":`+[]string{"1999", "4250", "120000"}[i]+`,"currency":"EUR","source":"tok_visa","description":"Espresso beans"}`); r.Status != 201 {
			t.Fatalf("pay %s = %d", key, r.Status)
		}
	}
	e.pay("order-1004", `{"amount":899,"currency":"USD","source":"tok_chargeDeclinedInsufficientFunds"}`)
	for i, p := range xssPayloads {
		body := `{"amount":100,"currency":"EUR","source":"tok_visa","description":` + quote(p) + `,"metadata":{"note":` + quote(p) + `}}`
		if r := e.pay("xss-"+string(rune('a'+i))+p, body); r.Status != 201 {
			t.Fatalf("pay xss %d = %d %s", i, r.Status, r.Body)
		}
	}
	req, _ := payment.ParseRequest([]byte(visa))
	stuck := payment.NewAttempt("demo", "order-1005-stuck", req, now, time.Second)
	if ok, err := e.DB.Claim(context.Background(), &stuck); !ok || err != nil {
		t.Fatal(ok, err)
	}
	mu.Lock()
	now = now.Add(7 * time.Minute) // the claim is now stale
	mu.Unlock()

	base := e.Server.URL
	run(t, ctx, chromedp.Navigate(base+"/admin"), chromedp.WaitVisible(chromedp.CSS("table.attempts")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.attempts tbody tr").length`); n != 8 {
		t.Errorf("rows = %d, want 8", n)
	}
	keys := eval[[]string](t, ctx, `[...document.querySelectorAll("td.key")].map(td => td.textContent.trim())`)
	for i, p := range xssPayloads {
		if !slices.Contains(keys, "xss-"+string(rune('a'+i))+p) {
			t.Errorf("key with payload %q not shown as text; keys = %q", p, keys)
		}
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("tr.stale").length`); n != 1 {
		t.Errorf("stale rows highlighted = %d, want 1", n)
	}
	if e.screenshot(t, ctx, "admin.png") {
		t.Log("wrote docs/admin.png")
	}

	// Detail of a payload-laden attempt: the description and metadata are text.
	run(t, ctx, chromedp.Navigate(base+"/admin?q="+url.QueryEscape("xss-b"+xssPayloads[1])), chromedp.WaitVisible(chromedp.CSS("td.key a")), chromedp.Click(chromedp.CSS("td.key a")),
		chromedp.WaitVisible(chromedp.CSS(".detail")))
	if pre := eval[string](t, ctx, `document.querySelector(".detail pre").textContent`); !strings.Contains(pre, "onerror") {
		t.Errorf("request shown = %q, want the payload as text", pre)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll(".detail img, .detail svg, .detail script").length`); n != 0 {
		t.Errorf("detail page has %d img/svg/script elements, want 0", n)
	}
	if title := eval[string](t, ctx, `document.title`); title == "pwned" {
		t.Errorf("a stored payload ran")
	}

	// Filter by status.
	run(t, ctx, chromedp.Navigate(base+"/admin"), chromedp.WaitVisible(chromedp.CSS("a.card.bad")), chromedp.Click(chromedp.CSS("a.card.bad")),
		chromedp.WaitVisible(chromedp.CSS("a.card.bad.active")))
	statuses := eval[[]string](t, ctx, `[...document.querySelectorAll("tbody tr")].map(tr => tr.dataset.status)`)
	if len(statuses) != 1 || statuses[0] != "failed" {
		t.Errorf("failed filter shows %q, want one failed", statuses)
	}

	// Search by key.
	run(t, ctx, chromedp.Navigate(base+"/admin"), chromedp.WaitVisible(chromedp.ID("q")),
		chromedp.SendKeys(chromedp.ID("q"), "order-1002"), chromedp.Submit(chromedp.ID("q")),
		chromedp.WaitVisible(chromedp.CSS("a.clear")))
	if keys := eval[[]string](t, ctx, `[...document.querySelectorAll("td.key")].map(td => td.textContent.trim())`); len(keys) != 1 || keys[0] != "order-1002" {
		t.Errorf("search shows %q, want [order-1002]", keys)
	}

	// Reconcile now: the stale attempt is settled by asking the provider.
	run(t, ctx, chromedp.Navigate(base+"/admin/attempts/"+stuck.ID), chromedp.WaitVisible(chromedp.ID("reconcile-one")))
	e.screenshot(t, ctx, "admin-stale.png")
	run(t, ctx, chromedp.Click(chromedp.ID("reconcile-one")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := eval[string](t, ctx, `document.querySelector("p.flash").textContent`); !strings.Contains(flash, "now failed") {
		t.Errorf("flash = %q, want the attempt now failed", flash)
	}
	if pill := eval[string](t, ctx, `document.querySelector(".detail h1 .pill").textContent`); pill != "failed" {
		t.Errorf("status shown = %q, want failed", pill)
	}
	if title := eval[string](t, ctx, `document.title`); title == "pwned" {
		t.Errorf("a stored payload ran")
	}
}

// The inbox page in a real browser: an event that could not be applied is
// listed failed with its last error, and Redeliver, once the request that
// held its payment is gone, applies it: the row turns processed.
func TestAdminEventsInBrowser(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{now: clock})
	ctx := newBrowser(t)

	a, c := e.stuck("k-held")
	// A retry took the attempt over and is still calling the provider.
	if _, ok, err := e.DB.TakeOver(context.Background(), "demo", "k-held", a.Fence, now, now.Add(time.Hour)); !ok || err != nil {
		t.Fatalf("TakeOver = %v, %v", ok, err)
	}
	if r := e.webhook("msg_held", time.Now(), simWebhookSecret, simEvent(a, c)); r.Status != 503 {
		t.Fatalf("webhook = %d %s, want 503: the attempt is held", r.Status, r.Body)
	}
	if e.webhook("msg_other", time.Now(), simWebhookSecret, []byte(`{"type":"customer.created","timestamp":"2026-01-01T00:00:00Z","data":{}}`)).Status != 200 {
		t.Fatalf("an unused event type was not accepted")
	}

	base := e.Server.URL
	failedRow := `tr[data-state="failed"]`
	run(t, ctx, chromedp.Navigate(base+"/admin/events"), chromedp.WaitVisible(chromedp.CSS("table.events")))
	if n := eval[int](t, ctx, `document.querySelectorAll("table.events tbody tr").length`); n != 2 {
		t.Errorf("rows = %d, want 2", n)
	}
	if id := eval[string](t, ctx, `document.querySelector('`+failedRow+` td[data-label="Event"]').textContent`); id != "msg_held" {
		t.Errorf("failed event = %q, want msg_held", id)
	}
	if st := eval[string](t, ctx, `document.querySelector('`+failedRow+` .pill').textContent`); st != "failed" {
		t.Errorf("state shown = %q, want failed", st)
	}
	if msg := eval[string](t, ctx, `document.querySelector('`+failedRow+` td[data-label="Result"]').textContent`); !strings.Contains(msg, "A request holds this payment") {
		t.Errorf("last error shown = %q, want why it was not applied", msg)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("button").length`); n != 1 {
		t.Errorf("%d buttons, want one Redeliver, on the failed event only", n)
	}

	// Filter by state.
	run(t, ctx, chromedp.Navigate(base+"/admin/events?state=ignored"), chromedp.WaitVisible(chromedp.CSS("table.events")))
	if states := eval[[]string](t, ctx, `[...document.querySelectorAll("tbody tr")].map(tr => tr.dataset.state)`); len(states) != 1 || states[0] != "ignored" {
		t.Errorf("ignored filter shows %q, want one ignored", states)
	}

	// The retry died; Redeliver applies the event.
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	run(t, ctx, chromedp.Navigate(base+"/admin/events"), chromedp.WaitVisible(chromedp.CSS(failedRow+" button")),
		chromedp.Click(chromedp.CSS(failedRow+" button")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := eval[string](t, ctx, `document.querySelector("p.flash").textContent`); !strings.Contains(flash, "now processed") {
		t.Errorf("flash = %q, want the event now processed", flash)
	}
	row := `[...document.querySelectorAll("tbody tr")].find(tr => tr.querySelector('td[data-label="Event"]').textContent === "msg_held")`
	if st := eval[string](t, ctx, row+`.dataset.state`); st != "processed" {
		t.Errorf("state after Redeliver = %q, want processed", st)
	}
	if n := eval[int](t, ctx, row+`.querySelectorAll("button").length`); n != 0 {
		t.Errorf("a processed event still offers Redeliver")
	}
	if got, _ := e.DB.Attempt(context.Background(), "demo", "k-held"); got.Status != payment.Succeeded || got.ChargeID != c.ID {
		t.Errorf("attempt = %s %q, want succeeded with the provider's charge %s", got.Status, got.ChargeID, c.ID)
	}
	if n := len(e.ledger()[payment.DownstreamKey("demo", "k-held")]); n != 1 {
		t.Errorf("ledger holds %d charges, want 1", n)
	}
}

// screenshot writes the page to docs/NAME when ONCEPAY_SCREENSHOTS is set:
// how the pictures in docs/ are made.
func (e *env) screenshot(t *testing.T, ctx context.Context, name string) bool {
	if os.Getenv("ONCEPAY_SCREENSHOTS") == "" {
		return false
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	return true
}

func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `"`, `\"`) + `"`
}

// Send again, clicked in a real browser: the page's own form passes the
// cross-origin check (the browser says same-origin), the delivery is sent
// through the deliverer and delivered, and the page says so.
func TestAdminSendAgainInBrowser(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx := newBrowser(t)
	m, err := e.DB.CreateMerchant(context.Background(), "Shop", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var answer, copies atomic.Int32
	answer.Store(http.StatusInternalServerError)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		copies.Add(1)
		w.WriteHeader(int(answer.Load()))
	}))
	t.Cleanup(hook.Close)
	ep, err := payment.NewEndpoint(m.ID, hook.URL, nil, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Service.Pay(context.Background(), m.ID, "k", payment.Request{Amount: 1999, Currency: "EUR", Source: "tok_visa"}); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Deliverer.RunOnce(context.Background()); err != nil || res.Retried != 1 {
		t.Fatalf("RunOnce = %+v, %v, want the 500 tried again later", res, err)
	}
	answer.Store(http.StatusNoContent)
	row := `tr[data-state="pending"]`
	run(t, ctx, chromedp.Navigate(e.Server.URL+"/admin/endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.CSS(row+" button")))
	if label := eval[string](t, ctx, `document.querySelector('`+row+` button').textContent`); label != "Send now" {
		t.Errorf("button = %q, want Send now", label)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(row+" button")), chromedp.WaitVisible(chromedp.CSS("p.flash")))
	if flash := eval[string](t, ctx, `document.querySelector("p.flash").textContent`); !strings.Contains(flash, "again: delivered") {
		t.Errorf("flash = %q, want it delivered", flash)
	}
	if st := eval[string](t, ctx, `document.querySelector("tbody tr").dataset.state`); st != "delivered" {
		t.Errorf("state after Send now = %q, want delivered", st)
	}
	if got := copies.Load(); got != 2 {
		t.Errorf("the endpoint got %d copies, want 2: the first try, and the one sent from the page", got)
	}
}
