package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// A merchant rotates its API key (a new key, deployed, the old one revoked)
// while a client retries across the switch: the retry with the new key is
// the same payment, replayed, not a second charge, and the payment stays
// readable. Another merchant's same key stays its own.
func TestKeyRotationKeepsIdempotency(t *testing.T) {
	e := newEnv(t, envOptions{auth: true})
	shop, oldKeyID, oldKey := e.Merchant(t, "Shop A")
	first := e.pay("rotate-1", visa, "Authorization", "Bearer "+oldKey)
	if first.Status != 201 {
		t.Fatalf("first = %d %s", first.Status, first.Body)
	}
	_, newKey := e.APIKey(t, shop, "rotated")
	if err := e.DB.RevokeAPIKey(context.Background(), oldKeyID, time.Now()); err != nil {
		t.Fatal(err)
	}
	retry := e.pay("rotate-1", visa, "Authorization", "Bearer "+newKey)
	if retry.Status != 201 || !bytes.Equal(retry.Body, first.Body) || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry with the new key = %d %s, want the replayed %s", retry.Status, retry.Body, first.Body)
	}
	if r := e.pay("rotate-1", `{"amount":2000,"currency":"EUR","source":"tok_visa"}`, "Authorization", "Bearer "+newKey); r.Status != 409 || r.problemType() != payment.ProblemKeyReused {
		t.Errorf("the key with another body, new API key = %d %s, want 409 key reused", r.Status, r.Body)
	}
	id := first.payment(t).ID
	if r := e.do("GET", "/v1/payments/"+id, nil, "Authorization", "Bearer "+newKey); r.Status != 200 {
		t.Errorf("GET with the new key = %d %s, want 200", r.Status, r.Body)
	}
	if r := e.do("GET", "/v1/payments/"+id, nil, "Authorization", "Bearer "+oldKey); r.Status != 401 {
		t.Errorf("GET with the revoked key = %d, want 401", r.Status)
	}
	dk := payment.DownstreamKey(shop, "rotate-1")
	if charges, calls := e.ledger()[dk], e.Calls()[dk]; len(charges) != 1 || calls.Charges != 1 {
		t.Errorf("provider under the merchant's downstream key: %d charges, %d charge calls, want 1 and 1", len(charges), calls.Charges)
	}

	// Another merchant, same Idempotency-Key: its own payment, invisible to A.
	_, otherKey := e.apiKey("Shop B")
	other := e.pay("rotate-1", visa, "Authorization", "Bearer "+otherKey)
	if other.Status != 201 || other.Header.Get("Idempotent-Replayed") != "" || other.payment(t).ID == id {
		t.Errorf("another merchant's same key = %d %s, want a payment of its own", other.Status, other.Body)
	}
	if r := e.do("GET", "/v1/payments/"+id, nil, "Authorization", "Bearer "+otherKey); r.Status != 404 {
		t.Errorf("another merchant reads A's payment: %d, want 404", r.Status)
	}
}

// A database made by oncepay before merchants (commit d4adef9: an API key's
// id was the scope of its payments; testdata/made-by-d4adef9 holds the file
// and its simulated ledger) opens with every key its own merchant: the old
// secrets still work, the revoked one still does not, every stored answer
// replays byte for byte, and the attempt a crash left in progress is
// recovered under the downstream key the provider already knows.
func TestMigrateDatabaseMadeBeforeMerchants(t *testing.T) {
	e := newEnv(t, envOptions{dir: testdataCopy(t, "made-by-d4adef9"), auth: true})
	const (
		shopA   = "opk_AFTLLA7ODHLWLBYWRVT4WL3IOQMDJSLKYI5CFVR5HSPK2YMAMDTW" // key_3lz3cthsgj2dup3w
		shopB   = "opk_66ILDFJFU7XTS6QACFALGRLIBF5H32KPTQR4EFM6QUMTSJJXJYSR" // key_pfgr6wgogneg6rex
		revoked = "opk_XC56W2CDLBBBGRRK3ICUBGQ3SIGP362YE2RBY2N3EB77VH34QCCZ"
	)
	merchants, err := e.DB.Merchants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range merchants {
		names = append(names, m.ID+" "+m.Name)
	}
	want := []string{"key_3lz3cthsgj2dup3w Shop A", "key_pfgr6wgogneg6rex Shop B", "key_hm7mhkonwi6nyor6 Old"}
	if len(names) != len(want) || names[0] != want[0] || names[1] != want[1] || names[2] != want[2] {
		t.Errorf("merchants = %q, want %q", names, want)
	}
	if c := e.counts(); c[payment.Succeeded] != 2 || c[payment.Failed] != 1 || c[payment.InProgress] != 1 {
		t.Errorf("attempts = %v, want all four kept", c)
	}

	for _, tt := range []struct {
		secret, key, body string
		status            int
		answer            string // the first answer, as the old server gave it
	}{
		{shopA, "order-1", `{"amount":1999,"currency":"EUR","source":"tok_visa","description":"Tea","metadata":{"order":"1"}}`, 201,
			`{"id":"pay_HONR9F4ESQG4VGRQITSNTOFHVH","object":"payment","status":"succeeded","amount":1999,"currency":"EUR","charge_id":"ch_3mgmeaibeezkz6yq6n3atl6n","description":"Tea","metadata":{"order":"1"},"idempotency_key":"order-1","created_at":"2026-12-01T01:13:39.634Z"}`},
		{shopA, "order-2", `{"amount":500,"currency":"EUR","source":"tok_chargeDeclined"}`, 402,
			`{"type":"/problems/payment-declined","title":"Payment declined","status":402,"detail":"Your card was declined.","payment_id":"pay_HONR9F4OD3NGCWVGXZLTJWBVJR","decline_code":"card_declined"}`},
		{shopB, "order-1", `{"amount":2500,"currency":"USD","source":"tok_visa"}`, 201,
			`{"id":"pay_HONR9F4Y3SFHGIEKP466FMT7P5","object":"payment","status":"succeeded","amount":2500,"currency":"USD","charge_id":"ch_webd32xxpehulx3ho7mtd4rw","idempotency_key":"order-1","created_at":"2026-12-01T01:13:39.659Z"}`},
	} {
		r := e.pay(tt.key, tt.body, "Authorization", "Bearer "+tt.secret)
		if r.Status != tt.status || string(bytes.TrimSpace(r.Body)) != tt.answer || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s after the migration = %d %s, want the replayed %d %s", tt.key, r.Status, r.Body, tt.status, tt.answer)
		}
	}
	if r := e.pay("order-9", visa, "Authorization", "Bearer "+revoked); r.Status != 401 {
		t.Errorf("the revoked key after the migration = %d, want 401", r.Status)
	}

	// Every attempt was made through the provider the file is bound to.
	if a, err := e.DB.Attempt(context.Background(), "key_pfgr6wgogneg6rex", "order-2"); err != nil || a.Provider != "sim" {
		t.Errorf("the attempt in progress after the migration = %+v, %v; want made through the bound provider, sim", a, err)
	}

	// Shop B's order-2 was claimed, then its server was killed: the retry
	// takes it over and charges under the downstream key of the old scope.
	r := e.pay("order-2", `{"amount":700,"currency":"USD","source":"tok_visa"}`, "Authorization", "Bearer "+shopB)
	dk := payment.DownstreamKey("key_pfgr6wgogneg6rex", "order-2")
	if charges := e.ledger()[dk]; r.Status != 201 || len(charges) != 1 || r.payment(t).ChargeID != charges[0].ID {
		t.Errorf("the abandoned attempt's retry = %d %s, ledger %v; want 201 naming the one charge under the old downstream key", r.Status, r.Body, charges)
	}

	// A migrated merchant rotates like any other.
	_, rotated := e.APIKey(t, "key_3lz3cthsgj2dup3w", "rotated")
	if r := e.pay("order-1", `{"amount":1999,"currency":"EUR","source":"tok_visa","description":"Tea","metadata":{"order":"1"}}`, "Authorization", "Bearer "+rotated); r.Status != 201 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("order-1 with a new key of the migrated merchant = %d %s, want the replay", r.Status, r.Body)
	}
}

// testdataCopy copies the database and simulated ledger testdata/name holds
// (files an older oncepay made) to a fresh directory, and returns it.
func testdataCopy(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"oncepay.db", "sim.db"} {
		b, err := os.ReadFile(filepath.Join("testdata", name, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A database made by oncepay before expired_keys (commit ea45566: payments
// and refunds had a unique (scope, key_hash); testdata/made-by-ea45566) opens
// with its purged keys moved: a late retry of the purged payment key, of the
// purged refund key, and of the refund key as a payment are each refused as
// expired, naming what they made; the live key replays byte for byte; new
// payments and refunds work, a new payment's row settled by the record's
// trigger (a refund needs it succeeded).
func TestMigrateDatabaseMadeBeforeExpiredKeys(t *testing.T) {
	e := newEnv(t, envOptions{dir: testdataCopy(t, "made-by-ea45566"), auth: true})
	const (
		secret = "opk_2P7EZ3U3OWNUHFQTXBFJHBL5EFTQU5QSH5L5VHZITSZGCBPF7IOX"
		paid   = "pay_HONV7TQRFCR3LSSKBLWH6KEBWU"
		refund = "re_HONV7TSRPJVGN4SVIW7AW7VVTE"
	)
	auth := []string{"Authorization", "Bearer " + secret}
	for _, tt := range []struct {
		name string
		r    response
		id   string
	}{
		{"the purged payment key", e.pay("p-old", `{"amount":2000,"currency":"EUR","source":"tok_visa","description":"Old"}`, auth...), paid},
		{"the purged refund key", e.refund(paid, "r-old", `{"amount":500}`, auth...), refund},
		{"the purged refund key as a payment's", e.pay("r-old", visa, auth...), refund},
	} {
		if tt.r.Status != 409 || !bytes.Contains(tt.r.Body, []byte("idempotency-key-expired")) || !bytes.Contains(tt.r.Body, []byte(tt.id)) {
			t.Errorf("%s after the migration = %d %s, want 409 idempotency-key-expired naming %s", tt.name, tt.r.Status, tt.r.Body, tt.id)
		}
	}
	const live = `{"id":"pay_HONV7WHGIRSM2LUYBEDKCXTIUC","object":"payment","status":"succeeded","amount":700,"currency":"USD","charge_id":"ch_gyoao4y6thuczetoqawm4v6a","amount_refunded":0,"refunds":[],"idempotency_key":"p-new","created_at":"2026-12-01T03:37:14.994Z"}`
	if r := e.pay("p-new", `{"amount":700,"currency":"USD","source":"tok_visa"}`, auth...); r.Status != 201 || string(bytes.TrimSpace(r.Body)) != live {
		t.Errorf("p-new after the migration = %d %s, want the replayed %s", r.Status, r.Body, live)
	}
	if r := e.refund(paid, "r-new", `{"amount":1500}`, auth...); r.Status != 201 {
		t.Errorf("a new refund of the old payment = %d %s, want 201 (1,500 of 2,000 left)", r.Status, r.Body)
	}
	r := e.pay("p-3", visa, auth...)
	var p3 struct{ ID string }
	if err := json.Unmarshal(r.Body, &p3); r.Status != 201 || err != nil {
		t.Fatalf("a new payment = %d %s", r.Status, r.Body)
	}
	if r := e.refund(p3.ID, "r-3", `{"amount":100}`, auth...); r.Status != 201 {
		t.Errorf("a refund of the new payment = %d %s, want 201", r.Status, r.Body)
	}
}
