package server_test

import (
	"encoding/json"
	"testing"

	"github.com/oncepay/oncepay/payment"
)

// The workshop's POSTs change state (a crash claims a key, the naive lane
// charges, reconcile settles): a cross-site page must not drive them, with
// or without Sec-Fetch-Site, even as a "simple" text/plain request that
// needs no preflight. A request from no browser (curl) still works.
func TestWorkshopRefusesCrossOrigin(t *testing.T) {
	e := newEnv(t, envOptions{workshop: true})
	posts := []struct{ path, body string }{
		{"/demo/crash", `{"key":"evil-crash"}`},
		{"/demo/reconcile", ``},
		{"/demo/naive/payments", visa},
	}
	for _, site := range [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"},
	} {
		for _, p := range posts {
			h := append([]string{"Content-Type", "text/plain", "Idempotency-Key", "evil-naive"}, site...)
			if r := e.do("POST", p.path, []byte(p.body), h...); r.Status != 403 {
				t.Errorf("cross-origin POST %s (%v) = %d %s, want 403", p.path, site, r.Status, r.Body)
			}
		}
	}
	if n := len(e.counts()); n != 0 {
		t.Errorf("attempts = %v, want none", e.counts())
	}
	if n := len(e.ledger()); n != 0 {
		t.Errorf("ledger has %d charges, want none", n)
	}
	if r := e.do("POST", "/demo/reconcile", nil, "Sec-Fetch-Site", "same-origin"); r.Status != 200 {
		t.Errorf("same-origin POST /demo/reconcile = %d %s, want 200", r.Status, r.Body)
	}
	if r := e.do("POST", "/demo/crash", []byte(`{"key":"curl-crash"}`), "Content-Type", "application/json"); r.Status != 200 {
		t.Errorf("POST /demo/crash from no browser = %d %s, want 200", r.Status, r.Body)
	}
}

// The naive lane validates as the real one does, and names the field.
func TestWorkshopNaiveNamesTheParam(t *testing.T) {
	e := newEnv(t, envOptions{workshop: true})
	r := e.do("POST", "/demo/naive/payments", []byte(`{"amount":0,"currency":"EUR","source":"tok_visa"}`),
		"Idempotency-Key", "naive-bad", "Content-Type", "application/json")
	var p payment.Problem
	json.Unmarshal(r.Body, &p)
	if r.Status != 400 || p.Type != payment.ProblemInvalidRequest || p.Param != "amount" {
		t.Errorf("naive lane, amount 0 = %d %s, want 400 invalid-request with param amount", r.Status, r.Body)
	}
}
