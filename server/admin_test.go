package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/server"
)

// In serve, the admin surface needs its own credential: without one
// configured it stays closed; merchant API keys never open it.
func TestAdminAccess(t *testing.T) {
	closed := newEnv(t, envOptions{auth: true})
	_, merchant := closed.apiKey("shop")
	for _, path := range []string{"/admin", "/v1/attempts"} {
		for name, h := range map[string][]string{
			"none":            nil,
			"merchant bearer": {"Authorization", "Bearer " + merchant},
			"any basic":       {"Authorization", "Basic YWRtaW46"},
		} {
			if r := closed.do("GET", path, nil, h...); r.Status != 401 {
				t.Errorf("closed %s with %s = %d, want 401", path, name, r.Status)
			}
		}
	}

	e := newEnv(t, envOptions{auth: true, adminToken: "s3cret-admin"})
	_, merchant = e.apiKey("shop")
	for name, tt := range map[string]struct {
		headers []string
		want    int
	}{
		"no credential":   {nil, 401},
		"merchant key":    {[]string{"Authorization", "Bearer " + merchant}, 401},
		"wrong token":     {[]string{"Authorization", "Bearer nope"}, 401},
		"bearer token":    {[]string{"Authorization", "Bearer s3cret-admin"}, 200},
		"basic password":  {[]string{"Authorization", basic("admin", "s3cret-admin")}, 200},
		"basic wrong one": {[]string{"Authorization", basic("admin", "s3cret-admin!")}, 401},
	} {
		for _, path := range []string{"/admin", "/v1/attempts"} {
			r := e.do("GET", path, nil, tt.headers...)
			if r.Status != tt.want {
				t.Errorf("%s %s = %d, want %d", name, path, r.Status, tt.want)
			}
			if r.Status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("%s %s: WWW-Authenticate = %q, want Basic", name, path, r.Header.Get("WWW-Authenticate"))
			}
		}
	}
	page := e.do("GET", "/admin", nil, "Authorization", "Bearer s3cret-admin")
	if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "unsafe") {
		t.Errorf("Content-Security-Policy = %q, want strict", csp)
	}
	if got := page.Header.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("X-Content-Type-Options = %q, want nosniff", got)
	}
	// A forged cross-site form carries the browser's Basic credentials; it is refused.
	r := e.do("POST", "/admin/reconcile", nil, "Authorization", "Bearer s3cret-admin", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
	if r.Status != 403 {
		t.Errorf("cross-site POST = %d, want 403", r.Status)
	}
	r = e.do("POST", "/admin/reconcile", nil, "Authorization", "Bearer s3cret-admin", "Sec-Fetch-Site", "same-origin")
	if r.Status != 200 { // the client follows the 303 to the list
		t.Errorf("same-origin POST = %d, want 200 after the redirect", r.Status)
	}
}

func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return req.Header.Get("Authorization")
}

// Stored values are shown as text, never as markup.
func TestAdminEscapesStoredValues(t *testing.T) {
	e := newEnv(t, envOptions{})
	payload := `<script>alert(1)</script>`
	r := e.pay("key-"+payload, `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"<img src=x onerror=alert(2)>","metadata":{"<svg onload=alert(3)>":"</pre><b>x</b>"}}`)
	if r.Status != 201 {
		t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	list := e.do("GET", "/admin", nil)
	detail := e.do("GET", "/admin/attempts/"+r.payment(t).ID, nil)
	for name, page := range map[string]response{"list": list, "detail": detail} {
		body := string(page.Body)
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg onload", "<b>x</b>"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s page contains raw %q", name, raw)
			}
		}
	}
	if !strings.Contains(string(list.Body), "key-&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("list page does not show the key as text")
	}
	if !strings.Contains(string(list.Body), `<span class="n">0</span><span class="label">in progress`) {
		t.Errorf("list page does not show a zero count")
	}
	if !strings.Contains(string(detail.Body), "Demo mode") {
		t.Errorf("demo admin page has no banner")
	}
}

// The detail page shows the payment's money and each refund, as text; the
// list shows refund attempts beside payment attempts, each with its kind.
func TestAdminShowsRefunds(t *testing.T) {
	e := newEnv(t, envOptions{})
	id := e.paid("order-1")
	refundKey := `refund-<script>alert(1)</script>`
	first := e.refund(id, refundKey, `{"amount":300,"reason":"requested_by_customer"}`)
	second := e.refund(id, "refund-2", `{"amount":200,"reason":"duplicate"}`)
	if first.Status != 201 || second.Status != 201 {
		t.Fatalf("refunds = %d %s, %d %s", first.Status, first.Body, second.Status, second.Body)
	}
	var r1, r2 payment.RefundView
	json.Unmarshal(first.Body, &r1)
	json.Unmarshal(second.Body, &r2)

	pay := string(e.do("GET", "/admin/attempts/"+id, nil).Body)
	refund := string(e.do("GET", "/admin/attempts/"+r1.ID, nil).Body)
	for name, page := range map[string]string{"payment": pay, "refund": refund} {
		for _, want := range []string{
			`<dd id="amount-refunded">5.00 EUR</dd>`, "<dt>Refundable</dt><dd>5.00 EUR</dd>",
			r1.ID, "3.00 EUR", "requested_by_customer",
			r2.ID, "2.00 EUR", "duplicate", `<span class="pill succeeded">succeeded</span>`,
			"refund-&lt;script&gt;alert(1)&lt;/script&gt;",
			r1.CreatedAt[:10], // the created date
		} {
			if !strings.Contains(page, want) {
				t.Errorf("%s page lacks %q", name, want)
			}
		}
		if strings.Contains(page, "<script>alert") {
			t.Errorf("%s page contains the key raw", name)
		}
	}
	if !strings.Contains(pay, `<span class="pill kind" id="kind">payment</span>`) {
		t.Errorf("payment page does not say its kind")
	}
	for _, want := range []string{
		`<span class="pill kind" id="kind">refund</span>`,
		`<dt>Refund of</dt><dd class="mono"><a href="/admin/attempts/` + id + `">`,
		"<dt>Provider refund</dt>",
		payment.RefundDownstreamKey(demoScope, refundKey),
	} {
		if !strings.Contains(refund, want) {
			t.Errorf("refund page lacks %q", want)
		}
	}

	list := string(e.do("GET", "/admin", nil).Body)
	if got := strings.Count(list, `data-kind="refund"`); got != 2 {
		t.Errorf("list shows %d refund attempts, want 2", got)
	}
	if got := strings.Count(list, `data-kind="payment"`); got != 1 {
		t.Errorf("list shows %d payment attempts, want 1", got)
	}
	if strings.Contains(list, "<script>alert") {
		t.Errorf("list page contains the key raw")
	}
}

// GET /v1/attempts filters by status and bounds its limit.
func TestListAttemptsJSON(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.pay("ok-1", visa)
	e.pay("ok-2", visa)
	e.pay("declined", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`)
	for _, tt := range []struct {
		query string
		want  int
	}{{"", 3}, {"?status=succeeded", 2}, {"?status=failed", 1}, {"?status=in_progress", 0}, {"?limit=1", 1}, {"?q=ok-1", 1}, {"?q=ok-", 0}} {
		r := e.do("GET", "/v1/attempts"+tt.query, nil)
		var out struct {
			Data []struct {
				IdempotencyKey string         `json:"idempotency_key"`
				Status         payment.Status `json:"status"`
			} `json:"data"`
		}
		if err := json.Unmarshal(r.Body, &out); err != nil || r.Status != 200 {
			t.Fatalf("GET /v1/attempts%s = %d %s", tt.query, r.Status, r.Body)
		}
		if len(out.Data) != tt.want {
			t.Errorf("GET /v1/attempts%s: %d attempts, want %d", tt.query, len(out.Data), tt.want)
		}
	}
	// Page by page from each page's next cursor: every attempt once.
	seen := map[string]bool{}
	for q := "?limit=2"; ; {
		var out struct {
			Data    []struct{ ID string }
			HasMore bool   `json:"has_more"`
			Next    string `json:"next"`
		}
		if err := json.Unmarshal(e.do("GET", "/v1/attempts"+q, nil).Body, &out); err != nil {
			t.Fatal(err)
		}
		for _, a := range out.Data {
			seen[a.ID] = true
		}
		if !out.HasMore || len(seen) > 3 {
			break
		}
		q = "?limit=2&before=" + out.Next
	}
	if len(seen) != 3 {
		t.Errorf("GET /v1/attempts two at a time saw %d attempts, want 3", len(seen))
	}
	for _, bad := range []string{"?limit=0", "?limit=501", "?limit=x", "?status=done", "?offset=-1", "?offset=1", "?before=x"} {
		if r := e.do("GET", "/v1/attempts"+bad, nil); r.Status != 400 || r.problemType() != payment.ProblemInvalidRequest {
			t.Errorf("GET /v1/attempts%s = %d %s, want 400 invalid-request", bad, r.Status, r.Body)
		}
	}
}

// "Reconcile now" on a stale attempt settles it as cron would.
func TestAdminReconcileNow(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := newEnv(t, envOptions{now: clock})
	req, _ := payment.ParseRequest([]byte(visa))
	a := payment.NewAttempt("demo", "stuck", req, now, time.Second)
	if ok, err := e.DB.Claim(context.Background(), &a); !ok || err != nil {
		t.Fatal(ok, err)
	}
	r := e.do("POST", "/admin/attempts/"+a.ID+"/reconcile", nil)
	if !strings.Contains(string(r.Body), "Not reconciled") {
		t.Errorf("reconcile of a fresh attempt: page lacks the refusal")
	}
	mu.Lock()
	now = now.Add(10 * time.Minute)
	mu.Unlock()
	if list := e.do("GET", "/admin", nil); !strings.Contains(string(list.Body), "1 stale") {
		t.Errorf("list does not flag the stale attempt")
	}
	r = e.do("POST", "/admin/attempts/"+a.ID+"/reconcile", nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), "now failed") {
		t.Errorf("reconcile now = %d, page lacks the outcome: %s", r.Status, r.Body)
	}
	got, _ := e.DB.Attempt(context.Background(), "demo", "stuck")
	if got.Status != payment.Failed {
		t.Errorf("attempt = %s, want failed (the provider never charged it)", got.Status)
	}
}

// In serve, the simulated provider's ledger and fault knobs are the
// operator's: merchants cannot read every charge or break the provider.
func TestSimBehindAdminInServe(t *testing.T) {
	e := newEnv(t, envOptions{auth: true, adminToken: "s3cret-admin"})
	_, merchant := e.apiKey("shop")
	faults := []byte(`{"latency":"0s","fail_before_charge":1,"fail_after_charge":0,"fail_lookup":0}`)
	for name, h := range map[string][]string{"no credential": nil, "merchant key": {"Authorization", "Bearer " + merchant}} {
		if r := e.do("GET", "/sim/charges", nil, h...); r.Status != 401 {
			t.Errorf("GET /sim/charges with %s = %d, want 401", name, r.Status)
		}
		if r := e.do("PUT", "/sim/faults", faults, append(h, "Content-Type", "application/json")...); r.Status != 401 {
			t.Errorf("PUT /sim/faults with %s = %d, want 401", name, r.Status)
		}
	}
	if r := e.do("PUT", "/sim/faults", faults, "Authorization", "Bearer s3cret-admin", "Content-Type", "application/json",
		"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); r.Status != 403 {
		t.Errorf("cross-site PUT /sim/faults = %d, want 403", r.Status)
	}
	if e.Sim.Faults().FailBeforeCharge != 0 {
		t.Fatalf("the faults changed without the admin credential")
	}
	if r := e.do("GET", "/sim/charges", nil, "Authorization", "Bearer s3cret-admin"); r.Status != 200 {
		t.Errorf("GET /sim/charges with the admin token = %d, want 200", r.Status)
	}
}

// Every admin page shows where the replica stands, and says so plainly
// once it is behind; without replication it shows nothing of it.
func TestAdminShowsTheReplica(t *testing.T) {
	var st atomic.Pointer[server.ReplicaStatus]
	st.Store(&server.ReplicaStatus{Lag: 1200 * time.Millisecond, MaxLag: time.Minute, LastSync: time.Now()})
	e := newEnv(t, envOptions{replica: func() server.ReplicaStatus { return *st.Load() }})
	for _, page := range []string{"/admin", "/admin/queue", "/admin/events", "/admin/endpoints"} {
		got := string(e.do("GET", page, nil).Body)
		if !strings.Contains(got, `id="replica"`) || !strings.Contains(got, "Replica 1.2s behind") || strings.Contains(got, "allowed") {
			t.Errorf("GET %s with the replica 1.2s behind does not say so, or says it is over its limit:\n%s", page, got)
		}
	}
	st.Store(&server.ReplicaStatus{Lag: 93 * time.Second, MaxLag: time.Minute, Errors: 3})
	got := string(e.do("GET", "/admin", nil).Body)
	for _, want := range []string{`class="small replica behind"`, "Replica 1m33s behind, over the 1m0s allowed", "3 syncs failed", "no sync yet since start"} {
		if !strings.Contains(got, want) {
			t.Errorf("GET /admin with the replica behind: %q missing", want)
		}
	}
	if got := string(newEnv(t, envOptions{}).do("GET", "/admin", nil).Body); strings.Contains(got, `id="replica"`) {
		t.Error("GET /admin without replication shows a replica")
	}
}
