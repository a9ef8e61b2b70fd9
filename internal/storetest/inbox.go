package storetest

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// inbox is the inbox over a store, settling the attempts of scope "s" made
// through the simulated provider, on a clock the test moves.
type inbox struct {
	*payment.Inbox
	sim *sim.Sim
	now time.Time
}

func newInbox(t *testing.T, db payment.Database) *inbox {
	t.Helper()
	s, err := sim.Open(filepath.Join(t.TempDir(), "sim.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	in := &inbox{sim: s, now: t0}
	svc := &payment.Service{Store: db, Provider: s, ProviderName: "sim", Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return in.now }, ProviderTimeout: 5 * time.Second, Lease: time.Minute}
	in.Inbox = payment.NewInbox(db, svc, "sim", time.Minute)
	in.MaxAttempts = 2
	return in
}

// charge makes the provider charge the attempt under key.
func (in *inbox) charge(t *testing.T, key string) payment.Charge {
	t.Helper()
	c, err := in.sim.Charge(context.Background(), payment.ChargeRequest{IdempotencyKey: payment.DownstreamKey("s", key),
		Amount: 1000, Currency: "EUR", Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A failed event is begun again by each of the three that retry it: its
// sender's redelivery, the sweep (once it was untouched for a lease, with
// tries left), and an operator's Redeliver (past the tries, which the
// sender and the sweep no longer begin). Here an event fails because the
// provider does not yet know its charge, which it then learns.
func testInboxFailedEventBegunAgain(t *testing.T, h Harness) {
	ctx := context.Background()
	in := newInbox(t, h.Store)
	for _, by := range []string{"sender", "sweep", "redeliver"} {
		key := "k-" + by
		a := NewAttempt(key, in.now, 0) // its owner gone: no lease
		mustClaim(t, h.Store, a)
		ev := payment.Event{Provider: "sim", ID: "evt_" + by, Type: "charge.succeeded", Kind: payment.EventSucceeded,
			PaymentID: a.ID, DownstreamKey: payment.DownstreamKey("s", key), Charge: payment.Charge{ID: "ch_" + by, Amount: 1000, Currency: "EUR"}}
		tries := 1
		if by == "redeliver" {
			tries = in.MaxAttempts
		}
		for range tries {
			if d, err := in.Deliver(ctx, ev); err != nil || d.State != payment.EventFailedState {
				t.Fatalf("%s: Deliver before the provider knows the charge = %+v, %v; want failed", by, d, err)
			}
		}
		if by == "redeliver" { // out of tries: the sender's copy is answered, not begun
			if d, err := in.Deliver(ctx, ev); err != nil || d.State != payment.EventFailedState {
				t.Fatalf("%s: Deliver past the tries = %+v, %v; want failed", by, d, err)
			}
			if e, _ := h.Store.InboxEvent(ctx, "sim", ev.ID); e.Attempts != in.MaxAttempts {
				t.Fatalf("%s: tries = %d past the bound, want %d", by, e.Attempts, in.MaxAttempts)
			}
		}
		c := in.charge(t, key)
		in.now = in.now.Add(2 * time.Minute) // a lease since the last try
		var (
			d   payment.Delivery
			err error
		)
		switch by {
		case "sender":
			d, err = in.Deliver(ctx, ev)
		case "sweep":
			var res payment.SweepResult
			res, err = in.Sweep(ctx)
			if res.Found != 1 || res.Processed != 1 {
				t.Errorf("%s: Sweep = %v, want the one failed event found and settled", by, res)
			}
			d.State = payment.EventProcessed
		case "redeliver":
			if res, _ := in.Sweep(ctx); res.Found != 0 {
				t.Errorf("%s: Sweep = %v, want the event out of tries left for the operator", by, res)
			}
			d, err = in.Redeliver(ctx, "sim", ev.ID)
		}
		if err != nil || d.State != payment.EventProcessed {
			t.Fatalf("%s: = %+v, %v; want processed", by, d, err)
		}
		e, err := h.Store.InboxEvent(ctx, "sim", ev.ID)
		if err != nil || e.State != payment.EventProcessed || e.Attempts != tries+1 || e.LastError != "" {
			t.Errorf("%s: event = %+v, %v; want processed by try %d", by, e, err, tries+1)
		}
		if got := mustAttempt(t, h.Store, key); got.Status != payment.Succeeded || got.ChargeID != c.ID {
			t.Errorf("%s: attempt = %s %q, want succeeded with the provider's %s", by, got.Status, got.ChargeID, c.ID)
		}
	}
}
