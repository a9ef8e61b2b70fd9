package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	"github.com/oncepay/oncepay/server"
	"github.com/oncepay/oncepay/sqlitestore"
	"github.com/oncepay/oncepay/web"
)

// spec is the OpenAPI document as the running server serves it.
type spec struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	// answered is every "METHOD /path status" of the document that a real
	// response was checked against.
	answered map[string]bool
}

// loadSpec fetches /openapi.yaml from e, checks it is the embedded document,
// and validates it as OpenAPI 3.1.
func loadSpec(t *testing.T, e *env) *spec {
	t.Helper()
	r := e.do("GET", "/openapi.yaml", nil)
	if r.Status != 200 || r.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(r.Body, web.OpenAPI) {
		t.Fatalf("GET /openapi.yaml = %d %q, want 200 application/yaml with the embedded document", r.Status, r.Header.Get("Content-Type"))
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(r.Body)
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("spec is not valid OpenAPI: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("spec is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("route spec: %v", err)
	}
	return &spec{t: t, doc: doc, router: router, answered: map[string]bool{}}
}

// check validates one real response to method path against the operation
// the spec gives for it; a status the operation does not list fails.
func (s *spec) check(name, method, path string, r response) {
	s.t.Helper()
	req := httptest.NewRequest(method, path, nil)
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		s.t.Errorf("%s: %s %s is not in the spec: %v", name, method, path, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 r.Status,
		Header:                 r.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(r.Body)
	s.answered[fmt.Sprintf("%s %s %d", route.Method, route.Path, r.Status)] = true
	if method == "HEAD" && route.Operation.Responses.Status(r.Status) == nil {
		// The validator passes every HEAD answer: check its status here.
		s.t.Errorf("%s: HEAD %s answered %d, which the spec does not list", name, path, r.Status)
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		s.t.Errorf("%s: %s %s answered %d %.300s, which the spec does not allow: %v", name, method, path, r.Status, bytes.TrimSpace(r.Body), err)
	}
	// The validator ignores headers a response does not declare: the ones a
	// client acts on must be declared where they are sent.
	if spec := route.Operation.Responses.Status(r.Status); spec != nil {
		for _, h := range clientHeaders {
			if r.Header.Get(h) != "" && spec.Value.Headers[h] == nil {
				s.t.Errorf("%s: %s %s %d sends %s, which the spec does not declare there", name, method, path, r.Status, h)
			}
		}
	}
}

// unanswered reports every status the document lists for an operation that
// no checked response gave, unless notProvoked says why no test can cause
// it: the document lists nothing the server was not seen to answer.
func (s *spec) unanswered(notProvoked func(method, path string, status int) string) {
	s.t.Helper()
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				if err != nil {
					s.t.Errorf("%s %s lists response %q, not a status", method, path, code)
					continue
				}
				key := fmt.Sprintf("%s %s %d", method, path, status)
				if !s.answered[key] && notProvoked(method, path, status) == "" {
					s.t.Errorf("%s: no response checked against it; provoke it in this test, or say in notProvoked why none can", key)
				}
			}
		}
	}
}

// clientHeaders are the response headers a client acts on.
var clientHeaders = []string{"Idempotent-Replayed", "Retry-After", "WWW-Authenticate", "Allow", "Accept-Encoding", "X-Request-Id"}

// checkComponent validates a response no operation owns (an unknown route, a
// method a path lacks) against the spec's shared response called name.
func (s *spec) checkComponent(name string, r response) {
	s.t.Helper()
	ref := s.doc.Components.Responses[name]
	if ref == nil {
		s.t.Errorf("spec has no components.responses.%s", name)
		return
	}
	for _, h := range clientHeaders {
		if r.Header.Get(h) != "" && ref.Value.Headers[h] == nil {
			s.t.Errorf("%s: %d sends %s, which the spec does not declare", name, r.Status, h)
		}
	}
	media := ref.Value.Content.Get(r.Header.Get("Content-Type"))
	if media == nil {
		s.t.Errorf("%s: Content-Type %q is not in the spec", name, r.Header.Get("Content-Type"))
		return
	}
	var v any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		s.t.Errorf("%s: body %q: %v", name, r.Body, err)
		return
	}
	if err := media.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		s.t.Errorf("%s: %d %s does not match the spec: %v", name, r.Status, r.Body, err)
	}
}

// Every status and problem type the server answers is in the OpenAPI
// document, and real responses of each kind validate against it.
func TestResponsesMatchOpenAPI(t *testing.T) {
	var replicaBehind atomic.Bool
	e := newEnv(t, envOptions{auth: true, adminToken: "spec-admin", storeOp: sqlitestore.Options{BusyTimeout: 100 * time.Millisecond},
		replica: func() server.ReplicaStatus {
			st := server.ReplicaStatus{Lag: 2 * time.Second, MaxLag: time.Minute}
			if replicaBehind.Load() {
				st.Lag = 93 * time.Second
			}
			return st
		}})
	s := loadSpec(t, e)
	scope, secret := e.apiKey("spec")
	bearer := []string{"Authorization", "Bearer " + secret}
	pay := func(key, body string) response { return e.pay(key, body, bearer...) }
	get := func(path string) response { return e.do("GET", path, nil, bearer...) }
	admin := func(path string) response { return e.do("GET", path, nil, "Authorization", "Bearer spec-admin") }
	full := `{"amount":1999,"currency":"EUR","source":"tok_visa","description":"Order 42","metadata":{"order_id":"42"}}`
	declined := `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`

	// A key whose record was purged while its payment is kept: 409 key
	// expired. A key reused once the payment is gone too, with another body:
	// the provider's "key reused" is a stored 409, replayed as such.
	pay("spec-retained", visa)
	pay("spec-expired", visa)
	if _, _, err := e.DB.Purge(context.Background(), time.Now().Add(time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	keyExpired := pay("spec-expired", visa)
	if _, _, err := e.DB.PurgePayments(context.Background(), time.Now().Add(time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	keyReusedAfterRetention := pay("spec-retained", declined)

	created := pay("spec-ok", full)
	var createdID string
	if created.Status == 201 {
		createdID = created.payment(t).ID
	}
	replayed := pay("spec-ok", full)
	unknown := func() response {
		e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
		defer e.Sim.SetFaults(sim.Faults{})
		return pay("spec-unknown", visa)
	}()
	var unknownID string
	if a, err := e.DB.Attempt(context.Background(), scope, "spec-unknown"); err == nil {
		unknownID = a.ID
	}

	wh := webhookAnswers(t, e, scope)
	refund := func(id, key, body string) response {
		return e.do("POST", "/v1/payments/"+id+"/refunds", []byte(body), append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, bearer...)...)
	}
	refunds := "/v1/payments/" + createdID + "/refunds"
	refunded := refund(createdID, "spec-refund", `{"amount":100,"reason":"requested_by_customer"}`)
	var declinedProblem payment.Problem
	json.Unmarshal(pay("spec-declined", declined).Body, &declinedProblem)
	refundDeclined, refundNotCompleted := refundProblems(t, e, scope, pay("spec-refunded-elsewhere", visa), refund)
	refundUnknown := func() response {
		e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
		defer e.Sim.SetFaults(sim.Faults{})
		return refund(createdID, "spec-refund-unknown", `{"amount":100}`)
	}()

	other := otherAnswers(t, e, scope, createdID, bearer)
	other = append(other, redeliveryAnswers(t, e)...)
	ep, err := payment.NewEndpoint(scope, "https://merchant.example/hooks", nil, false, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}

	tests := []answerCase{
		{"admin endpoint", "GET", "/admin/endpoints/" + ep.ID, e.do("GET", "/admin/endpoints/"+ep.ID, nil, "Authorization", "Bearer spec-admin"), 200, ""},
		{"created", "POST", "/v1/payments", created, 201, ""},
		{"replayed", "POST", "/v1/payments", replayed, 201, ""},
		{"invalid request", "POST", "/v1/payments", pay("spec-bad", `{"amount":"1"}`), 400, payment.ProblemInvalidRequest},
		{"invalid key", "POST", "/v1/payments", e.do("POST", "/v1/payments", []byte(visa), bearer[0], bearer[1], "Content-Type", "application/json"), 400, payment.ProblemInvalidKey},
		{"unauthorized", "POST", "/v1/payments", e.pay("spec-noauth", visa), 401, payment.ProblemUnauthorized},
		{"declined", "POST", "/v1/payments", pay("spec-declined", declined), 402, payment.ProblemDeclined},
		{"declined replayed", "POST", "/v1/payments", pay("spec-declined", declined), 402, payment.ProblemDeclined},
		{"not completed", "POST", "/v1/payments", notCompleted(t, e, scope, "spec-abandoned", bearer), 402, payment.ProblemNotCompleted},
		{"key reused", "POST", "/v1/payments", pay("spec-ok", visa), 409, payment.ProblemKeyReused},
		{"key expired", "POST", "/v1/payments", keyExpired, 409, payment.ProblemKeyExpired},
		{"key reused after the retention", "POST", "/v1/payments", keyReusedAfterRetention, 409, payment.ProblemKeyReused},
		{"key reused after the retention, replayed", "POST", "/v1/payments", pay("spec-retained", declined), 409, payment.ProblemKeyReused},
		{"in progress", "POST", "/v1/payments", inProgress(t, e, scope, "spec-slow", bearer), 409, payment.ProblemInProgress},
		{"too large", "POST", "/v1/payments", pay("spec-big", `{"description":"`+strings.Repeat("x", 70_000)+`"}`), 413, payment.ProblemTooLarge},
		{"unsupported media type", "POST", "/v1/payments", e.do("POST", "/v1/payments", []byte(visa), bearer[0], bearer[1], "Idempotency-Key", "spec-text", "Content-Type", "text/plain"), 415, payment.ProblemUnsupportedMedia},
		{"unsupported content encoding", "POST", "/v1/payments", e.do("POST", "/v1/payments", []byte(visa), bearer[0], bearer[1], "Idempotency-Key", "spec-gzip", "Content-Type", "application/json", "Content-Encoding", "gzip"), 415, payment.ProblemUnsupportedEncoding},
		{"outcome unknown", "POST", "/v1/payments", unknown, 503, payment.ProblemOutcomeUnknown},
		{"database busy", "POST", "/v1/payments", whileLocked(t, e, func() response { return pay("spec-locked", visa) }), 503, payment.ProblemUnavailable},
		{"get succeeded", "GET", "/v1/payments/" + createdID, get("/v1/payments/" + createdID), 200, ""},
		{"get in progress", "GET", "/v1/payments/" + unknownID, get("/v1/payments/" + unknownID), 200, ""},
		{"get unknown id", "GET", "/v1/payments/pay_NOPE", get("/v1/payments/pay_NOPE"), 404, payment.ProblemNotFound},
		{"get unauthorized", "GET", "/v1/payments/" + createdID, e.do("GET", "/v1/payments/"+createdID, nil), 401, payment.ProblemUnauthorized},
		{"refund", "POST", refunds, refunded, 201, ""},
		{"refund replayed", "POST", refunds, refund(createdID, "spec-refund", `{"reason":"requested_by_customer","amount":100}`), 201, ""},
		{"refund exceeds", "POST", refunds, refund(createdID, "spec-refund-big", `{"amount":99999999}`), 409, payment.ProblemRefundExceeds},
		{"refund of a declined payment", "POST", "/v1/payments/" + declinedProblem.PaymentID + "/refunds", refund(declinedProblem.PaymentID, "spec-refund-declined", `{}`), 409, payment.ProblemNotRefundable},
		{"refund of an unknown payment", "POST", "/v1/payments/pay_NOPE/refunds", refund("pay_NOPE", "spec-refund-nope", `{}`), 404, payment.ProblemNotFound},
		{"refund declined", "POST", refunds, refundDeclined, 402, payment.ProblemRefundDeclined},
		{"refund not completed", "POST", refunds, refundNotCompleted, 402, payment.ProblemRefundNotDone},
		{"refund outcome unknown", "POST", refunds, refundUnknown, 503, payment.ProblemOutcomeUnknown},
		{"refund database busy", "POST", refunds, whileLocked(t, e, func() response { return refund(createdID, "spec-refund-locked", `{"amount":100}`) }), 503, payment.ProblemUnavailable},
		{"refund invalid", "POST", refunds, refund(createdID, "spec-refund-bad", `{"amount":-5}`), 400, payment.ProblemInvalidRequest},
		{"list refunds", "GET", refunds, get(refunds), 200, ""},
		{"list events", "GET", "/v1/events", get("/v1/events?limit=100"), 200, ""},
		{"list events of a type", "GET", "/v1/events", get("/v1/events?type=refund.succeeded"), 200, ""},
		{"list events bad type", "GET", "/v1/events", get("/v1/events?type=charge.succeeded"), 400, payment.ProblemInvalidRequest},
		{"list events unauthorized", "GET", "/v1/events", e.do("GET", "/v1/events", nil), 401, payment.ProblemUnauthorized},
		{"get refunded", "GET", "/v1/payments/" + createdID, get("/v1/payments/" + createdID), 200, ""},
		{"attempts", "GET", "/v1/attempts", admin("/v1/attempts?status=in_progress&limit=10"), 200, ""},
		{"attempts bad filter", "GET", "/v1/attempts", admin("/v1/attempts?limit=0"), 400, payment.ProblemInvalidRequest},
		{"attempts with a merchant key", "GET", "/v1/attempts", get("/v1/attempts"), 401, payment.ProblemUnauthorized},
		{"admin page", "GET", "/admin", admin("/admin"), 200, ""},
		{"admin attempt", "GET", "/admin/attempts/" + createdID, admin("/admin/attempts/" + createdID), 200, ""},
		{"admin unknown attempt", "GET", "/admin/attempts/pay_NOPE", admin("/admin/attempts/pay_NOPE"), 404, payment.ProblemNotFound},
		{"health", "GET", "/healthz", e.do("GET", "/healthz", nil), 200, ""},
		{"health head", "HEAD", "/healthz", e.do("HEAD", "/healthz", nil), 200, ""},
		{"health, replica behind", "GET", "/healthz", whileReplicaBehind(&replicaBehind, func() response { return e.do("GET", "/healthz", nil) }), 503, payment.ProblemReplicaBehind},
		{"health head, replica behind", "HEAD", "/healthz", whileReplicaBehind(&replicaBehind, func() response { return e.do("HEAD", "/healthz", nil) }), 503, ""},
		{"openapi", "GET", "/openapi.yaml", e.do("GET", "/openapi.yaml", nil), 200, ""},
		{"sim ledger", "GET", "/sim/charges", admin("/sim/charges"), 200, ""},
		{"sim ledger without the admin token", "GET", "/sim/charges", get("/sim/charges"), 401, payment.ProblemUnauthorized},
		{"sim calls", "GET", "/sim/calls", admin("/sim/calls"), 200, ""},
		{"sim faults", "GET", "/sim/faults", admin("/sim/faults"), 200, ""},
		{"sim set faults", "PUT", "/sim/faults", e.do("PUT", "/sim/faults", []byte(`{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`), "Authorization", "Bearer spec-admin"), 200, ""},
		{"sim set faults cross-origin", "PUT", "/sim/faults", e.do("PUT", "/sim/faults", []byte(`{}`), "Authorization", "Bearer spec-admin", "Origin", "https://evil.example", "Content-Type", "text/plain"), 403, payment.ProblemCrossOrigin},
		{"admin reconcile cross-origin", "POST", "/admin/reconcile", e.do("POST", "/admin/reconcile", nil, "Authorization", "Bearer spec-admin", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), 403, payment.ProblemCrossOrigin},
		{"webhook processed", "POST", "/v1/webhooks/sim", wh.processed, 200, ""},
		{"webhook not verified", "POST", "/v1/webhooks/sim", wh.invalid, 400, payment.ProblemInvalidWebhook},
		{"webhook too large", "POST", "/v1/webhooks/sim", wh.tooLarge, 413, payment.ProblemTooLarge},
		{"webhook of a provider not configured", "POST", "/v1/webhooks/stripe", wh.unknown, 404, payment.ProblemNotFound},
		{"webhook in progress", "POST", "/v1/webhooks/sim", wh.busy, 503, payment.ProblemEventInProgress},
		{"webhook not applied", "POST", "/v1/webhooks/sim", wh.failed, 503, payment.ProblemEventNotApplied},
		{"admin events", "GET", "/admin/events", admin("/admin/events?state=failed"), 200, ""},
		{"admin endpoints", "GET", "/admin/endpoints", admin("/admin/endpoints"), 200, ""},
		{"admin unknown endpoint", "GET", "/admin/endpoints/we_nope", admin("/admin/endpoints/we_nope"), 404, payment.ProblemNotFound},
		{"admin events bad filter", "GET", "/admin/events", admin("/admin/events?state=nope"), 400, payment.ProblemInvalidRequest},
		{"sim bad faults", "PUT", "/sim/faults", e.do("PUT", "/sim/faults", []byte(`{"latency":"0s","fail_before_charge":2,"fail_after_charge":0,"fail_lookup":0}`), "Authorization", "Bearer spec-admin"), 400, payment.ProblemInvalidRequest},
	}
	tests = append(tests, simActions(t, e)...)
	tests = append(tests, other...)
	tests = append(tests, demoAnswers(t)...)
	seen := map[string]bool{}
	for _, tt := range tests {
		if tt.r.Status != tt.status || tt.r.problemType() != tt.problem {
			t.Errorf("%s: %d %q (%s), want %d %q", tt.name, tt.r.Status, tt.r.problemType(), tt.r.Body, tt.status, tt.problem)
			continue
		}
		s.check(tt.name, tt.method, tt.path, tt.r)
		seen[tt.problem] = true
	}
	if got := created.Header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first 201 has Idempotent-Replayed: %q", got)
	}
	if got := replayed.Header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replayed 201 has Idempotent-Replayed: %q, want true", got)
	}
	if got := keyReusedAfterRetention.Header.Get("Idempotent-Replayed"); got != "" {
		t.Errorf("first stored 409 has Idempotent-Replayed: %q", got)
	}

	for _, tt := range []struct {
		name, component string
		r               response
		status          int
	}{
		{"unknown route", "NotFound", e.do("GET", "/v2/payments", nil), 404},
		{"method not allowed", "MethodNotAllowed", e.do("POST", "/healthz", nil), 405},
	} {
		if tt.r.Status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, tt.r.Status, tt.r.Body, tt.status)
			continue
		}
		s.checkComponent(tt.component, tt.r)
		seen[tt.r.problemType()] = true
	}

	// Opened before the lock-out below, which lasts only about one period
	// (6 s) past the last failure: a slow start must not eat into it.
	closed := newEnv(t, envOptions{auth: true})

	// Guessing the admin token: after 10 failures, 429 (last, since it
	// locks this test's address out of the admin surface for a while).
	var limited response
	for range 11 {
		limited = e.do("GET", "/v1/attempts", nil, "Authorization", "Bearer spec-guess")
	}
	if limited.Status != 429 || limited.problemType() != payment.ProblemTooManyRequests {
		t.Errorf("11th wrong admin token: %d %s, want 429 %s", limited.Status, limited.Body, payment.ProblemTooManyRequests)
	} else {
		s.check("too many admin failures", "GET", "/v1/attempts", limited)
		seen[payment.ProblemTooManyRequests] = true
	}

	// Every route behind the admin credential: 401 where the admin surface
	// is closed, 429 here now that this address is locked out.
	for _, op := range adminOperations(s.doc) {
		if r := closed.do(op.method, op.path, nil); r.Status != 401 || r.problemType() != payment.ProblemUnauthorized && op.method != "HEAD" {
			t.Errorf("%s %s with the admin surface closed = %d %s, want 401", op.method, op.path, r.Status, r.Body)
		} else {
			s.check("admin closed", op.method, op.path, r)
		}
		if r := e.do(op.method, op.path, nil, "Authorization", "Bearer spec-admin"); r.Status != 429 || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s when locked out = %d %s, want 429 with Retry-After", op.method, op.path, r.Status, r.Body)
		} else {
			s.check("admin locked out", op.method, op.path, r)
		}
	}
	s.unanswered(notProvoked)

	// The spec's problem types are exactly the code's, and every one the
	// server can answer without a bug was answered above.
	codeTypes := []string{
		payment.ProblemInvalidRequest, payment.ProblemInvalidKey, payment.ProblemUnauthorized,
		payment.ProblemNotFound, payment.ProblemMethodNotAllowed, payment.ProblemKeyReused,
		payment.ProblemInProgress, payment.ProblemDeclined, payment.ProblemNotCompleted,
		payment.ProblemOutcomeUnknown, payment.ProblemUnavailable, payment.ProblemTooLarge,
		payment.ProblemUnsupportedMedia, payment.ProblemUnsupportedEncoding, payment.ProblemCrossOrigin, payment.ProblemTooManyRequests, payment.ProblemInternal,
		payment.ProblemInvalidWebhook, payment.ProblemEventInProgress, payment.ProblemEventNotApplied,
		payment.ProblemKeyExpired, payment.ProblemNotRefundable, payment.ProblemRefundExceeds,
		payment.ProblemRefundDeclined, payment.ProblemRefundNotDone, payment.ProblemReplicaBehind,
	}
	notScripted := []string{payment.ProblemInternal}
	var specTypes []string
	for _, v := range s.doc.Components.Schemas["ProblemType"].Value.Enum {
		specTypes = append(specTypes, v.(string))
	}
	for _, p := range codeTypes {
		if !slices.Contains(specTypes, p) {
			t.Errorf("problem type %s is not in the spec's ProblemType", p)
		}
		if !seen[p] && !slices.Contains(notScripted, p) { // a 500 is a bug: nothing scripted can cause one
			t.Errorf("problem type %s was not exercised", p)
		}
	}
	for _, p := range specTypes {
		if !slices.Contains(codeTypes, p) {
			t.Errorf("the spec's ProblemType has %s, which the code does not define", p)
		}
	}
}

// simActions are the answers of the simulated provider's actions: a refund
// failed by the bank, a dispute opened and closed; bad bodies, unknown
// ids, a cross-origin request.
func simActions(t *testing.T, e *env) []answerCase {
	t.Helper()
	ctx := context.Background()
	charges, err := e.Sim.Charges(ctx)
	if err != nil || len(charges) == 0 {
		t.Fatalf("sim charges = %v, %v; want one to act on", charges, err)
	}
	ch := charges[len(charges)-1]
	rf, err := e.Sim.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "spec-sim-refund", ChargeID: ch.ID, Amount: 1, Currency: ch.Currency})
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, body string, headers ...string) response {
		return e.do("POST", path, []byte(body), append([]string{"Authorization", "Bearer spec-admin", "Content-Type", "application/json"}, headers...)...)
	}
	opened := post("/sim/charges/"+ch.ID+"/dispute", `{"reason":"duplicate"}`)
	var d struct{ ID string }
	json.Unmarshal(opened.Body, &d)
	evil := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}
	return []answerCase{
		{"sim fail refund", "POST", "/sim/refunds/" + rf.ID + "/fail", post("/sim/refunds/"+rf.ID+"/fail", ""), 200, ""},
		{"sim fail refund, bad body", "POST", "/sim/refunds/" + rf.ID + "/fail", post("/sim/refunds/"+rf.ID+"/fail", `{"code":1}`), 400, payment.ProblemInvalidRequest},
		{"sim fail no refund", "POST", "/sim/refunds/re_sim_none/fail", post("/sim/refunds/re_sim_none/fail", ""), 404, payment.ProblemNotFound},
		{"sim fail refund cross-origin", "POST", "/sim/refunds/" + rf.ID + "/fail", post("/sim/refunds/"+rf.ID+"/fail", "", evil...), 403, payment.ProblemCrossOrigin},
		{"sim dispute", "POST", "/sim/charges/" + ch.ID + "/dispute", opened, 200, ""},
		{"sim dispute, bad body", "POST", "/sim/charges/" + ch.ID + "/dispute", post("/sim/charges/"+ch.ID+"/dispute", `[]`), 400, payment.ProblemInvalidRequest},
		{"sim dispute of no charge", "POST", "/sim/charges/ch_none/dispute", post("/sim/charges/ch_none/dispute", ""), 404, payment.ProblemNotFound},
		{"sim dispute cross-origin", "POST", "/sim/charges/" + ch.ID + "/dispute", post("/sim/charges/"+ch.ID+"/dispute", "", evil...), 403, payment.ProblemCrossOrigin},
		{"sim close dispute", "POST", "/sim/disputes/" + d.ID + "/close", post("/sim/disputes/"+d.ID+"/close", `{"status":"won"}`), 200, ""},
		{"sim close dispute, bad status", "POST", "/sim/disputes/" + d.ID + "/close", post("/sim/disputes/"+d.ID+"/close", `{"status":"maybe"}`), 400, payment.ProblemInvalidRequest},
		{"sim close no dispute", "POST", "/sim/disputes/dp_sim_none/close", post("/sim/disputes/dp_sim_none/close", `{"status":"lost"}`), 404, payment.ProblemNotFound},
		{"sim close dispute cross-origin", "POST", "/sim/disputes/" + d.ID + "/close", post("/sim/disputes/"+d.ID+"/close", `{"status":"lost"}`, evil...), 403, payment.ProblemCrossOrigin},
	}
}

// answerCase is a real response and what it should be.
type answerCase struct {
	name         string
	method, path string
	r            response
	status       int
	problem      string // "" for a success
}

// notProvoked says why no test can provoke status on method path, or "" if
// one does.
func notProvoked(method, path string, status int) string {
	switch {
	case status == 500:
		return "a bug: nothing a client or the environment does may cause a 500"
	case status == 503 && (method == "GET" || method == "HEAD") && !strings.HasPrefix(path, "/demo"):
		return "a read does not wait for the writer: only a failing disk answers 503 here"
	case method == "GET" && path == "/admin/events" && status == 404:
		return "only with no webhook inbox, which serve and demo always have"
	}
	return ""
}

// adminOperation is a request to an operation behind the admin credential,
// its path parameters filled in.
type adminOperation struct{ method, path string }

// adminOperations are every operation of doc behind the admin credential.
func adminOperations(doc *openapi3.T) []adminOperation {
	var ops []adminOperation
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			if op.Security == nil || !slices.ContainsFunc(*op.Security, func(r openapi3.SecurityRequirement) bool { return r["adminBearer"] != nil }) {
				continue
			}
			filled := path
			for _, p := range []string{"{id}", "{provider}", "{file}"} {
				filled = strings.ReplaceAll(filled, p, "x")
			}
			ops = append(ops, adminOperation{method, filled})
		}
	}
	slices.SortFunc(ops, func(a, b adminOperation) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	return ops
}

// otherAnswers are the answers of the routes beyond creating and reading
// payments: listing, the admin surface's own answers, the simulated
// provider's HEADs and the refunds' media checks. They run after the
// refund problems, whose reconcile pass must find only their attempt.
func otherAnswers(t *testing.T, e *env, scope, paid string, bearer []string) []answerCase {
	t.Helper()
	ctx := context.Background()
	e.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	adminAuth := []string{"Authorization", "Bearer spec-admin"}
	admin := func(method, path string, headers ...string) response {
		return e.do(method, path, nil, append(headers, adminAuth...)...)
	}
	get := func(path string) response { return e.do("GET", path, nil, bearer...) }
	crossSite := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}
	refunds := "/v1/payments/" + paid + "/refunds"
	refund := func(key, contentType string, body []byte) response {
		return e.do("POST", refunds, body, append([]string{"Idempotency-Key", key, "Content-Type", contentType}, bearer...)...)
	}

	// A retry of a refund while the first request is still at the (slowed)
	// provider.
	refundInProgress := func() response {
		e.Sim.SetFaults(sim.Faults{Latency: 300 * time.Millisecond})
		defer e.Sim.SetFaults(sim.Faults{})
		done := make(chan response)
		go func() { done <- refund("spec-refund-slow", "application/json", []byte(`{"amount":100}`)) }()
		for { // wait for the first request's claim
			if _, err := e.DB.Attempt(ctx, scope, "spec-refund-slow"); err == nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		r := refund("spec-refund-slow", "application/json", []byte(`{"amount":100}`))
		if first := <-done; first.Status != 201 {
			t.Errorf("first refund of spec-refund-slow = %d %s, want 201", first.Status, first.Body)
		}
		return r
	}()

	// A merchant that takes payments offline, while the provider fails.
	offScope, offSecret := e.apiKey("spec-offline")
	if err := e.DB.SetOfflineLimits(ctx, offScope, &payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 2500, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	e.Sim.SetFaults(sim.Faults{FailBeforeCharge: 1})
	queued := e.pay("spec-queued", visa, "Authorization", "Bearer "+offSecret)
	e.Sim.SetFaults(sim.Faults{})

	// Attempts abandoned long ago, for reconcile to settle.
	stale := func(key string) string {
		req, err := payment.ParseRequest([]byte(visa))
		if err != nil {
			t.Fatal(err)
		}
		a := payment.NewAttempt(scope, key, req, time.Now().Add(-time.Hour), 0)
		if ok, err := e.DB.Claim(ctx, &a); !ok || err != nil {
			t.Fatalf("Claim = %v, %v", ok, err)
		}
		return a.ID
	}
	staleOne := stale("spec-stale-one")
	reconcileOne := "/admin/attempts/" + staleOne + "/reconcile"
	lockedOne := whileLocked(t, e, func() response { return admin("POST", reconcileOne) })
	reconciledOne := admin("POST", reconcileOne)
	stale("spec-stale-all")
	lockedAll := whileLocked(t, e, func() response { return admin("POST", "/admin/reconcile") })
	lockedForward := whileLocked(t, e, func() response { return admin("POST", "/admin/forward") })
	lockedRedeliver := whileLocked(t, e, func() response { return admin("POST", "/admin/events/sim/msg_spec_held/redeliver") })

	return []answerCase{
		{"list payments", "GET", "/v1/payments", get("/v1/payments?limit=2"), 200, ""},
		{"list payments bad limit", "GET", "/v1/payments", get("/v1/payments?limit=0"), 400, payment.ProblemInvalidRequest},
		{"list payments unauthorized", "GET", "/v1/payments", e.do("GET", "/v1/payments", nil), 401, payment.ProblemUnauthorized},
		{"queued", "POST", "/v1/payments", queued, 202, ""},
		{"refund in progress", "POST", refunds, refundInProgress, 409, payment.ProblemInProgress},
		{"refund unauthorized", "POST", refunds, e.do("POST", refunds, []byte(`{}`), "Idempotency-Key", "spec-refund-noauth", "Content-Type", "application/json"), 401, payment.ProblemUnauthorized},
		{"refund too large", "POST", refunds, refund("spec-refund-big-body", "application/json", []byte(`{"pad":"`+strings.Repeat("x", 70_000)+`"}`)), 413, payment.ProblemTooLarge},
		{"refund unsupported media type", "POST", refunds, refund("spec-refund-text", "text/plain", []byte(`{}`)), 415, payment.ProblemUnsupportedMedia},
		{"refund of everything left, no body", "POST", refunds, e.do("POST", refunds, nil, append([]string{"Idempotency-Key", "spec-refund-rest"}, bearer...)...), 201, ""},
		{"list refunds unauthorized", "GET", refunds, e.do("GET", refunds, nil), 401, payment.ProblemUnauthorized},
		{"list refunds of an unknown payment", "GET", "/v1/payments/pay_NOPE/refunds", get("/v1/payments/pay_NOPE/refunds"), 404, payment.ProblemNotFound},
		{"admin page slash", "GET", "/admin/", admin("GET", "/admin/"), 200, ""},
		{"admin page bad filter", "GET", "/admin", admin("GET", "/admin?status=nope"), 400, payment.ProblemInvalidRequest},
		{"admin page slash bad filter", "GET", "/admin/", admin("GET", "/admin/?offset=-1"), 400, payment.ProblemInvalidRequest},
		{"admin reconcile one, locked", "POST", reconcileOne, lockedOne, 503, payment.ProblemUnavailable},
		{"admin reconcile one", "POST", reconcileOne, reconciledOne, 303, ""},
		{"admin reconcile one unknown", "POST", "/admin/attempts/pay_NOPE/reconcile", admin("POST", "/admin/attempts/pay_NOPE/reconcile"), 404, payment.ProblemNotFound},
		{"admin reconcile one cross-origin", "POST", reconcileOne, admin("POST", reconcileOne, crossSite...), 403, payment.ProblemCrossOrigin},
		{"admin reconcile, locked", "POST", "/admin/reconcile", lockedAll, 503, payment.ProblemUnavailable},
		{"admin reconcile", "POST", "/admin/reconcile", admin("POST", "/admin/reconcile"), 303, ""},
		{"admin queue", "GET", "/admin/queue", admin("GET", "/admin/queue"), 200, ""},
		{"admin forward, locked", "POST", "/admin/forward", lockedForward, 503, payment.ProblemUnavailable},
		{"admin forward", "POST", "/admin/forward", admin("POST", "/admin/forward"), 303, ""},
		{"admin forward cross-origin", "POST", "/admin/forward", admin("POST", "/admin/forward", crossSite...), 403, payment.ProblemCrossOrigin},
		{"admin redeliver, locked", "POST", "/admin/events/sim/msg_spec_held/redeliver", lockedRedeliver, 503, payment.ProblemUnavailable},
		{"admin redeliver", "POST", "/admin/events/sim/msg_spec_held/redeliver", admin("POST", "/admin/events/sim/msg_spec_held/redeliver"), 303, ""},
		{"admin redeliver processed", "POST", "/admin/events/sim/msg_spec_ok/redeliver", admin("POST", "/admin/events/sim/msg_spec_ok/redeliver"), 400, payment.ProblemInvalidRequest},
		{"admin redeliver unknown", "POST", "/admin/events/sim/msg_NOPE/redeliver", admin("POST", "/admin/events/sim/msg_NOPE/redeliver"), 404, payment.ProblemNotFound},
		{"admin redeliver cross-origin", "POST", "/admin/events/sim/msg_spec_held/redeliver", admin("POST", "/admin/events/sim/msg_spec_held/redeliver", crossSite...), 403, payment.ProblemCrossOrigin},
		{"admin static", "GET", "/admin/static/admin.css", admin("GET", "/admin/static/admin.css"), 200, ""},
		{"admin static head", "HEAD", "/admin/static/admin.css", admin("HEAD", "/admin/static/admin.css"), 200, ""},
		{"admin static unknown", "GET", "/admin/static/nope.css", admin("GET", "/admin/static/nope.css"), 404, payment.ProblemNotFound},
		{"admin static head unknown", "HEAD", "/admin/static/nope.css", admin("HEAD", "/admin/static/nope.css"), 404, ""},
		{"metrics", "GET", "/metrics", admin("GET", "/metrics"), 200, ""},
		{"sim ledger head", "HEAD", "/sim/charges", admin("HEAD", "/sim/charges"), 200, ""},
		{"sim refunds", "GET", "/sim/refunds", admin("GET", "/sim/refunds"), 200, ""},
		{"sim refunds head", "HEAD", "/sim/refunds", admin("HEAD", "/sim/refunds"), 200, ""},
		{"sim calls head", "HEAD", "/sim/calls", admin("HEAD", "/sim/calls"), 200, ""},
		{"sim faults head", "HEAD", "/sim/faults", admin("HEAD", "/sim/faults"), 200, ""},
	}
}

// redeliveryAnswers are the answers of an endpoint's "send again", from a
// merchant of its own: sent (a redirect), refused cross-origin, unknown,
// held by a deliverer, to a disabled endpoint, and with the writer locked.
func redeliveryAnswers(t *testing.T, e *env) []answerCase {
	t.Helper()
	ctx := context.Background()
	e.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	admin := func(path string, headers ...string) response {
		return e.do("POST", path, nil, append(headers, "Authorization", "Bearer spec-admin")...)
	}
	scope, secret := e.apiKey("spec-deliveries")
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(hook.Close)
	endpoint := func() payment.Endpoint {
		ep, err := payment.NewEndpoint(scope, hook.URL, nil, true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.DB.CreateEndpoint(ctx, ep); err != nil {
			t.Fatal(err)
		}
		return ep
	}
	ep, gone := endpoint(), endpoint()
	e.pay("spec-delivered", visa, "Authorization", "Bearer "+secret)
	e.pay("spec-held", visa, "Authorization", "Bearer "+secret)
	es, err := e.DB.OutboxEvents(ctx, payment.OutboxFilter{Scope: scope, Limit: 2})
	if err != nil || len(es) != 2 {
		t.Fatalf("events = %v, %v, want 2", es, err)
	}
	held, sent := es[0].ID, es[1].ID
	if err := e.DB.DisableEndpoint(ctx, gone.ID, "spec", time.Now()); err != nil {
		t.Fatal(err)
	}
	ds, _ := e.DB.Deliveries(ctx, ep.ID, 10)
	for _, d := range ds {
		if d.EventID == held {
			if _, ok, err := e.DB.ClaimDelivery(ctx, held, ep.ID, d.Fence, time.Now(), time.Now().Add(time.Hour)); !ok || err != nil {
				t.Fatal(ok, err)
			}
		}
	}
	path := func(ep, ev string) string { return "/admin/endpoints/" + ep + "/deliveries/" + ev + "/redeliver" }
	crossSite := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}
	return []answerCase{
		{"admin send again", "POST", path(ep.ID, sent), admin(path(ep.ID, sent)), 303, ""},
		{"admin send again cross-origin", "POST", path(ep.ID, sent), admin(path(ep.ID, sent), crossSite...), 403, payment.ProblemCrossOrigin},
		{"admin send again unknown", "POST", path(ep.ID, "evt_NOPE"), admin(path(ep.ID, "evt_NOPE")), 404, payment.ProblemNotFound},
		{"admin send again held", "POST", path(ep.ID, held), admin(path(ep.ID, held)), 409, payment.ProblemInProgress},
		{"admin send again disabled", "POST", path(gone.ID, sent), admin(path(gone.ID, sent)), 400, payment.ProblemInvalidRequest},
		{"admin send again, locked", "POST", path(ep.ID, sent), whileLocked(t, e, func() response { return admin(path(ep.ID, sent)) }), 503, payment.ProblemUnavailable},
	}
}

// demoAnswers are the answers of demo mode's own routes, from a server of
// their own: the workshop page and its API.
func demoAnswers(t *testing.T) []answerCase {
	t.Helper()
	e := newEnv(t, envOptions{workshop: true})
	e.Client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	naive := func(query, key, body string, headers ...string) response {
		return e.do("POST", "/demo/naive/payments"+query, []byte(body), append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, headers...)...)
	}
	crossSite := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}
	declined := `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`
	lost := func(query, key string) response {
		e.Sim.SetFaults(sim.Faults{FailAfterCharge: 1})
		defer e.Sim.SetFaults(sim.Faults{})
		return naive(query, key, visa)
	}
	crash := func(body string, headers ...string) response {
		return e.do("POST", "/demo/crash", []byte(body), append([]string{"Content-Type", "application/json"}, headers...)...)
	}
	post := func(path, body string, headers ...string) response {
		return e.do("POST", path, []byte(body), append([]string{"Content-Type", "application/json"}, headers...)...)
	}
	offline := func(key, body string, f sim.Faults) response {
		e.Sim.SetFaults(f)
		defer e.Sim.SetFaults(sim.Faults{})
		return post("/demo/offline/payments", body, "Idempotency-Key", key)
	}
	if r := e.pay("demo-mirror", visa); r.Status != 201 {
		t.Fatalf("demo payment = %d %s", r.Status, r.Body)
	}
	if r := e.pay("demo-mirror-declined", declined); r.Status != 402 {
		t.Fatalf("demo declined payment = %d %s", r.Status, r.Body)
	}
	var mirrorBody = func(key, kind string) string {
		return `{"key":"` + key + `","kind":"` + kind + `","event_id":"msg_` + key + kind + `"}`
	}
	naiveRefundPaid := naive("", "demo-naive-refund", visa)
	naiveRefund := func(key string, amount int, f sim.Faults, headers ...string) response {
		e.Sim.SetFaults(f)
		defer e.Sim.SetFaults(sim.Faults{})
		return post("/demo/naive/refunds", `{"key":"`+key+`","amount":`+strconv.Itoa(amount)+`}`, headers...)
	}
	cases := []answerCase{
		{"demo handout", "GET", "/demo/handout", e.do("GET", "/demo/handout?lang=uz", nil), 200, ""},
		{"demo handout head", "HEAD", "/demo/handout", e.do("HEAD", "/demo/handout", nil), 200, ""},
		{"demo mirror event", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror", "succeeded")), 200, ""},
		{"demo mirror event again", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror", "succeeded")), 200, ""},
		{"demo mirror event, late failure", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror", "failed")), 200, ""},
		{"demo mirror event, no charge", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror-declined", "succeeded")), 503, payment.ProblemUnavailable},
		{"demo mirror event, unknown payment", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror-nope", "succeeded")), 404, payment.ProblemNotFound},
		{"demo mirror event, bad body", "POST", "/demo/mirror/events", post("/demo/mirror/events", `{"key":"k","kind":"refunded","event_id":"e"}`), 400, payment.ProblemInvalidRequest},
		{"demo mirror event, cross-origin", "POST", "/demo/mirror/events", post("/demo/mirror/events", mirrorBody("demo-mirror", "failed"), crossSite...), 403, payment.ProblemCrossOrigin},
		{"demo mirror state", "GET", "/demo/mirror/state", e.do("GET", "/demo/mirror/state?key=demo-mirror&event=msg_demo-mirrorsucceeded", nil), 200, ""},
		{"demo mirror state, no key", "GET", "/demo/mirror/state", e.do("GET", "/demo/mirror/state", nil), 400, payment.ProblemInvalidKey},
		{"naive event", "POST", "/demo/naive/events", post("/demo/naive/events", mirrorBody("demo-mirror", "succeeded")), 200, ""},
		{"naive event, bad body", "POST", "/demo/naive/events", post("/demo/naive/events", `{}`), 400, payment.ProblemInvalidRequest},
		{"naive event, cross-origin", "POST", "/demo/naive/events", post("/demo/naive/events", mirrorBody("demo-mirror", "succeeded"), crossSite...), 403, payment.ProblemCrossOrigin},
		{"naive refund, paid", "POST", "/demo/naive/payments", naiveRefundPaid, 201, ""},
		{"naive refund", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-refund", 600, sim.Faults{}), 201, ""},
		{"naive refund, too much", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-refund", 600, sim.Faults{}), 409, payment.ProblemRefundExceeds},
		{"naive refund, unknown payment", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-nope", 1, sim.Faults{}), 409, payment.ProblemNotRefundable},
		{"naive refund, provider down", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-refund", 1, sim.Faults{FailBeforeCharge: 1}), 502, "/problems/naive-provider-error"},
		{"naive refund, bad body", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-refund", 0, sim.Faults{}), 400, payment.ProblemInvalidRequest},
		{"naive refund, cross-origin", "POST", "/demo/naive/refunds", naiveRefund("demo-naive-refund", 1, sim.Faults{}, crossSite...), 403, payment.ProblemCrossOrigin},
		{"demo refunds", "GET", "/demo/refunds", e.do("GET", "/demo/refunds?charge=ch_nope", nil), 200, ""},
		{"offline payment", "POST", "/demo/offline/payments", offline("demo-offline-ok", visa, sim.Faults{}), 201, ""},
		{"offline payment queued", "POST", "/demo/offline/payments", offline("demo-offline-q", visa, sim.Faults{FailBeforeCharge: 1}), 202, ""},
		{"offline payment over the limit", "POST", "/demo/offline/payments", offline("demo-offline-big", `{"amount":9999,"currency":"EUR","source":"tok_visa"}`, sim.Faults{FailBeforeCharge: 1}), 503, payment.ProblemOutcomeUnknown},
		{"offline payment declined", "POST", "/demo/offline/payments", offline("demo-offline-d", declined, sim.Faults{}), 402, payment.ProblemDeclined},
		{"offline payment key reused", "POST", "/demo/offline/payments", offline("demo-offline-ok", declined, sim.Faults{}), 409, payment.ProblemKeyReused},
		{"offline payment bad key", "POST", "/demo/offline/payments", offline("", visa, sim.Faults{}), 400, payment.ProblemInvalidKey},
		{"offline payment cross-origin", "POST", "/demo/offline/payments", post("/demo/offline/payments", visa, append([]string{"Idempotency-Key", "demo-offline-evil"}, crossSite...)...), 403, payment.ProblemCrossOrigin},
		{"offline status", "GET", "/demo/offline/payments", e.do("GET", "/demo/offline/payments?key=demo-offline-q", nil), 200, ""},
		{"offline forward", "POST", "/demo/offline/forward", post("/demo/offline/forward", ""), 200, ""},
		{"offline forward cross-origin", "POST", "/demo/offline/forward", post("/demo/offline/forward", "", crossSite...), 403, payment.ProblemCrossOrigin},
		{"naive offline payment", "POST", "/demo/naive/offline/payments", post("/demo/naive/offline/payments", visa, "Idempotency-Key", "demo-naive-offline"), 202, ""},
		{"naive offline payment bad key", "POST", "/demo/naive/offline/payments", post("/demo/naive/offline/payments", visa), 400, payment.ProblemInvalidRequest},
		{"naive offline payment cross-origin", "POST", "/demo/naive/offline/payments", post("/demo/naive/offline/payments", visa, append([]string{"Idempotency-Key", "demo-naive-evil"}, crossSite...)...), 403, payment.ProblemCrossOrigin},
		{"naive offline forward", "POST", "/demo/naive/offline/forward", post("/demo/naive/offline/forward", ""), 200, ""},
		{"naive offline forward cross-origin", "POST", "/demo/naive/offline/forward", post("/demo/naive/offline/forward", "", crossSite...), 403, payment.ProblemCrossOrigin},
		{"demo root", "GET", "/", e.do("GET", "/", nil), 302, ""},
		{"demo page", "GET", "/demo", e.do("GET", "/demo", nil), 200, ""},
		{"demo page head", "HEAD", "/demo", e.do("HEAD", "/demo", nil), 200, ""},
		{"demo static", "GET", "/demo/static/demo.js", e.do("GET", "/demo/static/demo.js", nil), 200, ""},
		{"demo static head", "HEAD", "/demo/static/demo.js", e.do("HEAD", "/demo/static/demo.js", nil), 200, ""},
		{"demo static unknown", "GET", "/demo/static/nope.js", e.do("GET", "/demo/static/nope.js", nil), 404, payment.ProblemNotFound},
		{"demo static head unknown", "HEAD", "/demo/static/nope.js", e.do("HEAD", "/demo/static/nope.js", nil), 404, ""},
		{"naive payment", "POST", "/demo/naive/payments", naive("", "demo-naive", visa), 201, ""},
		{"naive payment read back", "POST", "/demo/naive/payments", naive("", "demo-naive", visa), 201, ""},
		{"naive payment bad key", "POST", "/demo/naive/payments", naive("", "", visa), 400, payment.ProblemInvalidKey},
		{"naive payment bad body", "POST", "/demo/naive/payments", naive("", "demo-naive-bad", `{"amount":"1"}`), 400, payment.ProblemInvalidRequest},
		{"naive payment declined", "POST", "/demo/naive/payments", naive("", "demo-naive-declined", declined), 402, payment.ProblemDeclined},
		{"naive payment cross-origin", "POST", "/demo/naive/payments", naive("", "demo-naive-evil", visa, crossSite...), 403, payment.ProblemCrossOrigin},
		{"naive payment answer lost", "POST", "/demo/naive/payments", lost("", "demo-naive-lost"), 502, "/problems/naive-provider-error"},
		{"new key each retry", "POST", "/demo/naive/payments", naive("?mistake=newkey", "demo-newkey", visa), 201, ""},
		{"new key each retry, key reused", "POST", "/demo/naive/payments", naive("?mistake=newkey", "demo-newkey", declined), 409, payment.ProblemKeyReused},
		{"new key each retry, answer lost", "POST", "/demo/naive/payments", lost("?mistake=newkey", "demo-newkey-lost"), 503, payment.ProblemOutcomeUnknown},
		{"demo charges", "GET", "/demo/charges", e.do("GET", "/demo/charges?oncepay=a&naive=demo-naive", nil), 200, ""},
		{"demo charges head", "HEAD", "/demo/charges", e.do("HEAD", "/demo/charges", nil), 200, ""},
		{"demo crash", "POST", "/demo/crash", crash(`{"key":"demo-crash"}`), 200, ""},
		{"demo crash again", "POST", "/demo/crash", crash(`{"key":"demo-crash"}`), 409, payment.ProblemKeyReused},
		{"demo crash bad body", "POST", "/demo/crash", crash(`{}`), 400, payment.ProblemInvalidRequest},
		{"demo crash cross-origin", "POST", "/demo/crash", crash(`{"key":"demo-evil"}`, crossSite...), 403, payment.ProblemCrossOrigin},
		{"demo reconcile", "POST", "/demo/reconcile", e.do("POST", "/demo/reconcile", nil), 200, ""},
		{"demo reconcile cross-origin", "POST", "/demo/reconcile", e.do("POST", "/demo/reconcile", nil, crossSite...), 403, payment.ProblemCrossOrigin},
	}
	// With the ledger and the database closed under it, as when stopping.
	e.Env.Close()
	return append(cases,
		answerCase{"demo charges, ledger closed", "GET", "/demo/charges", e.do("GET", "/demo/charges", nil), 503, payment.ProblemUnavailable},
		answerCase{"demo charges head, ledger closed", "HEAD", "/demo/charges", e.do("HEAD", "/demo/charges", nil), 503, ""},
		answerCase{"demo reconcile, database closed", "POST", "/demo/reconcile", e.do("POST", "/demo/reconcile", nil), 503, payment.ProblemUnavailable},
		answerCase{"naive refund, database closed", "POST", "/demo/naive/refunds", e.do("POST", "/demo/naive/refunds", []byte(`{"key":"demo-naive-refund","amount":1}`), "Content-Type", "application/json"), 503, payment.ProblemUnavailable},
		answerCase{"demo mirror event, database closed", "POST", "/demo/mirror/events", e.do("POST", "/demo/mirror/events", []byte(`{"key":"demo-mirror","kind":"failed","event_id":"msg_closed"}`), "Content-Type", "application/json"), 503, payment.ProblemUnavailable},
		answerCase{"demo refunds, ledger closed", "GET", "/demo/refunds", e.do("GET", "/demo/refunds", nil), 503, payment.ProblemUnavailable},
		answerCase{"demo forward, database closed", "POST", "/demo/offline/forward", e.do("POST", "/demo/offline/forward", nil), 503, payment.ProblemUnavailable},
	)
}

// whileReplicaBehind answers do while the replica is reported behind.
func whileReplicaBehind(behind *atomic.Bool, do func() response) response {
	behind.Store(true)
	defer behind.Store(false)
	return do()
}

// inProgress answers a retry of key while its first request is still at the
// (slowed) provider.
func inProgress(t *testing.T, e *env, scope, key string, headers []string) response {
	t.Helper()
	e.Sim.SetFaults(sim.Faults{Latency: 300 * time.Millisecond})
	defer e.Sim.SetFaults(sim.Faults{})
	done := make(chan response)
	go func() { done <- e.pay(key, visa, headers...) }()
	for { // wait for the first request's claim
		if _, err := e.DB.Attempt(context.Background(), scope, key); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r := e.pay(key, visa, headers...)
	if first := <-done; first.Status != 201 {
		t.Errorf("first request of %s = %d %s, want 201", key, first.Status, first.Body)
	}
	return r
}

// notCompleted answers a retry of key after reconcile settled its abandoned
// attempt as never charged; the settlement is recorded straight in the store.
func notCompleted(t *testing.T, e *env, scope, key string, headers []string) response {
	t.Helper()
	ctx := context.Background()
	req, err := payment.ParseRequest([]byte(visa))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	a := payment.NewAttempt(scope, key, req, past, 0)
	if ok, err := e.DB.Claim(ctx, &a); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if ok, err := e.DB.Record(ctx, payment.KindPayment, scope, key, a.Fence, payment.NotCompletedOutcome(a), time.Now()); !ok || err != nil {
		t.Fatalf("Record = %v, %v", ok, err)
	}
	return e.pay(key, visa, headers...)
}

// refundProblems answers the two refund problems only the provider or
// reconcile give, on the payment paid made: the provider declining a refund
// (the payment was refunded in full at the provider, outside oncepay, so
// oncepay still sees it all left), and a retry of a refund abandoned before
// the provider made it, which reconcile settled as not completed.
func refundProblems(t *testing.T, e *env, scope string, paid response, refund func(id, key, body string) response) (declined, notCompleted response) {
	t.Helper()
	ctx := context.Background()
	if paid.Status != 201 {
		t.Fatalf("pay = %d %s", paid.Status, paid.Body)
	}
	id := paid.payment(t).ID
	p, err := e.DB.Payment(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Sim.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "refunded-at-the-provider",
		ChargeID: p.ChargeID, Amount: p.Amount, Currency: p.Currency}); err != nil {
		t.Fatal(err)
	}
	declined = refund(id, "spec-refund-refused", `{}`)

	req, err := payment.ParseRefundRequest(id, []byte(`{"amount":100}`))
	if err != nil {
		t.Fatal(err)
	}
	a := payment.NewRefundAttempt(scope, "spec-refund-abandoned", req, time.Now().Add(-time.Hour), 0)
	if ok, err := e.DB.Claim(ctx, &a); !ok || err != nil {
		t.Fatalf("Claim = %v, %v", ok, err)
	}
	if res, err := e.Reconciler.RunOnce(ctx); err != nil || res.Failed != 1 {
		t.Fatalf("reconcile = %+v, %v; want the abandoned refund settled as not completed", res, err)
	}
	return declined, refund(id, "spec-refund-abandoned", `{"amount":100}`)
}

// Requests the spec itself says are wrong are answered as the spec says, so
// the limits written in it are the server's.
func TestOpenAPIRequestLimits(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := loadSpec(t, e)
	schema := s.doc.Components.Schemas["PaymentRequest"].Value
	for i, body := range []string{
		visa,
		`{"amount":99999999,"currency":"JPY","source":"tok_visa","metadata":{"a":"b"}}`,
		`{"amount":100000000,"currency":"EUR","source":"tok_visa"}`,
		`{"amount":0,"currency":"EUR","source":"tok_visa"}`,
		`{"amount":1,"currency":"eur","source":"tok_visa"}`,
		`{"amount":1,"currency":"EUR","source":"tok visa"}`,
		`{"amount":1,"currency":"EUR"}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","customer":"c_1"}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", 1001) + `"}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","metadata":{"` + strings.Repeat("k", 41) + `":"v"}}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","metadata":{"k":"` + strings.Repeat("v", 501) + `"}}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","description":null}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","metadata":null}`,
		`{"amount":1,"currency":"EUR","source":"tok_visa","metadata":{"k":null}}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		specOK := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()) == nil
		r := e.pay(fmt.Sprintf("limits-%d", i), body)
		if serverOK := r.Status != 400; serverOK != specOK {
			t.Errorf("%.80s: spec accepts %v, server answers %d %s", body, specOK, r.Status, r.Body)
		}
	}
	refund := s.doc.Components.Schemas["RefundRequest"].Value
	id := e.paid("limits-refunded")
	for i, body := range []string{
		`{"amount":null}`,
		`{"amount":1,"reason":null}`,
		`{"amount":0}`,
		`{"reason":"because"}`,
		`{"amount":1,"reason":"duplicate"}`,
		`{}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		specOK := refund.VisitJSON(v, openapi3.EnableJSONSchema2020()) == nil
		r := e.refund(id, fmt.Sprintf("limits-refund-%d", i), body)
		if serverOK := r.Status != 400; serverOK != specOK {
			t.Errorf("refund %s: spec accepts %v, server answers %d %s", body, specOK, r.Status, r.Body)
		}
	}
}

// The document's webhooks are what oncepay sends a merchant's endpoint:
// one for every event type, and every real delivery of each type (a
// payment charged, declined, queued and expired; a refund made and
// declined) has the headers the webhook lists and a body its schema
// takes.
func TestWebhooksMatchOpenAPI(t *testing.T) {
	c := &clock{t: time.Now().UTC()}
	e := newEnv(t, envOptions{auth: true, now: c.now})
	scope, secret := e.apiKey("hooks")
	bearer := []string{"Authorization", "Bearer " + secret}
	lim := payment.OfflineLimits{MaxAmount: 1000, MaxTotal: 2500, MaxAge: time.Hour}
	if err := e.DB.SetOfflineLimits(context.Background(), scope, &lim); err != nil {
		t.Fatal(err)
	}
	type delivery struct {
		header http.Header
		body   []byte
	}
	var (
		mu  sync.Mutex
		got []delivery
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), b})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	ep, err := payment.NewEndpoint(scope, hook.URL, nil, true, c.now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DB.CreateEndpoint(context.Background(), ep); err != nil {
		t.Fatal(err)
	}

	refund := func(id, key, body string) response {
		return e.do("POST", "/v1/payments/"+id+"/refunds", []byte(body), append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, bearer...)...)
	}
	paid := e.pay("hook-paid", visa, bearer...).payment(t)
	e.pay("hook-declined", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`, bearer...)
	if r := refund(paid.ID, "hook-refund", `{"amount":100}`); r.Status != 201 {
		t.Fatalf("refund = %d %s", r.Status, r.Body)
	}
	refundProblems(t, e, scope, e.pay("hook-refunded-elsewhere", visa, bearer...), refund)
	e.setFaults(sim.Faults{FailBeforeCharge: 1})
	if r := e.pay("hook-queued", visa, bearer...); r.Status != 202 {
		t.Fatalf("payment with the provider down = %d %s, want 202 queued", r.Status, r.Body)
	}
	c.add(2 * time.Hour)
	if res := e.forward(); res.Expired != 1 {
		t.Fatalf("forward past the max age = %v, want it expired", res)
	}
	if res, err := e.Deliverer.RunOnce(context.Background()); err != nil || res.Delivered != res.Due {
		t.Fatalf("RunOnce = %+v, %v, want every event delivered", res, err)
	}

	doc, err := openapi3.NewLoader().LoadFromData(web.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range payment.EventTypes {
		if item := doc.Webhooks[string(typ)]; item == nil || item.Post == nil {
			t.Errorf("openapi.yaml has no webhook %s: document its payload under webhooks", typ)
		}
	}
	for name := range doc.Webhooks {
		if !payment.ValidEventType(payment.EventType(name)) {
			t.Errorf("openapi.yaml has a webhook %s, which is no event type", name)
		}
	}
	seen := map[string]int{}
	mu.Lock()
	defer mu.Unlock()
	for _, d := range got {
		var head struct{ Type string }
		json.Unmarshal(d.body, &head)
		seen[head.Type]++
		item := doc.Webhooks[head.Type]
		if item == nil || item.Post == nil {
			continue // reported above
		}
		op := item.Post
		for _, p := range op.Parameters {
			v := d.header.Get(p.Value.Name)
			if v == "" && p.Value.Required {
				t.Errorf("%s: no %s header", head.Type, p.Value.Name)
				continue
			}
			if err := p.Value.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("%s: header %s %q does not match the webhook: %v", head.Type, p.Value.Name, v, err)
			}
		}
		if d.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q", head.Type, d.header.Get("Content-Type"))
		}
		var body any
		if err := json.Unmarshal(d.body, &body); err != nil {
			t.Fatal(err)
		}
		schema := op.RequestBody.Value.Content.Get("application/json").Schema.Value
		if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s: %s does not match the webhook: %v", head.Type, d.body, err)
		}
	}
	for _, typ := range []string{"payment.succeeded", "payment.failed", "payment.queued", "payment.expired", "refund.succeeded", "refund.failed"} {
		if seen[typ] == 0 {
			t.Errorf("no delivery of %s was checked (seen: %v)", typ, seen)
		}
	}
}
