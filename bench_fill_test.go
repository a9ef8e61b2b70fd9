package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/sqlitestore"
)

// A filled database is one the real server reads as its own: a filled live
// key replays its stored answer byte for byte, an old key is refused as
// expired, a filled payment and its refund are served, the lists page
// through them, the admin page finds a key, and the purge deletes the
// records past the retention.
func TestBenchFillServes(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		testFillServes(t, filepath.Join(t.TempDir(), "filled.db"), func(ctx context.Context, db string) (payment.Database, error) {
			return sqlitestore.Open(ctx, db, schema, sqlitestore.Options{})
		})
	})
	t.Run("postgres", func(t *testing.T) {
		testFillServes(t, pgtest.URL(t), func(ctx context.Context, db string) (payment.Database, error) {
			return pgstore.Open(ctx, db, pgstore.Options{})
		})
	})
}

func testFillServes(t *testing.T, db string, open func(context.Context, string) (payment.Database, error)) {
	const n, live, unpurged = 400, 120, 30
	out := runOK(t, "bench", "fill", "--db", db, "--payments", strconv.Itoa(n), "--live-keys", strconv.Itoa(live),
		"--unpurged", strconv.Itoa(unpurged), "--merchants", "2", "--batch", "64")
	var scopes, secrets []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || !strings.HasPrefix(f[0], "mer_") || !payment.LooksLikeSecret(f[1]) {
			t.Fatalf("bench fill printed %q, want \"merchant_id api_key\" lines", line)
		}
		scopes, secrets = append(scopes, f[0]), append(secrets, f[1])
	}
	if len(secrets) != 2 {
		t.Fatalf("bench fill printed %d keys, want 2", len(secrets))
	}

	url, token, stop := serveInProcess(t, db)
	do := func(method, path, auth, key string, body []byte) (int, []byte, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+auth)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b, resp.Header
	}

	store, err := open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// The newest payment, a declined one, and a refund: each a live key.
	for _, i := range []int{n - 1, n - live + 7, n - live + 3} {
		scope, secret := scopes[i%2], secrets[i%2]
		a, err := store.Attempt(context.Background(), scope, payment.FillKey(i))
		if err != nil {
			t.Fatalf("filled live key %d: %v", i, err)
		}
		status, body, h := do("POST", "/v1/payments", secret, payment.FillKey(i), payment.FillRequest(i))
		if status != a.ResponseStatus || string(body) != string(a.ResponseBody) || h.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay of filled key %d = %d %s (replayed %q), want its stored %d %s", i, status, body, h.Get("Idempotent-Replayed"), a.ResponseStatus, a.ResponseBody)
		}
		if i%20 != 7 && (status != 201 || !strings.Contains(string(body), `"idempotency_key":"`+payment.FillKey(i)+`"`)) {
			t.Errorf("replay of filled key %d = %d %s, want the 201 of its payment", i, status, body)
		}
		if i%10 == 3 {
			r, err := store.Attempt(context.Background(), scope, payment.FillKey(i)+"-refund")
			if err != nil {
				t.Fatalf("refund key of %d: %v", i, err)
			}
			status, body, _ := do("POST", "/v1/payments/"+a.ID+"/refunds", secret, r.Key, payment.FillRefundRequest(i))
			if status != 201 || string(body) != string(r.ResponseBody) {
				t.Errorf("replay of the refund of %d = %d %s, want 201 %s", i, status, body, r.ResponseBody)
			}
		}
	}
	// An old key, its record purged long ago: refused, never charged again.
	if status, body, _ := do("POST", "/v1/payments", secrets[1], payment.FillKey(3), payment.FillRequest(3)); status != 409 || !strings.Contains(string(body), payment.ProblemKeyExpired) {
		t.Errorf("retry of an old filled key = %d %s, want 409 %s", status, body, payment.ProblemKeyExpired)
	}
	// An old payment with its refund.
	var list struct {
		Data []struct {
			ID             string `json:"id"`
			Amount         int64  `json:"amount"`
			AmountRefunded int64  `json:"amount_refunded"`
		} `json:"data"`
		HasMore bool `json:"has_more"`
	}
	status, body, _ := do("GET", "/v1/payments?limit=100", secrets[1], "", nil)
	if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Data) != 100 || !list.HasMore {
		t.Fatalf("GET /v1/payments?limit=100 = %d %.300s, want a full page with more", status, body)
	}
	last := list.Data[len(list.Data)-1].ID
	status, body, _ = do("GET", "/v1/payments?limit=100&starting_after="+last, secrets[1], "", nil)
	if err := json.Unmarshal(body, &list); status != 200 || err != nil || len(list.Data) != 100 || list.Data[0].ID >= last {
		t.Fatalf("GET /v1/payments, the page after %s = %d %.300s, want the next 100", last, status, body)
	}
	refunded := ""
	for _, p := range list.Data {
		if p.AmountRefunded > 0 && p.AmountRefunded == p.Amount/2 {
			refunded = p.ID
		}
	}
	if refunded == "" {
		t.Fatalf("no refunded payment among %.500s", body)
	}
	if status, body, _ := do("GET", "/v1/payments/"+refunded, secrets[1], "", nil); status != 200 || !strings.Contains(string(body), `"object":"refund"`) {
		t.Errorf("GET a filled payment = %d %s, want 200 with its refund", status, body)
	}
	if status, body, _ := do("GET", "/v1/events?limit=5", secrets[0], "", nil); status != 200 || strings.Count(string(body), `"object":"event"`) != 5 {
		t.Errorf("GET /v1/events = %d %.300s, want 5 events", status, body)
	}
	if status, body, _ := do("GET", "/admin?q="+payment.FillKey(n-2), token, "", nil); status != 200 || !strings.Contains(string(body), payment.FillKey(n-2)) {
		t.Errorf("admin search for a filled key = %d, want 200 and the key", status)
	}
	if status, body, _ := do("GET", "/v1/attempts?status=succeeded", token, "", nil); status != 200 || !strings.Contains(string(body), "fill-") {
		t.Errorf("GET /v1/attempts = %d %.200s, want filled attempts", status, body)
	}
	stop()
	// The records past the retention, and no other, are the purge's.
	out = runOK(t, "purge", "--db", db)
	if !strings.Contains(out, "deleted "+strconv.Itoa(unpurged+unpurged/10)+" final attempts") {
		t.Errorf("purge of the filled database said %q, want %d records (%d payments' and their refunds')", out, unpurged+unpurged/10, unpurged)
	}
}

// bench fill leaves its SQLite file finished, read as it is by any program
// (scripts/bench-years.sh counts with sqlite3): the expired keys moved, the
// stage gone, without waiting for the next open of a store to move them.
func TestBenchFillFinishesItsFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "filled.db")
	runOK(t, "bench", "fill", "--db", db, "--payments", "300", "--live-keys", "100", "--merchants", "2", "--batch", "64")
	c, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var staged, expired int
	err = c.QueryRow(`SELECT (SELECT count(*) FROM sqlite_master WHERE name = 'fill_expired_keys'),
		(SELECT count(*) FROM expired_keys)`).Scan(&staged, &expired)
	if err != nil || staged != 0 || expired != 220 {
		t.Errorf("filled file: stage tables %d, expired keys %d, %v; want 0 and 220 (200 payments, 20 refunds)", staged, expired, err)
	}
}
