package payment_test

import (
	"context"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
	"github.com/oncepay/oncepay/provider/sim"
)

// pausedAfterForwardClaim is a store whose forwarder pauses (a stalled
// process) between its claim of a queued payment and its provider call,
// for longer than its lease.
type pausedAfterForwardClaim struct {
	payment.Store
	clock *clock
	lease time.Duration
}

func (p pausedAfterForwardClaim) ClaimForward(ctx context.Context, id string, fence int64, now, until time.Time) (int64, bool, error) {
	f, ok, err := p.Store.ClaimForward(ctx, id, fence, now, until)
	p.clock.Add(p.lease + time.Second)
	return f, ok, err
}

// A forwarder whose lease ran out between its claim and its provider call
// calls nothing: by then another forwarder may hold the payment, or have
// settled it expired. It leaves the payment queued; the next run charges
// it, once.
func TestForwarderPastItsLeaseDoesNotCall(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	if err := f.DB.SetOfflineLimits(ctx, "demo", &payment.OfflineLimits{MaxAmount: 5000, MaxTotal: 5000, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := f.Sim.SetFaults(sim.Faults{FailBeforeCharge: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := f.Service.Pay(ctx, "demo", "k", visa); err != nil || r.Status != 202 {
		t.Fatalf("Pay on a dead link = %d, %v; want 202", r.Status, err)
	}
	if err := f.Sim.SetFaults(sim.Faults{}); err != nil {
		t.Fatal(err)
	}
	dk := payment.DownstreamKey("demo", "k")
	before := f.Calls()[dk]
	f.Service.Store = pausedAfterForwardClaim{Store: f.DB, clock: f.clock, lease: f.Service.Lease}
	fwd, err := payment.NewForwarder(payment.Forwarder{Service: f.Service})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := fwd.RunOnce(ctx); err != nil || res.Unknown != 1 {
		t.Errorf("the paused forwarder's run = %v, %v; want it left queued", res, err)
	}
	if c := f.Calls()[dk]; c.Charges != before.Charges || c.Lookups != before.Lookups {
		t.Errorf("the paused forwarder called the provider: %+v, before %+v", c, before)
	}
	f.Service.Store = f.DB
	if res, err := fwd.RunOnce(ctx); err != nil || res.Succeeded != 1 {
		t.Errorf("the next run = %v, %v; want 1 succeeded", res, err)
	}
	if c := f.Calls()[dk]; c.Charges != before.Charges+1 {
		t.Errorf("charge calls = %d, want %d", c.Charges, before.Charges+1)
	}
}
