package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/remote"
	"github.com/oncepay/oncepay/provider/sim"
)

// receiver is a webhook endpoint that verifies and keeps the sim's events.
func receiver(t *testing.T, s *sim.Sim) (events func() []payment.Event) {
	t.Helper()
	const secret = "whsec_c2ltLXJldHVybmVkLXRlc3Qtc2VjcmV0"
	var (
		mu  sync.Mutex
		got []payment.Event
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := sim.VerifyWebhook(secret, r.Header, body, time.Now())
		if err != nil {
			t.Errorf("verify: %v", err)
			w.WriteHeader(400)
			return
		}
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	if err := s.SetWebhook(sim.WebhookConfig{URL: srv.URL, Secret: secret, FirstRetry: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return func() []payment.Event {
		for range 500 {
			if s.WebhooksInFlight() == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]payment.Event(nil), got...)
	}
}

// The bank fails a refund after it succeeded: the ledger shows it failed
// and no longer counts it (the charge's amount is refundable again), a
// lookup under its key answers a decline with the failure code, a second
// fail changes nothing and sends nothing, and the events are the refund's
// success, then its failure, naming oncepay's refund and payment.
func TestFailRefundAfterSuccess(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	events := receiver(t, s)
	c, err := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k", PaymentID: "pay_1", Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	req := payment.ProviderRefundRequest{IdempotencyKey: "rk", RefundID: "re_1", PaymentID: "pay_1", ChargeID: c.ID, Amount: 1000, Currency: "EUR"}
	r, err := s.Refund(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	more := req
	more.IdempotencyKey, more.Amount = "rk2", 1
	if _, err := s.Refund(ctx, more); err == nil {
		t.Fatalf("a refund past the charge was made")
	}
	got, err := s.FailRefund(ctx, r.ID, "")
	if err != nil || got.Status != "failed" || got.ID != r.ID {
		t.Fatalf("FailRefund = %+v, %v; want the refund failed", got, err)
	}
	if _, err := s.FailRefund(ctx, r.ID, "other"); err != nil {
		t.Fatalf("FailRefund again = %v", err)
	}
	if _, err := s.FailRefund(ctx, "re_sim_none", ""); !errors.Is(err, sim.ErrNoRefund) {
		t.Errorf("FailRefund of no refund = %v, want ErrNoRefund", err)
	}
	_, found, err := s.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "rk"})
	if d, ok := payment.IsDecline(err); found || !ok || d.Code != sim.ReturnedCode {
		t.Errorf("LookupRefund of the failed refund = found %v, %v; want a decline %s", found, err, sim.ReturnedCode)
	}
	all, _ := s.Refunds(ctx)
	if len(all) != 1 || all[0].Status != "failed" {
		t.Errorf("ledger = %+v, want the one refund failed", all)
	}
	if _, err := s.Refund(ctx, more); err != nil {
		t.Errorf("a refund of the restored balance = %v, want made", err)
	}
	var kinds []payment.EventKind
	for _, ev := range events() {
		kinds = append(kinds, ev.Kind)
		if ev.Kind == payment.EventSucceeded { // the charge's
			continue
		}
		if ev.RefundID != "re_1" || ev.PaymentID != "pay_1" || ev.DownstreamKey != "rk" && ev.DownstreamKey != "rk2" {
			t.Errorf("event = %+v, want it to name re_1 of pay_1 under its key", ev)
		}
		if ev.Kind == payment.EventRefundFailure && (ev.ProviderRefundID != r.ID || ev.DeclineCode != sim.ReturnedCode) {
			t.Errorf("failure event = %+v, want %s failed %s", ev, r.ID, sim.ReturnedCode)
		}
	}
	want := map[payment.EventKind]int{payment.EventRefunded: 2, payment.EventRefundFailure: 1, payment.EventSucceeded: 1}
	count := map[payment.EventKind]int{}
	for _, k := range kinds {
		count[k]++
	}
	if len(count) != len(want) || count[payment.EventRefunded] != 2 || count[payment.EventRefundFailure] != 1 || count[payment.EventSucceeded] != 1 {
		t.Errorf("events = %v, want %v", count, want)
	}
}

// With fail_refund_later the caller is told the refund was made, and the
// ledger already says the bank returned it.
func TestFailRefundLaterKnob(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	c, _ := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k", Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if err := s.SetFaults(sim.Faults{FailRefundLater: 1}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "rk", ChargeID: c.ID, Amount: 400, Currency: "EUR"})
	if err != nil || r.ID == "" {
		t.Fatalf("Refund = %+v, %v; want made", r, err)
	}
	if _, _, err := s.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "rk"}); err == nil {
		t.Errorf("LookupRefund after the bank returned it = nil error, want a decline")
	}
	if err := s.SetFaults(sim.Faults{FailRefundLater: 1.5}); err == nil {
		t.Errorf("fail_refund_later 1.5 accepted")
	}
}

// A dispute is opened on a charge, looked up by id with the payment its
// charge names, closed once (won or lost only), and each change sent as
// an event; over HTTP too, as a remote provider looks it up, and a failed
// refund's lookup is a decline across the socket.
func TestDisputes(t *testing.T) {
	ctx := context.Background()
	s := MustOpen(t)
	events := receiver(t, s)
	c, _ := s.Charge(ctx, payment.ChargeRequest{IdempotencyKey: "k", PaymentID: "pay_1", Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if _, err := s.Dispute(ctx, "ch_none", ""); !errors.Is(err, sim.ErrNoCharge) {
		t.Errorf("Dispute of no charge = %v, want ErrNoCharge", err)
	}
	d, err := s.Dispute(ctx, c.ID, "")
	want := payment.ProviderDispute{Dispute: payment.Dispute{ID: d.ID, Status: "needs_response", Reason: "fraudulent", Amount: 1000},
		Currency: "EUR", ChargeID: c.ID, PaymentID: "pay_1"}
	if err != nil || d != want {
		t.Fatalf("Dispute = %+v, %v; want %+v", d, err, want)
	}
	if _, err := s.CloseDispute(ctx, d.ID, "maybe"); err == nil {
		t.Errorf("CloseDispute(maybe) accepted")
	}
	for range 2 {
		if got, err := s.CloseDispute(ctx, d.ID, "lost"); err != nil || got.Status != "lost" {
			t.Fatalf("CloseDispute = %+v, %v", got, err)
		}
	}
	if _, err := s.CloseDispute(ctx, d.ID, "won"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	rc := remote.New(srv.URL, 5*time.Second)
	got, err := rc.LookupDispute(ctx, d.ID)
	want.Status = "lost"
	if err != nil || got != want {
		t.Errorf("remote LookupDispute = %+v, %v; want %+v (closed once, lost)", got, err, want)
	}
	if _, err := rc.LookupDispute(ctx, "dp_none"); !errors.Is(err, payment.ErrNoDispute) {
		t.Errorf("remote LookupDispute of none = %v, want ErrNoDispute", err)
	}
	var types []string
	for _, ev := range events() {
		if ev.Kind == payment.EventDisputed {
			types = append(types, ev.Type+" "+ev.Dispute.Status)
		}
	}
	slices.Sort(types) // delivered concurrently, in either order
	if strings.Join(types, ",") != "charge.dispute.closed lost,charge.dispute.created needs_response" {
		t.Errorf("dispute events = %v, want one created and one closed lost", types)
	}

	// A refund failed at the bank reads as a decline through the socket.
	r, err := rc.Refund(ctx, payment.ProviderRefundRequest{IdempotencyKey: "rk", ChargeID: c.ID, Amount: 100, Currency: "EUR", RefundID: "re_1", PaymentID: "pay_1"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(srv.URL+"/sim/refunds/"+r.ID+"/fail", "application/json", strings.NewReader(`{"failure_code":"expired_or_canceled_card"}`))
	if err != nil {
		t.Fatal(err)
	}
	var failed payment.ProviderRefund
	json.NewDecoder(resp.Body).Decode(&failed)
	resp.Body.Close()
	if resp.StatusCode != 200 || failed.Status != "failed" {
		t.Errorf("POST /sim/refunds/{id}/fail = %d %+v, want 200 failed", resp.StatusCode, failed)
	}
	if _, found, err := rc.LookupRefund(ctx, payment.RefundLookup{IdempotencyKey: "rk"}); found || err == nil {
		t.Errorf("remote LookupRefund of the failed refund = %v, %v; want a decline", found, err)
	} else if d, ok := payment.IsDecline(err); !ok || d.Code != "expired_or_canceled_card" {
		t.Errorf("remote LookupRefund = %v, want the decline expired_or_canceled_card", err)
	}
	for path, want := range map[string]int{"/sim/refunds/re_none/fail": 404, "/sim/charges/ch_none/dispute": 404} {
		resp, err := http.Post(srv.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}
