package sim_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// serve sends one request to h and returns the recorded response.
func serve(tb testing.TB, h http.Handler, method, target, body string, header http.Header) *httptest.ResponseRecorder {
	tb.Helper()
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	maps.Copy(r.Header, header)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandlerLedger(t *testing.T) {
	s := MustOpen(t)
	h := s.Handler()
	if got, want := serve(t, h, "GET", "/sim/charges", "", nil).Body.String(), "{\"data\":[]}\n"; got != want {
		t.Errorf("empty ledger = %q, want %q", got, want)
	}

	if _, err := s.Charge(context.Background(), visa("k1")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	w := serve(t, h, "GET", "/sim/charges", "", nil)
	if got, want := w.Header().Get("Content-Type"), "application/json"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var body struct{ Data []map[string]any }
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("decode %q: %v", w.Body, err)
	}
	if len(body.Data) != 1 {
		t.Fatalf("data = %v, want one charge", body.Data)
	}
	got := slices.Sorted(maps.Keys(body.Data[0]))
	want := []string{"amount", "created_at", "currency", "id", "idempotency_key"}
	if !slices.Equal(got, want) {
		t.Errorf("charge fields = %v, want %v", got, want)
	}
}

func TestHandlerFaults(t *testing.T) {
	s := MustOpen(t)
	h := s.Handler()
	if got, want := serve(t, h, "GET", "/sim/faults", "", nil).Body.String(),
		`{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0,"no_dedupe":false,"no_refund_limit":false,"fail_refund_later":0,"webhook_delay":"0s","webhook_duplicate":0,"webhook_reorder":0}`+"\n"; got != want {
		t.Errorf("GET /sim/faults = %q, want %q", got, want)
	}

	const set = `{"latency":"250ms","fail_before_charge":0,"fail_after_charge":0.5,"fail_lookup":0,"no_dedupe":true,"no_refund_limit":true,"fail_refund_later":0.125,"webhook_delay":"2s","webhook_duplicate":0.5,"webhook_reorder":0.25}` + "\n"
	w := serve(t, h, "PUT", "/sim/faults", set, nil)
	if w.Code != http.StatusOK || w.Body.String() != set {
		t.Errorf("PUT /sim/faults = %d %q, want 200 %q", w.Code, w.Body, set)
	}
	if got, want := s.Faults(), (sim.Faults{Latency: 250 * time.Millisecond, FailAfterCharge: 0.5, NoDedupe: true, NoRefundLimit: true, FailRefundLater: 0.125,
		WebhookDelay: 2 * time.Second, WebhookDuplicate: 0.5, WebhookReorder: 0.25}); got != want {
		t.Errorf("Faults() = %+v, want %+v", got, want)
	}
	if got := serve(t, h, "GET", "/sim/faults", "", nil).Body.String(); got != set {
		t.Errorf("GET /sim/faults after PUT = %q, want %q", got, set)
	}
	// The four old fields alone still work: no_dedupe and the webhook knobs
	// are optional, and off when absent.
	if w := serve(t, h, "PUT", "/sim/faults", `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`, nil); w.Code != http.StatusOK || s.Faults() != (sim.Faults{}) {
		t.Errorf("PUT without no_dedupe = %d %s, faults %+v, want 200 and a deduping provider", w.Code, w.Body, s.Faults())
	}
}

func TestHandlerCalls(t *testing.T) {
	s := MustOpen(t)
	h := s.Handler()
	if got, want := serve(t, h, "GET", "/sim/calls", "", nil).Body.String(), "{\"data\":[]}\n"; got != want {
		t.Errorf("no calls = %q, want %q", got, want)
	}
	s.Charge(context.Background(), visa("k1"))
	s.Charge(context.Background(), visa("k1"))
	s.Lookup(context.Background(), payment.LookupRequest{IdempotencyKey: "k1"})
	want := `{"data":[{"idempotency_key":"k1","charges":2,"lookups":1}]}` + "\n"
	if got := serve(t, h, "GET", "/sim/calls", "", nil).Body.String(); got != want {
		t.Errorf("GET /sim/calls = %q, want %q", got, want)
	}
}

func TestHandlerFaultsInvalid(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{"not JSON", `latency=1s`},
		{"unknown field", `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0,"fail_everything":1}`},
		{"missing field", `{"latency":"0s","fail_before_charge":0,"fail_after_charge":0}`},
		{"latency not a duration", `{"latency":"soon","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`},
		{"latency over a minute", `{"latency":"2m","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`},
		{"negative latency", `{"latency":"-1s","fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`},
		{"probability above 1", `{"latency":"0s","fail_before_charge":0,"fail_after_charge":2,"fail_lookup":0}`},
		{"too large", `{"latency":"0s",` + strings.Repeat(" ", 100<<10) + `"fail_before_charge":0,"fail_after_charge":0,"fail_lookup":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			before := sim.Faults{FailLookup: 0.25}
			mustSetFaults(t, s, before)
			w := serve(t, s.Handler(), "PUT", "/sim/faults", tt.body, nil)
			if w.Code != http.StatusBadRequest {
				t.Errorf("status = %d, want %d", w.Code, http.StatusBadRequest)
			}
			if got, want := w.Header().Get("Content-Type"), "application/problem+json"; got != want {
				t.Errorf("Content-Type = %q, want %q", got, want)
			}
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("decode %q: %v", w.Body, err)
			}
			if p.Type != "/problems/invalid-request" || p.Status != http.StatusBadRequest || p.Title == "" || p.Detail == "" {
				t.Errorf("problem = %+v, want type /problems/invalid-request, status 400, a title and a detail", p)
			}
			if got := s.Faults(); got != before {
				t.Errorf("Faults() = %+v, want unchanged %+v", got, before)
			}
		})
	}
}

func TestHandlerCharge(t *testing.T) {
	const body = `{"amount":1250,"currency":"EUR","source":"tok_visa","description":"order 42"}`
	tests := []struct {
		name       string
		key        string
		body       string
		faults     sim.Faults
		wantStatus int
		wantType   string // the error type; "" for a charge
		wantCode   string
	}{
		{"charged", "new", body, sim.Faults{}, 200, "", ""},
		{"replayed", "taken", body, sim.Faults{}, 200, "", ""},
		{"declined", "new", strings.Replace(body, "tok_visa", "tok_chargeDeclinedInsufficientFunds", 1), sim.Faults{}, 402, "card_error", "insufficient_funds"},
		{"key reused", "taken", strings.Replace(body, "1250", "999", 1), sim.Faults{}, 409, "idempotency_error", ""},
		{"no key", "", body, sim.Faults{}, 400, "invalid_request_error", ""},
		{"zero amount", "new", strings.Replace(body, "1250", "0", 1), sim.Faults{}, 400, "invalid_request_error", ""},
		{"unknown field", "new", `{"amount":1250,"currency":"EUR","source":"tok_visa","capture":false}`, sim.Faults{}, 400, "invalid_request_error", ""},
		{"not JSON", "new", `amount=1250`, sim.Faults{}, 400, "invalid_request_error", ""},
		{"failure before charging", "new", body, sim.Faults{FailBeforeCharge: 1}, 500, "api_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			if _, err := s.Charge(context.Background(), visa("taken")); err != nil {
				t.Fatalf("Charge: %v", err)
			}
			mustSetFaults(t, s, tt.faults)
			w := serve(t, s.Handler(), "POST", "/v1/charges", tt.body, http.Header{"Idempotency-Key": {tt.key}})
			if w.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantType == "" {
				var c payment.Charge
				if err := json.Unmarshal(w.Body.Bytes(), &c); err != nil || c.IdempotencyKey != tt.key || c.ID == "" {
					t.Errorf("body = %q, want a charge under %q", w.Body, tt.key)
				}
				return
			}
			checkAPIError(t, w, tt.wantType, tt.wantCode)
		})
	}
}

func TestHandlerLookup(t *testing.T) {
	tests := []struct {
		name       string
		target     string
		faults     sim.Faults
		wantStatus int
		wantType   string // the error type; "" for a charge
	}{
		{"found", "/v1/charges?idempotency_key=taken", sim.Faults{}, 200, ""},
		{"not found", "/v1/charges?idempotency_key=other", sim.Faults{}, 404, "not_found"},
		{"no key", "/v1/charges", sim.Faults{}, 400, "invalid_request_error"},
		{"lookup fails", "/v1/charges?idempotency_key=taken", sim.Faults{FailLookup: 1}, 500, "api_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustOpen(t)
			want, err := s.Charge(context.Background(), visa("taken"))
			if err != nil {
				t.Fatalf("Charge: %v", err)
			}
			mustSetFaults(t, s, tt.faults)
			w := serve(t, s.Handler(), "GET", tt.target, "", nil)
			if w.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", w.Code, tt.wantStatus, w.Body)
			}
			if tt.wantType == "" {
				var got payment.Charge
				if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got != want {
					t.Errorf("body = %q, want %+v", w.Body, want)
				}
				return
			}
			checkAPIError(t, w, tt.wantType, "")
		})
	}
}

// checkAPIError checks w holds the provider API's error shape.
func checkAPIError(tb testing.TB, w *httptest.ResponseRecorder, wantType, wantCode string) {
	tb.Helper()
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		tb.Fatalf("decode %q: %v", w.Body, err)
	}
	if e.Error.Type != wantType || e.Error.Code != wantCode {
		tb.Errorf("error = %+v, want type %q code %q", e.Error, wantType, wantCode)
	}
}

func TestHandlerLostResponse(t *testing.T) {
	s := MustOpen(t)
	mustSetFaults(t, s, sim.Faults{FailAfterCharge: 1})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	req, err := http.NewRequest("POST", srv.URL+"/v1/charges",
		strings.NewReader(`{"amount":1250,"currency":"EUR","source":"tok_visa","description":"order 42"}`))
	if err != nil {
		t.Fatalf("NewRequest: %v", err)
	}
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("status = %d, want no response at all", resp.StatusCode)
	}
	if got := len(mustCharges(t, s)); got != 1 {
		t.Errorf("ledger rows = %d, want 1: the charge was made, only the response was lost", got)
	}
}
