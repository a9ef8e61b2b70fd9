package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/pgtest"
	"github.com/oncepay/oncepay/internal/storetest"
	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/pgstore"
	"github.com/oncepay/oncepay/sqlitestore"
)

// runOK runs an oncepay command that must succeed and returns its stdout.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, env(nil), &out, &errOut); err != nil {
		t.Fatalf("oncepay %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// The merchant, apikey, purge and reconcile commands work on a postgres://
// --db as on a file; backup refuses and names pg_dump.
func TestCommandsOnPostgres(t *testing.T) {
	db := pgtest.URL(t)
	scope := lastLine(runOK(t, "merchant", "create", "Shop", "--db", db))
	secret := lastLine(runOK(t, "apikey", "create", "--merchant", scope, "--db", db))
	if out := runOK(t, "merchant", "list", "--db", db); !strings.Contains(out, scope) || !strings.Contains(out, "Shop") {
		t.Errorf("merchant list = %q, want the merchant", out)
	}
	list := runOK(t, "apikey", "list", "--db", db)
	if strings.Contains(list, secret) {
		t.Errorf("apikey list shows the secret")
	}
	keyID := strings.Fields(strings.Split(list, "\n")[1])[0]
	store, err := pgstore.Open(context.Background(), db, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if got, err := store.Authenticate(context.Background(), secret); got != scope || err != nil {
		t.Errorf("Authenticate = %q, %v, want %s", got, err, scope)
	}
	runOK(t, "apikey", "revoke", keyID, "--db", db)
	if _, err := store.Authenticate(context.Background(), secret); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
		t.Errorf("Authenticate after revoke: %v, want unauthorized", err)
	}
	if out := runOK(t, "purge", "--db", db); !strings.HasPrefix(out, "purge: deleted 0 final attempts") {
		t.Errorf("purge = %q", out)
	}
	sim := filepath.Join(t.TempDir(), "sim.db")
	if out := runOK(t, "reconcile", "--db", db, "--sim-db", sim); !strings.HasPrefix(out, "reconcile: 0 stale") {
		t.Errorf("reconcile = %q", out)
	}
	err = run(context.Background(), []string{"backup", "--db", db, "--to", filepath.Join(t.TempDir(), "b.db")}, env(nil), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "pg_dump") {
		t.Errorf("backup of PostgreSQL = %v, want a refusal naming pg_dump", err)
	}
	if strings.Contains(redactDB("postgres://u:hunter2@h/db"), "hunter2") {
		t.Errorf("redactDB shows the password")
	}
}

// "oncepay copy" moves a SQLite installation to PostgreSQL: merchants, keys
// (every secret still authenticates), final payments (replayed byte for
// byte), in-flight attempts with their fence and lease, the provider
// binding, and the merchants' events, endpoints and deliveries still owed
// (once: the copy makes no delivery of its own). A second copy into the same database is refused, and so is a
// target that is not a URL or a source that does not exist.
func TestCopyToPostgres(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "oncepay.db")
	scope := lastLine(runOK(t, "merchant", "create", "Shop", "--db", file))
	secret := lastLine(runOK(t, "apikey", "create", "--merchant", scope, "--db", file))
	revoked := lastLine(runOK(t, "apikey", "create", "Old shop", "--db", file))
	src, err := sqlitestore.Open(ctx, file, schema, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.BindProvider(ctx, "http://bank.example"); err != nil {
		t.Fatal(err)
	}
	keys, _ := src.APIKeys(ctx)
	src.RevokeAPIKey(ctx, keys[1].ID, time.Now())
	now := time.Now().Truncate(time.Millisecond)
	final, flight := storetest.NewAttempt("paid", now, time.Minute), storetest.NewAttempt("in-flight", now, time.Hour)
	final.Scope, flight.Scope = scope, scope
	for _, a := range []*payment.Attempt{final, flight} {
		if ok, err := src.Claim(ctx, a); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	body := []byte("{\"id\":\"" + final.ID + "\"}\n")
	if ok, err := src.Record(ctx, payment.KindPayment, scope, "paid", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: body, ChargeID: "ch_1"}, now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, ok, err := src.TakeOver(ctx, scope, "in-flight", 1, now.Add(2*time.Hour), now.Add(3*time.Hour)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	refund := payment.NewRefundAttempt(scope, "refund", payment.RefundRequest{PaymentID: final.ID, Amount: 300}, now, time.Hour)
	if ok, err := src.Claim(ctx, &refund); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// A payment whose key's record was purged: the key stays spent.
	old := storetest.NewAttempt("old", now.Add(-2*time.Hour), time.Minute)
	old.Scope = scope
	if ok, err := src.Claim(ctx, old); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := src.Record(ctx, payment.KindPayment, scope, "old", 1, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: body, ChargeID: "ch_0"}, now.Add(-2*time.Hour)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if n, _, err := src.Purge(ctx, now.Add(-time.Hour), 10); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	// Its cardholder disputed it.
	dispute := payment.Dispute{ID: "dp_1", Status: "lost", Reason: "fraudulent", Amount: 1000}
	if ok, err := src.SetDispute(ctx, scope, old.ID, dispute, nil, now); !ok || err != nil {
		t.Fatalf("SetDispute = %v, %v", ok, err)
	}
	event := &payment.InboxEvent{Event: payment.Event{Provider: "sim", ID: "evt_1", Type: "charge.succeeded", Kind: payment.EventSucceeded, PaymentID: final.ID},
		State: payment.EventReceived, ReceivedAt: now, UpdatedAt: now}
	if ok, err := src.ReceiveEvent(ctx, event); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// The merchant's events, its endpoint, and a delivery it is still owed.
	ep, err := payment.NewEndpoint(scope, "https://shop.example/hook", nil, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.CreateEndpoint(ctx, ep); err != nil {
		t.Fatal(err)
	}
	told := storetest.NewAttempt("told", now, time.Minute)
	told.Scope = scope
	if ok, err := src.Claim(ctx, told); !ok || err != nil {
		t.Fatal(ok, err)
	}
	o := payment.SucceededOutcome(*told, payment.Charge{ID: "ch_2"})
	o.Event = payment.ChangeEvent(*told, o, now)
	if ok, err := src.Record(ctx, payment.KindPayment, scope, "told", 1, o, now); !ok || err != nil {
		t.Fatal(ok, err)
	}
	src.Close()

	db := pgtest.URL(t)
	out := runOK(t, "copy", "--from", file, "--to", db)
	if want := "4 attempts (2 in progress), 4 payments, 1 refunds, 1 webhook events, 2 merchants, 2 API keys, 2 settings, 1 merchant events, 1 endpoints, 1 deliveries"; !strings.Contains(out, want) {
		t.Errorf("copy printed %q, want %q", out, want)
	}
	dst, err := pgstore.Open(ctx, db, pgstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if got, err := dst.Authenticate(ctx, secret); got != scope || err != nil {
		t.Errorf("Authenticate(the copied key) = %q, %v, want %s", got, err, scope)
	}
	if _, err := dst.Authenticate(ctx, revoked); payment.ErrorCode(err) != payment.EUNAUTHORIZED {
		t.Errorf("Authenticate(the revoked key) = %v, want unauthorized", err)
	}
	got, err := dst.Attempt(ctx, scope, "paid")
	if err != nil || got.Status != payment.Succeeded || !bytes.Equal(got.ResponseBody, body) || got.ChargeID != "ch_1" || got.ID != final.ID {
		t.Errorf("copied final attempt = %+v, %v", got, err)
	}
	got, err = dst.Attempt(ctx, scope, "in-flight")
	if err != nil || got.Status != payment.InProgress || got.Fence != 2 || !got.LeaseExpiresAt.Equal(now.Add(3*time.Hour)) ||
		!got.CreatedAt.Equal(now) || !bytes.Equal(got.RequestHash, flight.RequestHash) || got.Provider != flight.Provider {
		t.Errorf("copied in-flight attempt = %+v, %v, want fence 2 and its lease", got, err)
	}
	if p, err := dst.Payment(ctx, scope, final.ID); err != nil || p.AmountReserved != 300 || p.Status != payment.Succeeded || p.Key != "paid" {
		t.Errorf("copied payment = %+v, %v, want succeeded with 300 reserved", p, err)
	}
	if r, err := dst.Refunds(ctx, scope, final.ID); err != nil || len(r) != 1 || r[0].ID != refund.ID || r[0].Status != payment.InProgress {
		t.Errorf("copied refunds = %+v, %v, want the one in progress", r, err)
	}
	if p, err := dst.Payment(ctx, scope, old.ID); err != nil || p.Dispute == nil || *p.Dispute != dispute {
		t.Errorf("copied disputed payment = %+v, %v, want its dispute %+v", p, err, dispute)
	}
	late := storetest.NewAttempt("old", now, time.Minute)
	late.Scope = scope
	if ok, err := dst.Claim(ctx, late); ok || payment.ErrorCode(err) != payment.EKEYEXPIRED {
		t.Errorf("late retry of the key purged before the copy = %v, %v, want refused as expired", ok, err)
	}
	if e, err := dst.InboxEvent(ctx, "sim", "evt_1"); err != nil || e.State != payment.EventReceived || e.PaymentID != final.ID {
		t.Errorf("copied event = %+v, %v", e, err)
	}
	if es, err := dst.OutboxEvents(ctx, payment.OutboxFilter{Scope: scope, Limit: 10}); err != nil || len(es) != 1 ||
		es[0].ID != o.Event.ID || !bytes.Equal(es[0].Body, o.Event.Body) {
		t.Errorf("copied merchant events = %+v, %v, want the one of %s", es, err, told.ID)
	}
	if eps, err := dst.Endpoints(ctx, scope); err != nil || len(eps) != 1 || eps[0].Secret != ep.Secret || eps[0].URL != ep.URL {
		t.Errorf("copied endpoints = %+v, %v, want %s with its secret", eps, err, ep.ID)
	}
	if due, err := dst.DueDeliveries(ctx, now, 10); err != nil || len(due) != 1 || due[0].EventID != o.Event.ID || due[0].EndpointID != ep.ID {
		t.Errorf("copied deliveries due = %+v, %v, want the one still owed, once", due, err)
	}
	if err := dst.BindProvider(ctx, "sim"); err == nil || !strings.Contains(err.Error(), "http://bank.example") {
		t.Errorf("BindProvider(another) after the copy = %v, want the copied binding to refuse it", err)
	}
	merchants, _ := dst.Merchants(ctx)
	if len(merchants) != 2 || merchants[0].ID != scope || merchants[0].LiveKeys != 1 {
		t.Errorf("copied merchants = %+v", merchants)
	}

	for _, args := range [][]string{
		{"copy", "--from", file, "--to", db},                                  // not empty now
		{"copy", "--from", file, "--to", filepath.Join(t.TempDir(), "x.db")},  // not PostgreSQL
		{"copy", "--from", filepath.Join(t.TempDir(), "none.db"), "--to", db}, // no such source
	} {
		if err := run(ctx, args, env(nil), io.Discard, io.Discard); err == nil {
			t.Errorf("oncepay %s succeeded, want a refusal", strings.Join(args, " "))
		}
	}
	if n, _, _ := dst.InProgress(ctx); n != 2 {
		t.Errorf("in progress after the refused copies = %d, want 2: nothing merged", n)
	}
}

// serve on PostgreSQL takes a payment and replays it; the admin page and
// the metrics read the same database.
func TestServeOnPostgres(t *testing.T) {
	db := pgtest.URL(t)
	secret := lastLine(runOK(t, "apikey", "create", "Shop", "--db", db))
	url, token, stop := serveInProcess(t, db)
	pay := func() (int, string, string) {
		req, _ := http.NewRequest("POST", url+"/v1/payments", strings.NewReader(`{"amount":1000,"currency":"EUR","source":"tok_visa"}`))
		req.Header.Set("Idempotency-Key", "pg-1")
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed")
	}
	s1, b1, _ := pay()
	s2, b2, replayed := pay()
	if s1 != 201 || s2 != 201 || b1 != b2 || replayed != "true" {
		t.Errorf("pay, pay again = %d %s, %d %s (replayed %q), want 201 twice, the same bytes, replayed", s1, b1, s2, b2, replayed)
	}
	get := func(path string) string {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := get("/metrics"); !strings.Contains(m, "oncepay_attempts_in_progress 0") {
		t.Errorf("metrics lack the in-progress gauge at 0")
	}
	if a := get("/v1/attempts"); !strings.Contains(a, "pg-1") {
		t.Errorf("GET /v1/attempts = %.200s, want the payment", a)
	}
	stop()
}

// serveInProcess runs "oncepay serve" on db in this process, on a port of
// its own, with an admin token; stop shuts it down and checks it stopped
// cleanly.
func serveInProcess(t *testing.T, db string) (url, adminToken string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	adminToken = strings.Repeat("t", 32)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--sim-db", filepath.Join(t.TempDir(), "sim.db"),
			"--admin-token", adminToken}, env(nil), io.Discard, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if i := strings.Index(sc.Text(), `"url":"`); i >= 0 && strings.Contains(sc.Text(), "listening") {
			url = strings.SplitN(sc.Text()[i+7:], `"`, 2)[0]
			break
		}
	}
	if url == "" {
		t.Fatalf("serve did not listen: %v", <-done)
	}
	go io.Copy(io.Discard, pr)
	return url, adminToken, func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run = %v, want nil after shutdown", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not stop")
		}
	}
}
