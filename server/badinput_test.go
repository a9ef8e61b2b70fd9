package server_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/sqlitestore"
)

// Every bad input gets its documented 4xx problem, writes no row, charges
// nothing, and leaves the key usable for a valid retry.
func TestBadInputs(t *testing.T) {
	const json = "application/json"
	tests := []struct {
		name        string
		key         []string // Idempotency-Key header values
		contentType string
		body        string
		status      int
		problem     string
	}{
		{"malformed JSON", nil, json, `{"amount":1000,`, 400, payment.ProblemInvalidRequest},
		{"empty body", nil, json, ``, 400, payment.ProblemInvalidRequest},
		{"not an object", nil, json, `"pay me"`, 400, payment.ProblemInvalidRequest},
		{"duplicate JSON key", nil, json, `{"amount":1,"amount":1000,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"trailing data", nil, json, visa + `{"amount":2}`, 400, payment.ProblemInvalidRequest},
		{"amount as string", nil, json, `{"amount":"1000","currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"amount as float", nil, json, `{"amount":1000.5,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"amount zero", nil, json, `{"amount":0,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"amount negative", nil, json, `{"amount":-1000,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"amount overflowing", nil, json, `{"amount":9223372036854775808,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"amount over the maximum", nil, json, `{"amount":100000000,"currency":"EUR","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"currency not ASCII", nil, json, `{"amount":1000,"currency":"uſd","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"currency not ISO 4217", nil, json, `{"amount":1000,"currency":"EU","source":"tok_visa"}`, 400, payment.ProblemInvalidRequest},
		{"missing source", nil, json, `{"amount":1000,"currency":"EUR"}`, 400, payment.ProblemInvalidRequest},
		{"source wrong type", nil, json, `{"amount":1000,"currency":"EUR","source":["tok_visa"]}`, 400, payment.ProblemInvalidRequest},
		{"unknown field", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","customer":"c_1"}`, 400, payment.ProblemInvalidRequest},
		{"nested metadata", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":{"b":"c"}}}`, 400, payment.ProblemInvalidRequest},
		{"invalid UTF-8", nil, json, "{\"amount\":1000,\"currency\":\"EUR\",\"source\":\"tok_visa\",\"description\":\"\xc3\x28\"}", 400, payment.ProblemInvalidRequest},
		{"control character in description", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"a\u0007b"}`, 400, payment.ProblemInvalidRequest},
		{"C1 control character in description", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"a\u009b[2Jb"}`, 400, payment.ProblemInvalidRequest},
		{"lone surrogate in metadata", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","metadata":{"a":"\ud800"}}`, 400, payment.ProblemInvalidRequest},
		{"oversize body", nil, json, `{"amount":1000,"currency":"EUR","source":"tok_visa","description":"` + strings.Repeat("x", 70_000) + `"}`, 413, payment.ProblemTooLarge},
		{"text/plain content type", nil, "text/plain", visa, 415, payment.ProblemUnsupportedMedia},
		{"form content type", nil, "application/x-www-form-urlencoded", visa, 415, payment.ProblemUnsupportedMedia},
		{"missing content type", nil, "", visa, 415, payment.ProblemUnsupportedMedia},
		{"latin-1 charset", nil, "application/json; charset=latin1", visa, 415, payment.ProblemUnsupportedMedia},
		{"missing key", []string{}, json, visa, 400, payment.ProblemInvalidKey},
		{"empty key", []string{""}, json, visa, 400, payment.ProblemInvalidKey},
		{"overlong key", []string{strings.Repeat("k", 256)}, json, visa, 400, payment.ProblemInvalidKey},
		{"key with space", []string{"my key"}, json, visa, 400, payment.ProblemInvalidKey},
		{"key with control character", []string{"key\tx"}, json, visa, 400, payment.ProblemInvalidKey},
		{"key non-ASCII", []string{"clé"}, json, visa, 400, payment.ProblemInvalidKey},
		{"two keys", []string{"k1", "k2"}, json, visa, 400, payment.ProblemInvalidKey},
	}
	e := newEnv(t, envOptions{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "bad-" + strings.ReplaceAll(tt.name, " ", "-")
			keys := []string{key}
			if tt.key != nil {
				keys = tt.key
			}
			var headers []string
			for _, k := range keys {
				headers = append(headers, "Idempotency-Key", k)
			}
			if tt.contentType != "" {
				headers = append(headers, "Content-Type", tt.contentType)
			}
			r := e.do("POST", "/v1/payments", []byte(tt.body), headers...)
			if r.Status != tt.status || r.problemType() != tt.problem {
				t.Fatalf("status %d type %q (%s), want %d %q", r.Status, r.problemType(), r.Body, tt.status, tt.problem)
			}
			if n := len(e.counts()); n != 0 {
				t.Fatalf("attempts = %v, want none", e.counts())
			}
			if n := len(e.ledger()); n != 0 {
				t.Fatalf("ledger has %d charges, want none", n)
			}
			retryKey := key
			if tt.key != nil {
				retryKey = "good-" + key
			}
			if r := e.pay(retryKey, visa); r.Status != 201 {
				t.Fatalf("valid retry = %d %s, want 201", r.Status, r.Body)
			}
			e.resetData()
		})
	}
	if len(tests) < 25 {
		t.Errorf("%d bad inputs, want at least 25", len(tests))
	}
}

// resetData empties the attempts and the ledger between subtests.
func (e *env) resetData() {
	e.t.Helper()
	for _, f := range []string{"oncepay.db", "sim.db"} {
		db, err := sql.Open("sqlite", filepath.Join(e.Dir, f)+"?_pragma=busy_timeout(5000)")
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := db.Exec(`DELETE FROM payment_attempts`); err != nil && f == "oncepay.db" {
			e.t.Fatal(err)
		}
		if _, err := db.Exec(`DELETE FROM sim_charges`); err != nil && f == "sim.db" {
			e.t.Fatal(err)
		}
		db.Close()
	}
}

// Without a live API key, serve answers 401 and writes nothing.
func TestUnauthorized(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	_, live := e.apiKey("shop")
	_, keyID, revoked := e.Merchant(t, "old")
	if err := e.DB.RevokeAPIKey(context.Background(), keyID, time.Now()); err != nil {
		t.Fatal(err)
	}
	basic := func(user, password string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
	}
	for name, headers := range map[string][]string{
		"no header":               nil,
		"unknown key":             {"Authorization", "Bearer opk_NOTAKEY"},
		"revoked key":             {"Authorization", "Bearer " + revoked},
		"revoked key as basic":    {"Authorization", basic(revoked, "")},
		"basic, not base64":       {"Authorization", "Basic " + live},
		"basic with a password":   {"Authorization", basic(live, "x")},
		"basic, key as password":  {"Authorization", basic("", live)},
		"empty bearer":            {"Authorization", "Bearer "},
		"key as cookie":           {"Cookie", "key=" + live},
		"key in another header":   {"X-Api-Key", live},
		"bearer, unknown scheme":  {"Authorization", "Token " + live},
		"basic, unknown key":      {"Authorization", basic("opk_NOTAKEY", "")},
		"basic, empty user":       {"Authorization", basic("", "")},
		"bearer with basic's key": {"Authorization", "Bearer " + basic(live, "")},
	} {
		r := e.pay("unauth-"+name, visa, headers...)
		if r.Status != 401 || r.problemType() != payment.ProblemUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d %s, want 401 with WWW-Authenticate", name, r.Status, r.Body)
		}
	}
	if c := e.counts(); len(c) != 0 {
		t.Errorf("attempts = %v, want none", c)
	}
	if r := e.pay("auth-ok", visa, "Authorization", "Bearer "+live); r.Status != 201 {
		t.Errorf("live key: %d %s, want 201", r.Status, r.Body)
	}
	// As Stripe's clients send it: the key as the user name, no password.
	if r := e.pay("auth-ok", visa, "Authorization", basic(live, "")); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("live key as HTTP Basic: %d %s, want the replayed 201", r.Status, r.Body)
	}
}

// A database locked by another process is a 503 with Retry-After, not a 500;
// replays, which only read, are still served.
func TestBusyDatabaseIs503(t *testing.T) {
	e := newEnv(t, envOptions{storeOp: sqlitestore.Options{BusyTimeout: 100 * time.Millisecond}})
	first := e.pay("before-lock", visa)
	if first.Status != 201 {
		t.Fatalf("first = %d", first.Status)
	}
	whileLocked(t, e, func() response {
		r := e.pay("while-locked", visa)
		if r.Status != 503 || r.problemType() != payment.ProblemUnavailable || r.Header.Get("Retry-After") == "" {
			t.Errorf("write while locked = %d %s, want 503 unavailable with Retry-After", r.Status, r.Body)
		}
		if r := e.pay("before-lock", visa); r.Status != 201 || string(r.Body) != string(first.Body) {
			t.Errorf("replay while locked = %d %s, want the stored 201", r.Status, r.Body)
		}
		return r
	})
	if n := len(e.ledger()); n != 1 {
		t.Errorf("ledger has %d charges, want 1", n)
	}
	if r := e.pay("while-locked", visa); r.Status != 201 {
		t.Errorf("retry after the lock = %d %s, want 201", r.Status, r.Body)
	}
}

// A known path with the wrong method is 405 with a problem, not 404.
func TestMethodNotAllowed(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, c := range [][2]string{{"DELETE", "/v1/payments"}, {"PUT", "/v1/payments"}, {"DELETE", "/v1/payments/x"},
		{"POST", "/healthz"}, {"PUT", "/v1/attempts"}, {"GET", "/admin/reconcile"}} {
		if r := e.do(c[0], c[1], nil); r.Status != 405 || r.problemType() != payment.ProblemMethodNotAllowed {
			t.Errorf("%s %s = %d %s, want 405", c[0], c[1], r.Status, r.Body)
		}
	}
	if r := e.do("GET", "/v2/nothing", nil); r.Status != 404 || r.problemType() != payment.ProblemNotFound {
		t.Errorf("GET /v2/nothing = %d, want 404", r.Status)
	}
}

// The body limit: a valid payment of exactly MaxBodyBytes (padded with
// insignificant whitespace) is taken; one byte more is 413 and charges
// nothing.
func TestBodyLimitBoundary(t *testing.T) {
	e := newEnv(t, envOptions{})
	pad := func(n int) string { return visa[:len(visa)-1] + strings.Repeat(" ", n-len(visa)) + "}" }
	if r := e.pay("at-limit", pad(payment.MaxBodyBytes)); r.Status != 201 {
		t.Errorf("body of %d bytes = %d %s, want 201", payment.MaxBodyBytes, r.Status, r.Body)
	}
	if r := e.pay("past-limit", pad(payment.MaxBodyBytes+1)); r.Status != 413 || r.problemType() != payment.ProblemTooLarge {
		t.Errorf("body of %d bytes = %d %s, want 413 request too large", payment.MaxBodyBytes+1, r.Status, r.Body)
	}
	if n := len(e.ledger()); n != 1 {
		t.Errorf("ledger has %d charges, want 1", n)
	}
}

// A compressed body is refused as such (415, with the codings accepted),
// not misread as JSON that is not UTF-8; identity is no coding at all.
func TestContentEncodingRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(visa))
	zw.Close()
	for _, tt := range []struct {
		name, encoding string
		body           []byte
	}{
		{"gzip", "gzip", gz.Bytes()},
		{"gzip after identity", "identity, gzip", gz.Bytes()},
		{"deflate in capitals", "DEFLATE", []byte(visa)},
		{"br", "br", []byte(visa)},
	} {
		key := "enc-" + strings.ReplaceAll(tt.name, " ", "-")
		r := e.do("POST", "/v1/payments", tt.body, "Idempotency-Key", key, "Content-Type", "application/json", "Content-Encoding", tt.encoding)
		if r.Status != 415 || r.problemType() != payment.ProblemUnsupportedEncoding || r.Header.Get("Accept-Encoding") != "identity" {
			t.Errorf("%s: %d %q Accept-Encoding %q (%s), want 415 %s with Accept-Encoding identity",
				tt.name, r.Status, r.problemType(), r.Header.Get("Accept-Encoding"), r.Body, payment.ProblemUnsupportedEncoding)
		}
		if _, err := e.DB.Attempt(context.Background(), "demo", key); err == nil {
			t.Errorf("%s: a row was written", tt.name)
		}
	}
	if r := e.do("POST", "/v1/payments", []byte(visa), "Idempotency-Key", "enc-identity", "Content-Type", "application/json", "Content-Encoding", "identity"); r.Status != 201 {
		t.Errorf("identity: %d %s, want 201", r.Status, r.Body)
	}
	if n := len(e.ledger()); n != 1 {
		t.Errorf("ledger has charges for %d keys, want 1 (identity only)", n)
	}
}

// JSON null is no value of any field: a 400 naming it, nothing written,
// nothing sent, the key still free. A refund's null amount is not "all that
// is left" (only an absent one is), and a null metadata value is not "".
func TestNullIsRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	problem := func(r response) payment.Problem {
		var p payment.Problem
		json.Unmarshal(r.Body, &p)
		return p
	}
	const ok = `"amount":1000,"currency":"EUR","source":"tok_visa"`
	for _, tt := range []struct{ name, body, param string }{
		{"amount", `{"amount":null,"currency":"EUR","source":"tok_visa"}`, "amount"},
		{"currency", `{"amount":1000,"currency":null,"source":"tok_visa"}`, "currency"},
		{"source", `{"amount":1000,"currency":"EUR","source":null}`, "source"},
		{"description", "{" + ok + `,"description":null}`, "description"},
		{"metadata", "{" + ok + `,"metadata":null}`, "metadata"},
		{"metadata value", "{" + ok + `,"metadata":{"a":null}}`, "metadata[a]"},
	} {
		r := e.pay("null-"+strings.ReplaceAll(tt.name, " ", "-"), tt.body)
		if p := problem(r); r.Status != 400 || p.Type != payment.ProblemInvalidRequest || p.Param != tt.param {
			t.Errorf("payment with a null %s = %d %s, want 400 invalid-request with param %q", tt.name, r.Status, r.Body, tt.param)
		}
	}
	if n := len(e.counts()); n != 0 {
		t.Errorf("attempts = %v, want none", e.counts())
	}
	if n := len(e.ledger()); n != 0 {
		t.Errorf("ledger has %d charges, want none", n)
	}
	// The key of the null metadata value is free, and "" is a request of its own.
	r := e.pay("null-metadata-value", "{"+ok+`,"metadata":{"a":""}}`)
	if r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf(`{"a":""} under the key a {"a":null} was refused under = %d %s (replayed %q), want a new 201`, r.Status, r.Body, r.Header.Get("Idempotent-Replayed"))
	}

	id := e.paid("null-paid")
	for _, tt := range []struct{ name, body, param string }{
		{"amount", `{"amount":null}`, "amount"},
		{"amount with a reason", `{"amount":null,"reason":"requested_by_customer"}`, "amount"},
		{"reason", `{"amount":100,"reason":null}`, "reason"},
	} {
		r := e.refund(id, "null-refund", tt.body)
		if p := problem(r); r.Status != 400 || p.Type != payment.ProblemInvalidRequest || p.Param != tt.param {
			t.Errorf("refund with a null %s = %d %s, want 400 invalid-request with param %q", tt.name, r.Status, r.Body, tt.param)
		}
	}
	if total, _ := e.providerRefunds(); total != 0 {
		t.Errorf("provider refunded %d, want nothing", total)
	}
	if r := e.refund(id, "null-refund", `{"amount":100}`); r.Status != 201 {
		t.Errorf("refund of 100 under the same key = %d %s, want 201", r.Status, r.Body)
	}
	if p, err := e.DB.Payment(context.Background(), "demo", id); err != nil || p.AmountRefunded != 100 {
		t.Errorf("payment = %+v, %v; want 100 refunded", p, err)
	}
}
