package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/fakestripe"
)

const stripeTestKey = "sk_test_51SecretNeverShownAnywhere0123"

// lockedBuffer collects what serve logs while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// adminSecret is an admin token serve accepts: 32 characters at least.
const adminSecret = "admin-secret-0123456789abcdef0123"

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// serve with --provider stripe never shows the secret key: not in a log
// line, /metrics, the admin page, GET /v1/attempts, nor any error body,
// whatever Stripe answers (a charge, a decline, a lost answer, a refused key).
func TestStripeSecretKeyNeverShown(t *testing.T) {
	fake := fakestripe.New(t, stripeTestKey)
	dir := t.TempDir()
	db := filepath.Join(dir, "s.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"apikey", "create", "Shop", "--db", db}, env(nil), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	apiKey := lines[len(lines)-1]

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	logs := &lockedBuffer{}
	done := make(chan error, 1)
	getenv := env(map[string]string{"STRIPE_SECRET_KEY": stripeTestKey, "ONCEPAY_ADMIN_TOKEN": adminSecret})
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--provider", "stripe", "--stripe-url", fake.URL,
			"--log-level", "DEBUG"}, getenv, io.Discard, pw)
		pw.Close()
	}()
	var base string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		logs.Write(append(sc.Bytes(), '\n'))
		var l struct{ Msg, URL string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" {
			base = l.URL
			break
		}
	}
	if base == "" {
		t.Fatalf("serve did not start: %v\n%s", <-done, logs.String())
	}
	go io.Copy(logs, pr)
	if !strings.Contains(logs.String(), `"key_mode":"test"`) {
		t.Errorf("serve does not log that the key is a test key:\n%s", logs.String())
	}

	var shown []string // every body a client or an operator saw
	do := func(method, path, body string, header ...string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		shown = append(shown, path+": "+string(b))
		return resp.StatusCode
	}
	pay := func(key, source string) int {
		return do("POST", "/v1/payments", `{"amount":1200,"currency":"usd","source":"`+source+`"}`,
			"Authorization", "Bearer "+apiKey, "Idempotency-Key", key, "Content-Type", "application/json")
	}
	if got := pay("ok", "pm_card_visa"); got != 201 {
		t.Errorf("payment = %d, want 201", got)
	}
	if got := pay("declined", "tok_chargeDeclined"); got != 402 {
		t.Errorf("declined payment = %d, want 402", got)
	}
	fake.SetFaults(fakestripe.Faults{Inject: func(*http.Request) (int, string, bool) {
		return 500, `{"error":{"type":"api_error","message":"boom"}}`, true
	}})
	if got := pay("lost", "pm_card_visa"); got != 503 {
		t.Errorf("payment while Stripe fails = %d, want 503", got)
	}
	fake.SetFaults(fakestripe.Faults{})
	fake.SetKey("sk_test_rotated")
	if got := pay("refused", "pm_card_visa"); got != 503 {
		t.Errorf("payment with a refused key = %d, want 503", got)
	}
	for _, path := range []string{"/metrics", "/admin", "/v1/attempts", "/healthz"} {
		if got := do("GET", path, "", "Authorization", "Bearer "+adminSecret); got != 200 {
			t.Errorf("GET %s = %d, want 200", path, got)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, s := range append(shown, logs.String()) {
		if strings.Contains(s, stripeTestKey) || strings.Contains(s, stripeTestKey[8:]) {
			t.Errorf("the secret key is shown in:\n%s", s)
		}
	}
	if !strings.Contains(strings.Join(shown, "\n"), "service-unavailable") {
		t.Errorf("no 503 service-unavailable body for the refused key:\n%s", strings.Join(shown, "\n"))
	}
}

// serve and demo refuse, before listening, what would be unsafe with
// Stripe; the refusals never quote the key.
func TestStripeRefusals(t *testing.T) {
	fake := fakestripe.New(t, stripeTestKey)
	const live = "sk_live_51SecretLiveKeyNeverShown0123"
	for _, tt := range []struct {
		name, cmd, key string
		args           []string
		want           string
	}{
		{"no key", "serve", "", nil, "STRIPE_SECRET_KEY"},
		{"not a secret key", "serve", "pk_test_123", nil, "STRIPE_SECRET_KEY"},
		{"retention past Stripe's window", "serve", stripeTestKey, []string{"--retention", "48h"}, "--retention"},
		{"live key in demo", "demo", live, nil, "demo refuses a live"},
		{"key Stripe refuses", "serve", "sk_test_wrong", nil, "Stripe refuses"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			args := append([]string{tt.cmd, "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "s.db"),
				"--provider", "stripe", "--stripe-url", fake.URL}, tt.args...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := run(ctx, args, env(map[string]string{"STRIPE_SECRET_KEY": tt.key}), io.Discard, &logs)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%s = %v, want an error naming %q", tt.cmd, err, tt.want)
			}
			if tt.key != "" && (strings.Contains(err.Error(), tt.key) || strings.Contains(logs.String(), tt.key)) {
				t.Errorf("the key is shown: %v\n%s", err, logs.String())
			}
		})
	}
}
