package remote_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/remote"
	"github.com/oncepay/oncepay/provider/sim"
)

// newSim serves a fresh sim over a real socket and returns it with its URL.
func newSim(tb testing.TB, f sim.Faults) (*sim.Sim, string) {
	tb.Helper()
	s, err := sim.Open(filepath.Join(tb.TempDir(), "sim.db"))
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	srv := httptest.NewServer(s.Handler())
	tb.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	mustSetFaults(tb, s, f)
	return s, srv.URL
}

// newFake serves a canned response over a real socket and returns its URL.
func newFake(tb testing.TB, status int, body string) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

func mustSetFaults(tb testing.TB, s *sim.Sim, f sim.Faults) {
	tb.Helper()
	if err := s.SetFaults(f); err != nil {
		tb.Fatalf("SetFaults(%+v): %v", f, err)
	}
}

func request(key, source string) payment.ChargeRequest {
	return payment.ChargeRequest{IdempotencyKey: key, Amount: 1250, Currency: "EUR", Source: source, Description: "order 42"}
}

func TestCharge(t *testing.T) {
	tests := []struct {
		name        string
		faults      sim.Faults
		timeout     time.Duration
		source      string
		wantDecline string // the decline code, if the answer is a decline
		wantUnknown bool   // a non-decline error: the outcome is unknown
		wantCharged bool   // what the bank's ledger says afterwards
	}{
		{"success", sim.Faults{}, 5 * time.Second, "tok_visa", "", false, true},
		{"decline", sim.Faults{}, 5 * time.Second, "tok_chargeDeclinedInsufficientFunds", "insufficient_funds", false, false},
		{"lost response", sim.Faults{FailAfterCharge: 1}, 5 * time.Second, "tok_visa", "", true, true},
		{"failure before charging", sim.Faults{FailBeforeCharge: 1}, 5 * time.Second, "tok_visa", "", true, false},
		{"timeout", sim.Faults{Latency: 2 * time.Second}, 100 * time.Millisecond, "tok_visa", "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := newSim(t, tt.faults)
			c := remote.New(url, tt.timeout)
			ctx := context.Background()
			got, err := c.Charge(ctx, request("k1", tt.source))
			d, declined := payment.IsDecline(err)
			switch {
			case tt.wantDecline != "":
				if !declined || d.Code != tt.wantDecline || d.Message == "" {
					t.Fatalf("err = %v, want a %s decline with a message", err, tt.wantDecline)
				}
			case tt.wantUnknown:
				if err == nil || declined {
					t.Fatalf("err = %v, want a non-decline error", err)
				}
			case err != nil:
				t.Fatalf("Charge: %v", err)
			case got.ID == "" || got.IdempotencyKey != "k1" || got.Amount != 1250 || got.Currency != "EUR":
				t.Fatalf("charge = %+v, want one of 1250 EUR under k1", got)
			}

			// Whatever the caller heard, asking by key recovers the truth.
			mustSetFaults(t, s, sim.Faults{})
			found, ok, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "k1"})
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if ok != tt.wantCharged {
				t.Fatalf("Lookup found = %v, want %v", ok, tt.wantCharged)
			}
			if !tt.wantUnknown && ok && found != got {
				t.Errorf("Lookup = %+v, want %+v", found, got)
			}
		})
	}
}

func TestChargeKeyReused(t *testing.T) {
	s, url := newSim(t, sim.Faults{})
	if _, err := s.Charge(context.Background(), request("k1", "tok_visa")); err != nil {
		t.Fatalf("Charge: %v", err)
	}
	_, err := remote.New(url, 5*time.Second).Charge(context.Background(), request("k1", "tok_amex"))
	if _, declined := payment.IsDecline(err); err == nil || declined {
		t.Errorf("err = %v, want a non-decline error", err)
	}
}

func TestLookupNotFound(t *testing.T) {
	_, url := newSim(t, sim.Faults{})
	_, found, err := remote.New(url, 5*time.Second).Lookup(context.Background(), payment.LookupRequest{IdempotencyKey: "never-used"})
	if err != nil || found {
		t.Errorf("Lookup = found %v, err %v; want found false, err nil", found, err)
	}
}

func TestLookupFails(t *testing.T) {
	_, url := newSim(t, sim.Faults{FailLookup: 1})
	if _, _, err := remote.New(url, 5*time.Second).Lookup(context.Background(), payment.LookupRequest{IdempotencyKey: "k1"}); err == nil {
		t.Error("err = nil, want an error")
	}
}

// TestUnexpectedResponses checks that nothing short of a well-formed answer
// passes for a result: a misread decline or "not found" would let oncepay
// give up on a payment the bank may have made.
func TestUnexpectedResponses(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
	}{
		{"decline without a code", 402, `{"error":{"type":"card_error"}}`},
		{"unreadable decline", 402, `<html>Payment Required</html>`},
		{"unreadable charge", 200, `not json`},
		{"charge without an id", 200, `{}`},
		{"not the provider's 404", 404, "404 page not found\n"},
		{"key reused", 409, `{"error":{"type":"idempotency_error"}}`},
		{"server error", 503, `{"error":{"type":"api_error"}}`},
		{"empty server error", 500, ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := remote.New(newFake(t, tt.status, tt.body), 5*time.Second)
			_, err := c.Charge(context.Background(), request("k1", "tok_visa"))
			if _, declined := payment.IsDecline(err); err == nil || declined {
				t.Errorf("Charge err = %v, want a non-decline error", err)
			}
			if _, _, err := c.Lookup(context.Background(), payment.LookupRequest{IdempotencyKey: "k1"}); err == nil {
				t.Error("Lookup err = nil, want an error")
			}
		})
	}
}

func TestErrorsOmitKey(t *testing.T) {
	_, url := newSim(t, sim.Faults{Latency: 2 * time.Second})
	const key = "secret-intent-7f3a"
	_, _, err := remote.New(url, 50*time.Millisecond).Lookup(context.Background(), payment.LookupRequest{IdempotencyKey: key})
	if err == nil {
		t.Fatal("Lookup err = nil, want a timeout")
	}
	if strings.Contains(err.Error(), key) {
		t.Errorf("err = %q, want it without the idempotency key", err)
	}
}

// The provider's "key reused" is definitive, told apart from an unknown
// outcome; a 409 that is not the provider's own stays unknown.
func TestKeyReusedIsDefinitive(t *testing.T) {
	for _, tt := range []struct {
		body string
		want bool
	}{
		{`{"error":{"type":"idempotency_error"}}`, true},
		{`<html>Conflict</html>`, false},
	} {
		_, err := remote.New(newFake(t, 409, tt.body), 5*time.Second).Charge(context.Background(), request("k1", "tok_visa"))
		if got := errors.Is(err, payment.ErrProviderKeyReused); got != tt.want {
			t.Errorf("409 %s: errors.Is(err, ErrProviderKeyReused) = %v (%v), want %v", tt.body, got, err, tt.want)
		}
	}
}

// A charge or refund whose answer is lost reaches the provider once: the
// client does not resend it on a reused connection that broke, even with the
// provider's dedupe off.
func TestLostAnswerIsNotResent(t *testing.T) {
	s, url := newSim(t, sim.Faults{})
	c := remote.New(url, 5*time.Second)
	ctx := context.Background()
	paid, err := c.Charge(ctx, request("paid", "tok_visa"))
	if err != nil {
		t.Fatalf("Charge: %v", err)
	}
	mustSetFaults(t, s, sim.Faults{FailAfterCharge: 1, NoDedupe: true})
	// Each call goes out on the connection the last one left idle.
	if _, err := c.Charge(ctx, request("lost", "tok_visa")); err == nil {
		t.Fatal("Charge: no error, want the answer lost")
	}
	if _, _, err := c.Lookup(ctx, payment.LookupRequest{IdempotencyKey: "paid"}); err != nil { // a connection to reuse
		t.Fatalf("Lookup: %v", err)
	}
	if _, err := c.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "lost-refund", ChargeID: paid.ID, Amount: 100, Currency: "EUR"}); err == nil {
		t.Fatal("Refund: no error, want the answer lost")
	}
	for _, got := range s.Calls() {
		if got.Charges > 1 || got.Refunds > 1 {
			t.Errorf("calls = %+v, want at most one charge or refund under a key", got)
		}
	}
}
