package link_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/link"
)

// bank is a provider whose calls fail while down, and count.
type bank struct {
	down  atomic.Bool
	calls atomic.Int32
}

var errUnreachable = errors.New("connection refused")

func (b *bank) answer() error {
	b.calls.Add(1)
	if b.down.Load() {
		return errUnreachable
	}
	return nil
}

func (b *bank) Charge(ctx context.Context, req payment.ChargeRequest) (payment.Charge, error) {
	if err := b.answer(); err != nil {
		return payment.Charge{}, err
	}
	if req.Source == "tok_chargeDeclined" {
		return payment.Charge{}, &payment.DeclineError{Code: "card_declined"}
	}
	return payment.Charge{ID: "ch_1"}, nil
}

func (b *bank) Lookup(context.Context, payment.LookupRequest) (payment.Charge, bool, error) {
	return payment.Charge{}, false, b.answer()
}

func (b *bank) Refund(context.Context, payment.ProviderRefundRequest) (payment.ProviderRefund, error) {
	return payment.ProviderRefund{}, b.answer()
}

func (b *bank) LookupRefund(context.Context, payment.RefundLookup) (payment.ProviderRefund, bool, error) {
	return payment.ProviderRefund{}, false, b.answer()
}

func newLink(t *testing.T, b *bank, up func()) *link.Link {
	t.Helper()
	l, err := link.New(b, link.Config{Failures: 3, OpenFor: 50 * time.Millisecond, OnUp: up})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Three calls in a row that cannot reach the provider open the breaker:
// the next calls are not made at all, even once a probe is due, and fail
// with ErrLinkDown; a probe that gets an answer closes it, and OnUp says so.
func TestBreakerOpensAndOnlyAProbeCloses(t *testing.T) {
	ctx := context.Background()
	b := &bank{}
	ups := make(chan struct{}, 1)
	l := newLink(t, b, func() { ups <- struct{}{} })
	b.down.Store(true)
	for range 3 {
		if _, err := l.Charge(ctx, payment.ChargeRequest{}); !errors.Is(err, errUnreachable) {
			t.Fatalf("Charge on a dead link = %v, want the provider's error", err)
		}
	}
	if !l.Down() || l.State() != "down" {
		t.Fatalf("after 3 failures the link is %s, want down", l.State())
	}
	time.Sleep(60 * time.Millisecond) // past OpenFor: a probe is due
	calls := b.calls.Load()
	for range 5 {
		if _, err := l.Charge(ctx, payment.ChargeRequest{}); !errors.Is(err, payment.ErrLinkDown) {
			t.Errorf("Charge on an open breaker = %v, want ErrLinkDown", err)
		}
		if _, _, err := l.Lookup(ctx, payment.LookupRequest{}); !errors.Is(err, payment.ErrLinkDown) {
			t.Errorf("Lookup on an open breaker = %v, want ErrLinkDown", err)
		}
	}
	if got := b.calls.Load(); got != calls {
		t.Errorf("calls made while down = %d, want 0: no payment is the probe", got-calls)
	}
	if err := l.Probe(ctx); !errors.Is(err, errUnreachable) || !l.Down() {
		t.Errorf("a failed probe = %v, link %s; want the provider's error, still down", err, l.State())
	}
	b.down.Store(false)
	time.Sleep(60 * time.Millisecond)
	if err := l.Probe(ctx); err != nil || l.Down() {
		t.Fatalf("probe with the provider back = %v, link %s; want nil, up", err, l.State())
	}
	select {
	case <-ups:
	case <-time.After(time.Second):
		t.Error("OnUp not called when the link came back")
	}
	if c, err := l.Charge(ctx, payment.ChargeRequest{}); err != nil || c.ID != "ch_1" {
		t.Errorf("Charge with the link up = %v, %v", c, err)
	}
}

// A decline, a key held for another payment or a refusal of oncepay's
// credentials is the provider answering: none of them opens the breaker.
func TestAnswersKeepTheLinkUp(t *testing.T) {
	ctx := context.Background()
	b := &bank{}
	l := newLink(t, b, nil)
	for range 10 {
		if _, err := l.Charge(ctx, payment.ChargeRequest{Source: "tok_chargeDeclined"}); err == nil {
			t.Fatal("a declined card charged")
		}
	}
	if l.Down() {
		t.Errorf("after 10 declines the link is %s, want up", l.State())
	}
}

// Run probes a link that is down until it is up again, by itself.
func TestRunProbesUntilUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &bank{}
	ups := make(chan struct{}, 1)
	l := newLink(t, b, func() { ups <- struct{}{} })
	go l.Run(ctx, 20*time.Millisecond, time.Second)
	b.down.Store(true)
	for range 3 {
		l.Charge(ctx, payment.ChargeRequest{})
	}
	b.down.Store(false)
	select {
	case <-ups:
	case <-time.After(5 * time.Second):
		t.Fatalf("the link is %s 5s after the provider came back, want up", l.State())
	}
}

// disputing is a bank that can be asked about disputes.
type disputing struct{ bank }

func (d *disputing) LookupDispute(_ context.Context, id string) (payment.ProviderDispute, error) {
	if err := d.answer(); err != nil {
		return payment.ProviderDispute{}, err
	}
	if id != "dp_1" {
		return payment.ProviderDispute{}, payment.ErrNoDispute
	}
	return payment.ProviderDispute{Dispute: payment.Dispute{ID: id, Status: "lost"}, PaymentID: "pay_1"}, nil
}

// A dispute is asked through the link when the provider behind it can be
// asked: an answer, "no such dispute" included, keeps the link up. A
// provider that cannot be asked says so, as an error, not a dispute.
func TestLookupDisputeThroughTheLink(t *testing.T) {
	ctx := context.Background()
	d := &disputing{}
	l, err := link.New(d, link.Config{Failures: 3, OpenFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := l.LookupDispute(ctx, "dp_1"); err != nil || got.PaymentID != "pay_1" {
		t.Errorf("LookupDispute = %+v, %v; want the provider's dispute", got, err)
	}
	for range 5 {
		if _, err := l.LookupDispute(ctx, "dp_none"); !errors.Is(err, payment.ErrNoDispute) {
			t.Fatalf("LookupDispute of none = %v, want ErrNoDispute", err)
		}
	}
	if l.Down() {
		t.Errorf("after answers of no dispute the link is %s, want up", l.State())
	}
	if _, err := newLink(t, &bank{}, nil).LookupDispute(ctx, "dp_1"); err == nil {
		t.Errorf("LookupDispute through a provider that cannot be asked = nil error")
	}
}
