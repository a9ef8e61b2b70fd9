package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/outbound"
	"github.com/oncepay/oncepay/payment"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// eventPage is a page of GET /v1/events as a client reads it.
type eventPage struct {
	Object  string `json:"object"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
	Data    []struct {
		ID      string            `json:"id"`
		Object  string            `json:"object"`
		Type    payment.EventType `json:"type"`
		Created int64             `json:"created"`
		Data    struct {
			Object struct {
				ID     string         `json:"id"`
				Object string         `json:"object"`
				Status payment.Status `json:"status"`
			} `json:"object"`
		} `json:"data"`
	} `json:"data"`
}

func (p eventPage) ids() []string {
	var ids []string
	for _, e := range p.Data {
		ids = append(ids, e.ID)
	}
	return ids
}

// GET /v1/events is the merchant's own events, newest first, a page at a
// time by id either way, of one type or all; each names the payment or
// refund it is about, as GET shows it.
func TestListEvents(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	_, a := e.apiKey("a")
	_, b := e.apiKey("b")
	asA := []string{"Authorization", "Bearer " + a}
	paid := e.pay("1", visa, asA...).payment(t)
	declined := e.pay("2", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`, asA...)
	refund := e.do("POST", "/v1/payments/"+paid.ID+"/refunds", []byte(`{"amount":100}`), append([]string{"Idempotency-Key", "r1", "Content-Type", "application/json"}, asA...)...)
	if declined.Status != 402 || refund.Status != 201 {
		t.Fatalf("declined = %d, refund = %d %s", declined.Status, refund.Status, refund.Body)
	}
	e.pay("1", visa, "Authorization", "Bearer "+b)
	list := func(q string) eventPage {
		t.Helper()
		r := e.do("GET", "/v1/events"+q, nil, asA...)
		var p eventPage
		if err := json.Unmarshal(r.Body, &p); err != nil || r.Status != 200 || p.Object != "list" || p.URL != "/v1/events" {
			t.Fatalf("GET /v1/events%s = %d %s", q, r.Status, r.Body)
		}
		return p
	}
	all := list("")
	var types []payment.EventType
	for _, ev := range all.Data {
		types = append(types, ev.Type)
		if ev.Object != "event" || ev.Created == 0 || ev.Data.Object.ID == "" {
			t.Errorf("event %+v, want object event, created, data.object", ev)
		}
	}
	if want := []payment.EventType{payment.EventRefundSucceeded, payment.EventPaymentFailed, payment.EventPaymentSucceeded}; !slices.Equal(types, want) || all.HasMore {
		t.Fatalf("events = %v (has_more %v), want %v: the merchant's own, newest first", types, all.HasMore, want)
	}
	if got := all.Data[2].Data.Object; got.ID != paid.ID || got.Object != "payment" || got.Status != payment.Succeeded {
		t.Errorf("payment.succeeded's object = %+v, want payment %s succeeded", got, paid.ID)
	}
	ids := all.ids()
	for _, c := range []struct {
		q    string
		want []string
		more bool
	}{
		{"?limit=2", ids[:2], true},
		{"?limit=2&starting_after=" + ids[1], ids[2:], false},
		{"?limit=1&ending_before=" + ids[2], ids[1:2], true},
		{"?ending_before=" + ids[1], ids[:1], false},
		{"?type=payment.failed", ids[1:2], false},
		{"?type=payment.expired", nil, false},
	} {
		if p := list(c.q); !slices.Equal(p.ids(), c.want) || p.HasMore != c.more {
			t.Errorf("GET /v1/events%s = %v has_more %v, want %v has_more %v", c.q, p.ids(), p.HasMore, c.want, c.more)
		}
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?type=payment", "?starting_after=a&ending_before=b", "?starting_after=%20"} {
		if r := e.do("GET", "/v1/events"+q, nil, asA...); r.Status != 400 || r.problemType() != payment.ProblemInvalidRequest {
			t.Errorf("GET /v1/events%s = %d %s, want 400", q, r.Status, r.Body)
		}
	}
}

// The admin's endpoints page lists each endpoint with its state and the
// backlog; an endpoint's page its deliveries; /metrics counts the tries
// and the backlog. An unknown endpoint is 404.
func TestAdminEndpointsAndDeliveryMetrics(t *testing.T) {
	e := newEnv(t, envOptions{auth: true, adminToken: strings.Repeat("a", 32)})
	admin := []string{"Authorization", "Bearer " + strings.Repeat("a", 32)}
	scope, secret := e.apiKey("shop")
	var answer atomic.Int32
	answer.Store(http.StatusServiceUnavailable)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(answer.Load())) }))
	t.Cleanup(hook.Close)
	ep, err := payment.NewEndpoint(scope, hook.URL+"/hook", nil, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	e.pay("k1", visa, "Authorization", "Bearer "+secret)
	dlv, err := payment.NewDeliverer(payment.Deliverer{Store: e.DB, Sender: outbound.New(outbound.Options{AllowInsecure: true}), Now: e.Service.Now})
	if err != nil {
		t.Fatal(err)
	}
	dlv.Observe = e.Metrics.Delivered
	if res, err := dlv.RunOnce(context.Background()); err != nil || res.Retried != 1 {
		t.Fatalf("RunOnce = %+v, %v, want the 503 tried again later", res, err)
	}
	page := e.do("GET", "/admin/endpoints", nil, admin...)
	for _, want := range []string{ep.ID, hook.URL + "/hook", "all events", "failing for", "1</span><span class=\"label\">deliveries pending"} {
		if page.Status != 200 || !strings.Contains(string(page.Body), want) {
			t.Errorf("GET /admin/endpoints = %d, want %q in it", page.Status, want)
		}
	}
	m := e.scrape(admin...)
	for series, want := range map[string]float64{
		`oncepay_deliveries_total{outcome="retried"}`: 1, `oncepay_deliveries_pending`: 1, `oncepay_deliveries_total{outcome="delivered"}`: 0,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	one := e.do("GET", "/admin/endpoints/"+ep.ID, nil, admin...)
	for _, want := range []string{"payment.succeeded", "pending", "503"} {
		if one.Status != 200 || !strings.Contains(string(one.Body), want) {
			t.Errorf("GET /admin/endpoints/%s = %d, want %q in it", ep.ID, one.Status, want)
		}
	}
	if r := e.do("GET", "/admin/endpoints/we_nope", nil, admin...); r.Status != 404 {
		t.Errorf("GET /admin/endpoints/we_nope = %d, want 404", r.Status)
	}
	if r := e.do("GET", "/admin/endpoints", nil); r.Status != 401 {
		t.Errorf("GET /admin/endpoints without the admin token = %d, want 401", r.Status)
	}
	if err := e.DB.DisableEndpoint(context.Background(), ep.ID, "asked", time.Now()); err != nil {
		t.Fatal(err)
	}
	if page := e.do("GET", "/admin/endpoints", nil, admin...); !strings.Contains(string(page.Body), "disabled") {
		t.Error("the endpoints page does not say the endpoint is disabled")
	}
	if m := e.scrape(admin...); m[`oncepay_deliveries_pending`] != 0 {
		t.Errorf("pending after the endpoint was disabled = %v, want 0", m[`oncepay_deliveries_pending`])
	}
}

// "Send again" on an endpoint's page: refused without the admin
// credential, with a wrong one, from another site, and for an unknown
// event or endpoint, none of which sends anything; from the page itself it
// sends the delivery now, through the deliverer's claim, with its one
// webhook-id and body (verified with the reference library), and the page
// says how it ended. A disabled endpoint's page offers no button.
func TestAdminSendAgain(t *testing.T) {
	token := strings.Repeat("s", 32)
	e := newEnv(t, envOptions{auth: true, adminToken: token})
	e.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	admin := []string{"Authorization", "Bearer " + token}
	scope, secret := e.apiKey("shop")
	var (
		answer   atomic.Int32
		copies   atomic.Int32
		verified atomic.Value
	)
	answer.Store(http.StatusInternalServerError)
	var whsec atomic.Value
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(whsec.Load().(string))
		if err != nil || wh.Verify(body, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		copies.Add(1)
		verified.Store(r.Header.Get("webhook-id") + " " + string(body))
		w.WriteHeader(int(answer.Load()))
	}))
	t.Cleanup(hook.Close)
	ep, err := payment.NewEndpoint(scope, hook.URL+"/hook", nil, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	whsec.Store(ep.Secret)
	if err := e.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	e.pay("k1", visa, "Authorization", "Bearer "+secret)
	if res, err := e.Deliverer.RunOnce(context.Background()); err != nil || res.Retried != 1 {
		t.Fatalf("RunOnce = %+v, %v, want the 500 tried again later", res, err)
	}
	first := verified.Load().(string)
	id, _, _ := strings.Cut(first, " ")
	page := "/admin/endpoints/" + ep.ID
	again := page + "/deliveries/" + id + "/redeliver"
	if r := e.do("GET", page, nil, admin...); !strings.Contains(string(r.Body), `action="`+again+`"`) || !strings.Contains(string(r.Body), "Send now") {
		t.Errorf("GET %s = %d, want a Send now button posting to %s:\n%s", page, r.Status, again, r.Body)
	}

	answer.Store(http.StatusNoContent)
	for _, c := range []struct {
		name    string
		path    string
		headers []string
		status  int
		problem string
	}{
		{"no credential", again, nil, 401, payment.ProblemUnauthorized},
		{"a wrong credential", again, []string{"Authorization", "Bearer " + strings.Repeat("x", 32)}, 401, payment.ProblemUnauthorized},
		{"a merchant's API key", again, []string{"Authorization", "Bearer " + secret}, 401, payment.ProblemUnauthorized},
		{"a forged cross-site form", again, append([]string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, admin...), 403, payment.ProblemCrossOrigin},
		{"a cross-origin fetch", again, append([]string{"Origin", "https://evil.example"}, admin...), 403, payment.ProblemCrossOrigin},
		{"an unknown event", page + "/deliveries/evt_NOPE/redeliver", admin, 404, payment.ProblemNotFound},
		{"an unknown endpoint", "/admin/endpoints/we_nope/deliveries/" + id + "/redeliver", admin, 404, payment.ProblemNotFound},
	} {
		if r := e.do("POST", c.path, nil, c.headers...); r.Status != c.status || r.problemType() != c.problem {
			t.Errorf("POST with %s = %d %s, want %d %s", c.name, r.Status, r.Body, c.status, c.problem)
		}
	}
	if r := e.do("GET", again, nil, admin...); r.Status != 405 {
		t.Errorf("GET %s = %d, want 405: only a POST sends", again, r.Status)
	}
	if got := copies.Load(); got != 1 {
		t.Fatalf("the endpoint got %d copies after the refused requests, want the first try's alone", got)
	}

	// From the page itself (same origin, as a browser sends the form).
	r := e.do("POST", again, nil, append([]string{"Origin", e.Server.URL, "Sec-Fetch-Site", "same-origin"}, admin...)...)
	loc := r.Header.Get("Location")
	if r.Status != 303 || !strings.HasPrefix(loc, page+"?") || !strings.Contains(loc, "outcome=delivered") {
		t.Fatalf("POST %s = %d to %q, want 303 to the endpoint's page, delivered", again, r.Status, loc)
	}
	if got := copies.Load(); got != 2 || verified.Load().(string) != first {
		t.Errorf("the endpoint got %d copies, the last %q; want 2, the same webhook-id and body as the first", got, verified.Load())
	}
	shown := e.do("GET", loc, nil, admin...)
	for _, want := range []string{"Sent " + id + " again: delivered.", `data-state="delivered"`, "Send again"} {
		if !strings.Contains(string(shown.Body), want) {
			t.Errorf("GET %s lacks %q", loc, want)
		}
	}
	ds, _ := e.DB.Deliveries(context.Background(), ep.ID, 10)
	if len(ds) != 1 || ds[0].State != payment.DeliveryDelivered || ds[0].Tries != 1 || ds[0].LastStatus != 204 {
		t.Errorf("deliveries = %+v, want it delivered on the redelivery's try", ds)
	}
	if m := e.scrape(admin...); m[`oncepay_deliveries_total{outcome="delivered"}`] != 1 {
		t.Errorf(`oncepay_deliveries_total{outcome="delivered"} = %v, want the redelivery counted`, m[`oncepay_deliveries_total{outcome="delivered"}`])
	}

	// A flash is made of fixed sentences: nothing the query says is shown
	// unless it is an event id.
	if r := e.do("GET", page+"?redelivered=%3Cb%3Ezqxj&outcome=delivered", nil, admin...); strings.Contains(string(r.Body), "zqxj") {
		t.Error("the page shows what the query says")
	}
	if err := e.DB.DisableEndpoint(context.Background(), ep.ID, "asked", time.Now()); err != nil {
		t.Fatal(err)
	}
	if r := e.do("GET", page, nil, admin...); strings.Contains(string(r.Body), "/redeliver") {
		t.Error("a disabled endpoint's page offers to send again")
	}
	if r := e.do("POST", again, nil, admin...); r.Status != 400 || r.problemType() != payment.ProblemInvalidRequest {
		t.Errorf("POST to a disabled endpoint = %d %s, want 400", r.Status, r.Body)
	}
}
