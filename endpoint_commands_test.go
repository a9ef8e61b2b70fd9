package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// cli runs one command and returns what it printed, failing the test on
// an error unless fails.
func cli(t *testing.T, fails bool, args ...string) string {
	t.Helper()
	var out, errs bytes.Buffer
	err := run(context.Background(), args, env(nil), &out, &errs)
	if (err != nil) != fails {
		t.Fatalf("oncepay %s = %v (%s), want an error: %v", strings.Join(args, " "), err, errs.String(), fails)
	}
	return out.String()
}

// endpoint add prints a whsec_ secret of 32 random bytes alone on the last
// line, and refuses an http URL (unless told it is a test), an unknown
// merchant, an unknown event type; list shows what each is sent and its
// state; rotate-secret prints a new secret; disable stops it, once.
func TestEndpointCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "oncepay.db")
	m := lastLine(cli(t, false, "merchant", "create", "Shop", "--db", db))
	out := cli(t, false, "endpoint", "add", "--merchant", m, "--url", "https://shop.example/hook", "--events", "payment.succeeded,refund.failed", "--db", db)
	secret := lastLine(out)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("last line = %q, want whsec_ and the base64 of 32 bytes", secret)
	}
	id := strings.Fields(out)[2]
	for _, args := range [][]string{
		{"--merchant", m, "--url", "http://shop.example/hook"},
		{"--merchant", "mer_nobody", "--url", "https://shop.example/hook"},
		{"--merchant", m, "--url", "https://shop.example/hook", "--events", "charge.succeeded"},
		{"--merchant", m, "--url", "https://user:pass@shop.example/hook"},
		{"--merchant", m},
	} {
		cli(t, true, append(append([]string{"endpoint", "add"}, args...), "--db", db)...)
	}
	cli(t, false, "endpoint", "add", "--merchant", m, "--url", "http://127.0.0.1:9/hook", "--allow-insecure-endpoints", "--db", db)
	list := cli(t, false, "endpoint", "list", "--db", db)
	for _, want := range []string{id, "https://shop.example/hook", "payment.succeeded,refund.failed", "http://127.0.0.1:9/hook", "all events", "enabled"} {
		if !strings.Contains(list, want) {
			t.Errorf("endpoint list lacks %q:\n%s", want, list)
		}
	}
	if strings.Contains(list, secret) {
		t.Error("endpoint list shows a secret")
	}
	rotated := lastLine(cli(t, false, "endpoint", "rotate-secret", id, "--db", db))
	if !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Errorf("rotate-secret printed %q, want a new whsec_ secret", rotated)
	}
	cli(t, false, "endpoint", "disable", id, "--db", db)
	cli(t, true, "endpoint", "disable", id, "--db", db)
	if list := cli(t, false, "endpoint", "list", "--merchant", m, "--db", db); !strings.Contains(list, "disabled") {
		t.Errorf("endpoint list after disable:\n%s", list)
	}
}

// oncepay deliver sends the events due to their endpoints once, signed
// with the secret endpoint add printed; without --allow-insecure-endpoints
// a loopback endpoint is refused and its delivery left for later.
func TestDeliverCommand(t *testing.T) {
	db, svc, scope := deliverSetup(t)
	var secret atomic.Value
	var verified atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		wh, err := standardwebhooks.NewWebhook(secret.Load().(string))
		if err != nil || wh.Verify(b, r.Header) != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		verified.Add(1)
	}))
	t.Cleanup(srv.Close)
	secret.Store(lastLine(cli(t, false, "endpoint", "add", "--merchant", scope, "--url", srv.URL, "--allow-insecure-endpoints", "--db", db)))
	if _, err := svc.Pay(context.Background(), scope, "k", payment.Request{Amount: 100, Currency: "EUR", Source: "tok_visa"}); err != nil {
		t.Fatal(err)
	}
	if out := cli(t, false, "deliver", "--db", db); !strings.Contains(out, "1 due, 0 delivered, 1 to try again") {
		t.Errorf("deliver without --allow-insecure-endpoints printed %q, want the loopback endpoint refused", out)
	}
	if verified.Load() != 0 {
		t.Fatal("a delivery reached a loopback endpoint without --allow-insecure-endpoints")
	}
	// A second payment's event is due at once (the first's after its wait).
	if _, err := svc.Pay(context.Background(), scope, "k2", payment.Request{Amount: 100, Currency: "EUR", Source: "tok_visa"}); err != nil {
		t.Fatal(err)
	}
	if out := cli(t, false, "deliver", "--db", db, "--allow-insecure-endpoints"); !strings.Contains(out, "1 due, 1 delivered") {
		t.Errorf("deliver printed %q, want 1 delivered", out)
	}
	if verified.Load() != 1 {
		t.Errorf("deliveries the reference library verified = %d, want 1", verified.Load())
	}
}

// deliverSetup is a database with a merchant, and the service that makes
// its payments (and so its events) in this process.
func deliverSetup(t *testing.T) (db string, svc *payment.Service, scope string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "oncepay.db")
	store, err := (&config{db: db}).openStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	bank, err := sim.Open(filepath.Join(dir, "sim.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bank.Close() })
	svc = &payment.Service{Store: store, Provider: bank, ProviderName: "sim", Log: slog.New(slog.DiscardHandler), Now: time.Now,
		ProviderTimeout: 5 * time.Second, Lease: 30 * time.Second}
	m, err := store.CreateMerchant(context.Background(), "Shop", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return db, svc, m.ID
}

// --delivery-backoff is the deliverer's schedule: with one short wait, a
// delivery answered 500 is due again once it has passed and, failing
// again, has failed for good; with the default it waits about a minute.
// A list that is not durations, or a wait not positive, is refused.
func TestDeliveryBackoffFlag(t *testing.T) {
	db, svc, scope := deliverSetup(t)
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	cli(t, false, "endpoint", "add", "--merchant", scope, "--url", srv.URL, "--allow-insecure-endpoints", "--db", db)
	pay := func(key string) {
		t.Helper()
		if _, err := svc.Pay(context.Background(), scope, key, payment.Request{Amount: 100, Currency: "EUR", Source: "tok_visa"}); err != nil {
			t.Fatal(err)
		}
	}
	deliver := func(want string, flags ...string) {
		t.Helper()
		out := cli(t, false, append([]string{"deliver", "--db", db, "--allow-insecure-endpoints"}, flags...)...)
		if !strings.Contains(out, want) {
			t.Errorf("deliver %s printed %q, want %q", strings.Join(flags, " "), out, want)
		}
	}
	short := []string{"--delivery-backoff", "50ms"}
	pay("short")
	deliver("1 due, 0 delivered, 1 to try again", short...)
	time.Sleep(100 * time.Millisecond) // past 50ms and its tenth
	deliver("1 due, 0 delivered, 0 to try again, 1 failed for good", short...)
	pay("default")
	deliver("1 due, 0 delivered, 1 to try again")
	deliver("0 due")
	if got := tries.Load(); got != 3 {
		t.Errorf("tries the endpoint got = %d, want 3", got)
	}
	for _, bad := range []string{"", "0s", "-1s", "1m,x", "1m,,5m", "200h", strings.Repeat("1s,", 50) + "1s"} {
		cli(t, true, "deliver", "--db", db, "--delivery-backoff", bad)
	}
}
