package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/payment"
)

// merchantPaid makes a merchant and a payment of it, succeeded with its
// event, and returns the merchant's id and the payment's attempt.
func merchantPaid(t *testing.T, s payment.Database, name string) (string, *payment.Attempt) {
	t.Helper()
	m, err := s.CreateMerchant(context.Background(), name, t0)
	if err != nil {
		t.Fatal(err)
	}
	return m.ID, record(t, s, m.ID, name+"-pay")
}

// record claims a payment of scope under key and records it succeeded,
// with its event.
func record(t *testing.T, s payment.Store, scope, key string) *payment.Attempt {
	t.Helper()
	a := NewAttempt(key, t0, time.Minute)
	a.Scope = scope
	mustClaim(t, s, a)
	o := withEvent(a, payment.SucceededOutcome(*a, payment.Charge{ID: "ch_" + key}), t0)
	if ok, err := s.Record(context.Background(), payment.KindPayment, scope, key, 1, o, t0); !ok || err != nil {
		t.Fatalf("Record(%s) = %v, %v", key, ok, err)
	}
	return a
}

// mustEndpoint makes an endpoint of scope at url, made at at.
func mustEndpoint(t *testing.T, s payment.Database, scope, url string, at time.Time, types ...payment.EventType) payment.Endpoint {
	t.Helper()
	e, err := payment.NewEndpoint(scope, url, types, false, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateEndpoint(context.Background(), e); err != nil {
		t.Fatalf("CreateEndpoint(%s): %v", url, err)
	}
	return e
}

// due returns the deliveries due at now, as "event type -> endpoint id".
func due(t *testing.T, s payment.Database, now time.Time) []string {
	t.Helper()
	ds, err := s.DueDeliveries(context.Background(), now, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, fmt.Sprintf("%s -> %s", d.EventType, d.EndpointID))
	}
	slices.Sort(got)
	return got
}

// An event's deliveries are made with it, one for each enabled endpoint of
// its merchant that wants its type, and for no other; a disabled
// endpoint's pending deliveries fail with it, and it gets no more.
// Endpoints round-trip, a rotated secret keeps the old one beside it.
func testEndpointsAndFanOut(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	m, err := s.CreateMerchant(ctx, "Shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := merchantPaid(t, s, "Other")
	if err := s.CreateEndpoint(ctx, payment.Endpoint{ID: "we_x", Scope: "mer_nobody", URL: "https://x.example", Secret: "whsec_x", CreatedAt: t0}); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("CreateEndpoint of an unknown merchant: %v, want not found", err)
	}
	all := mustEndpoint(t, s, m.ID, "https://all.example/hook", t0)
	refunds := mustEndpoint(t, s, m.ID, "https://refunds.example/hook", t0.Add(time.Second), payment.EventRefundSucceeded, payment.EventRefundFailed)
	theirs := mustEndpoint(t, s, other, "https://other.example/hook", t0)

	a := record(t, s, m.ID, "pay")
	fenced := NewAttempt("fenced", t0, time.Minute)
	fenced.Scope = m.ID
	mustClaim(t, s, fenced)
	if ok, err := s.Record(ctx, payment.KindPayment, m.ID, "fenced", 2, withEvent(fenced, payment.NotCompletedOutcome(*fenced), t0), t0); ok || err != nil {
		t.Fatalf("fenced-out Record = %v, %v", ok, err)
	}
	r := refundAttempt("refund", a.ID, 100)
	r.Scope = m.ID
	mustClaim(t, s, r)
	if ok, err := s.Record(ctx, payment.KindRefund, m.ID, "refund", 1, withEvent(r, payment.Outcome{Status: payment.Succeeded, ResponseStatus: 201, ResponseBody: []byte("{}\n")}, t0), t0); !ok || err != nil {
		t.Fatalf("Record(refund) = %v, %v", ok, err)
	}
	want := []string{
		"payment.succeeded -> " + all.ID,
		"refund.succeeded -> " + all.ID,
		"refund.succeeded -> " + refunds.ID,
	}
	slices.Sort(want)
	if got := due(t, s, t0); !slices.Equal(got, want) {
		t.Errorf("deliveries due = %v, want %v", got, want)
	}
	// The other merchant's payment came before its endpoint: nothing due.
	record(t, s, other, "later")
	if got := due(t, s, t0); len(got) != 4 || !slices.Contains(got, "payment.succeeded -> "+theirs.ID) {
		t.Errorf("deliveries due = %v, want the three and the other merchant's later payment's", got)
	}

	es, err := s.Endpoints(ctx, m.ID)
	if err != nil || len(es) != 2 || es[0].ID != all.ID || es[1].ID != refunds.ID {
		t.Fatalf("Endpoints(%s) = %+v, %v, want its two, oldest first", m.ID, es, err)
	}
	if got := es[1]; got.URL != refunds.URL || got.Secret != refunds.Secret || !slices.Equal(got.Types, refunds.Types) ||
		!got.CreatedAt.Equal(t0.Add(time.Second)) || !got.Enabled() || got.Scope != m.ID {
		t.Errorf("endpoint = %+v, want %+v", got, refunds)
	}
	if es, err := s.Endpoints(ctx, ""); err != nil || len(es) != 3 {
		t.Errorf("Endpoints(all) = %d, %v, want 3", len(es), err)
	}

	if err := s.DisableEndpoint(ctx, refunds.ID, "the merchant asked", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.DisableEndpoint(ctx, refunds.ID, "again", t0.Add(time.Minute)); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("DisableEndpoint of a disabled one: %v, want not found", err)
	}
	ds, err := s.Deliveries(ctx, refunds.ID, 10)
	if err != nil || len(ds) != 1 || ds[0].State != payment.DeliveryFailed || ds[0].LastError == "" {
		t.Errorf("the disabled endpoint's deliveries = %+v, %v, want its one failed", ds, err)
	}
	r2 := refundAttempt("refund-2", a.ID, 100)
	r2.Scope = m.ID
	mustClaim(t, s, r2)
	if ok, err := s.Record(ctx, payment.KindRefund, m.ID, "refund-2", 1, withEvent(r2, payment.Outcome{Status: payment.Failed, ResponseStatus: 402, ResponseBody: []byte("{}\n")}, t0), t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ds, _ := s.Deliveries(ctx, refunds.ID, 10); len(ds) != 1 {
		t.Errorf("the disabled endpoint's deliveries after another refund = %d, want still 1", len(ds))
	}
	if got := due(t, s, t0); len(got) != 4 || slices.Contains(got, "refund.succeeded -> "+refunds.ID) {
		t.Errorf("deliveries due = %v, want the disabled endpoint's gone, the new refund's to the other", got)
	}
	es, _ = s.Endpoints(ctx, m.ID)
	if got := es[1]; got.Enabled() || got.DisabledReason != "the merchant asked" || !got.DisabledAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("disabled endpoint = %+v", got)
	}

	secret := payment.NewEndpointSecret()
	if err := s.RotateEndpointSecret(ctx, all.ID, secret, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.RotateEndpointSecret(ctx, "we_nope", secret, t0); payment.ErrorCode(err) != payment.ENOTFOUND {
		t.Errorf("RotateEndpointSecret(unknown): %v, want not found", err)
	}
	es, _ = s.Endpoints(ctx, m.ID)
	if got := es[0]; got.Secret != secret || got.PreviousSecret != all.Secret || !got.PreviousUntil.Equal(t0.Add(time.Hour)) ||
		!slices.Equal(got.Secrets(t0), []string{secret, all.Secret}) || !slices.Equal(got.Secrets(t0.Add(time.Hour)), []string{secret}) {
		t.Errorf("rotated endpoint = %+v, want the new secret, the old one until %v", got, t0.Add(time.Hour))
	}
}

// A delivery is a job claimed with a lease and a fence: of many deliverers
// racing for it one wins; a try fenced out changes nothing; a failure is
// due again at its time and marks the endpoint failing, a success clears
// it; a lease that ran out lets another deliverer try it again.
func testDeliveryClaims(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	m, _ := merchantPaid(t, s, "Shop") // before the endpoint: no delivery
	ep := mustEndpoint(t, s, m, "https://shop.example/hook", t0)
	a := record(t, s, m, "pay")
	ds, err := s.DueDeliveries(ctx, t0, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("DueDeliveries = %+v, %v, want one", ds, err)
	}
	d := ds[0]
	evs := events(t, s, m) // newest first: the payment's after the endpoint
	if d.EndpointID != ep.ID || d.Endpoint.URL != ep.URL || d.Endpoint.Secret != ep.Secret || d.Scope != m || d.EventID != evs[0].ID ||
		string(d.Body) != string(evs[0].Body) || d.State != payment.DeliveryPending || d.Tries != 0 || !d.NextAt.Equal(t0) {
		t.Fatalf("due delivery = %+v, want the event of %s to %s, untried", d, a.ID, ep.ID)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range Races {
		wg.Go(func() {
			fence, ok, err := s.ClaimDelivery(ctx, d.EventID, d.EndpointID, d.Fence, t0, t0.Add(time.Minute))
			if err != nil {
				t.Error(err)
			}
			if ok {
				wins.Add(1)
				if fence != d.Fence+1 {
					t.Errorf("the winner's fence = %d, want %d", fence, d.Fence+1)
				}
			}
		})
	}
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("delivery claims won = %d, want 1", got)
	}
	fence := d.Fence + 1
	if got := due(t, s, t0.Add(30*time.Second)); len(got) != 0 {
		t.Errorf("due under a live lease = %v, want none", got)
	}
	failed := payment.DeliveryEnd{State: payment.DeliveryPending, NextAt: t0.Add(2 * time.Minute), Status: 500, LastError: "answered 500"}
	if ok, _, err := s.FinishDelivery(ctx, d.EventID, d.EndpointID, fence-1, failed, t0); ok || err != nil {
		t.Errorf("FinishDelivery under an old fence = %v, %v, want refused", ok, err)
	}
	ok, since, err := s.FinishDelivery(ctx, d.EventID, d.EndpointID, fence, failed, t0.Add(time.Second))
	if !ok || err != nil || !since.Equal(t0.Add(time.Second)) {
		t.Fatalf("FinishDelivery(failed) = %v, %v, %v, want the endpoint failing since now", ok, since, err)
	}
	if got := due(t, s, t0.Add(time.Minute)); len(got) != 0 {
		t.Errorf("due before its next try = %v, want none", got)
	}
	ds, _ = s.DueDeliveries(ctx, t0.Add(2*time.Minute), 10)
	if len(ds) != 1 || ds[0].Tries != 1 || ds[0].LastStatus != 500 || ds[0].LastError != "answered 500" || ds[0].Fence != fence {
		t.Fatalf("due at its next try = %+v, want it, tried once, its status and error", ds)
	}
	// A deliverer that claims it and dies: once its lease ends, another
	// tries again.
	if fence, ok, err = s.ClaimDelivery(ctx, d.EventID, d.EndpointID, fence, t0.Add(2*time.Minute), t0.Add(3*time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ds, _ = s.DueDeliveries(ctx, t0.Add(3*time.Minute), 10)
	if len(ds) != 1 || ds[0].Fence != fence || ds[0].Tries != 2 {
		t.Fatalf("due once the lease ran out = %+v, want it under fence %d", ds, fence)
	}
	if fence, ok, err = s.ClaimDelivery(ctx, d.EventID, d.EndpointID, fence, t0.Add(3*time.Minute), t0.Add(4*time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	again := payment.DeliveryEnd{State: payment.DeliveryPending, NextAt: t0.Add(5 * time.Minute), LastError: "timed out"}
	if _, since, _ := s.FinishDelivery(ctx, d.EventID, d.EndpointID, fence, again, t0.Add(3*time.Minute)); !since.Equal(t0.Add(time.Second)) {
		t.Errorf("failing since = %v after a second failure, want the first's %v", since, t0.Add(time.Second))
	}
	if fence, ok, err = s.ClaimDelivery(ctx, d.EventID, d.EndpointID, fence, t0.Add(5*time.Minute), t0.Add(6*time.Minute)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	delivered := payment.DeliveryEnd{State: payment.DeliveryDelivered, Status: 204}
	if ok, since, err := s.FinishDelivery(ctx, d.EventID, d.EndpointID, fence, delivered, t0.Add(5*time.Minute)); !ok || err != nil || !since.IsZero() {
		t.Fatalf("FinishDelivery(delivered) = %v, %v, %v, want the endpoint no longer failing", ok, since, err)
	}
	if _, ok, _ := s.ClaimDelivery(ctx, d.EventID, d.EndpointID, fence, t0.Add(time.Hour), t0.Add(2*time.Hour)); ok {
		t.Error("ClaimDelivery of a delivered one succeeded")
	}
	list, err := s.Deliveries(ctx, ep.ID, 10)
	if err != nil || len(list) != 1 || list[0].State != payment.DeliveryDelivered || list[0].Tries != 4 || list[0].LastStatus != 204 ||
		!list[0].NextAt.Equal(t0.Add(5*time.Minute)) || !list[0].UpdatedAt.Equal(t0.Add(5*time.Minute)) {
		t.Errorf("Deliveries = %+v, %v, want one delivered on its fourth try, at +5m", list, err)
	}
	if es, _ := s.Endpoints(ctx, m); !es[0].FailingSince.IsZero() {
		t.Errorf("endpoint failing since %v after a success, want not failing", es[0].FailingSince)
	}
}

// The backlog counts the pending deliveries; the purge of old events keeps
// any with a delivery pending, and deletes the deliveries of those it
// deletes.
func testDeliveryBacklogAndPurge(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	m, err := s.CreateMerchant(ctx, "Shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	ep := mustEndpoint(t, s, m.ID, "https://shop.example/hook", t0)
	record(t, s, m.ID, "one")
	record(t, s, m.ID, "two")
	if b, err := s.DeliveryBacklog(ctx); err != nil || b.Pending != 2 || !b.Oldest.Equal(t0) {
		t.Fatalf("DeliveryBacklog = %+v, %v, want 2 pending since t0", b, err)
	}
	ds, _ := s.DueDeliveries(ctx, t0, 10)
	fence, ok, err := s.ClaimDelivery(ctx, ds[0].EventID, ep.ID, ds[0].Fence, t0, t0.Add(time.Minute))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _, err := s.FinishDelivery(ctx, ds[0].EventID, ep.ID, fence, payment.DeliveryEnd{State: payment.DeliveryDelivered, Status: 200}, t0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if b, _ := s.DeliveryBacklog(ctx); b.Pending != 1 {
		t.Errorf("pending after one delivered = %d, want 1", b.Pending)
	}
	if n, _, err := s.PurgeOutbox(ctx, t0.Add(time.Hour), 10); n != 1 || err != nil {
		t.Errorf("PurgeOutbox = %d, %v, want the delivered event alone", n, err)
	}
	left := events(t, s, m.ID)
	if len(left) != 1 || left[0].ID != ds[1].EventID {
		t.Errorf("events left = %v, want the one still to deliver", left)
	}
	if list, _ := s.Deliveries(ctx, ep.ID, 10); len(list) != 1 || list[0].EventID != ds[1].EventID {
		t.Errorf("deliveries left = %+v, want the pending one's alone", list)
	}
	if err := s.DisableEndpoint(ctx, ep.ID, "gone", t0); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.PurgeOutbox(ctx, t0.Add(time.Hour), 10); n != 1 || err != nil {
		t.Errorf("PurgeOutbox once the endpoint is disabled = %d, %v, want 1", n, err)
	}
	if b, _ := s.DeliveryBacklog(ctx); b.Pending != 0 || !b.Oldest.IsZero() {
		t.Errorf("DeliveryBacklog at the end = %+v, want none", b)
	}
}

// An operator's redelivery starts a delivery over, whatever it came to
// (failed for good, delivered, a deliverer dead mid-try): pending, due at
// once, no try made, under a new fence, so a deliverer acting on what it
// read before is fenced out, and returned with its endpoint and body for
// a deliverer to claim. Refused while a deliverer holds it (in progress),
// for a disabled endpoint (invalid), and for what is unknown.
func testRedeliverDelivery(t *testing.T, h Harness) {
	ctx, s := context.Background(), h.Store
	m, err := s.CreateMerchant(ctx, "Shop", t0)
	if err != nil {
		t.Fatal(err)
	}
	ep := mustEndpoint(t, s, m.ID, "https://shop.example/hook", t0)
	record(t, s, m.ID, "pay")
	ds, _ := s.DueDeliveries(ctx, t0, 10)
	if len(ds) != 1 {
		t.Fatalf("due = %+v, want one", ds)
	}
	d := ds[0]
	fence, ok, err := s.ClaimDelivery(ctx, d.EventID, ep.ID, d.Fence, t0, t0.Add(time.Minute))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := s.RedeliverDelivery(ctx, d.EventID, ep.ID, t0.Add(time.Second)); payment.ErrorCode(err) != payment.EINPROGRESS {
		t.Errorf("RedeliverDelivery under a live lease = %v, want in progress", err)
	}
	gaveUp := payment.DeliveryEnd{State: payment.DeliveryFailed, Status: 500, LastError: "answered 500"}
	if ok, _, err := s.FinishDelivery(ctx, d.EventID, ep.ID, fence, gaveUp, t0.Add(2*time.Second)); !ok || err != nil {
		t.Fatal(ok, err)
	}

	at := t0.Add(time.Hour)
	rd, err := s.RedeliverDelivery(ctx, d.EventID, ep.ID, at)
	if err != nil || rd.State != payment.DeliveryPending || rd.Tries != 0 || !rd.NextAt.Equal(at) || rd.Fence <= fence ||
		!rd.LeaseExpiresAt.IsZero() || string(rd.Body) != string(d.Body) || rd.Endpoint.URL != ep.URL || rd.Endpoint.Secret != ep.Secret ||
		rd.LastStatus != 500 || rd.LastError != "answered 500" || rd.Scope != m.ID || rd.EventType != d.EventType {
		t.Fatalf("RedeliverDelivery of a failed one = %+v, %v; want it pending, due at %v, untried, under a fence past %d, its last answer kept", rd, err, at, fence)
	}
	if got := due(t, s, at); len(got) != 1 {
		t.Errorf("due once redelivered = %v, want it", got)
	}
	if _, ok, _ := s.ClaimDelivery(ctx, d.EventID, ep.ID, fence, at, at.Add(time.Minute)); ok {
		t.Error("a claim under the fence read before the redelivery succeeded")
	}
	fence, ok, err = s.ClaimDelivery(ctx, d.EventID, ep.ID, rd.Fence, at, at.Add(time.Minute))
	if !ok || err != nil {
		t.Fatalf("claim under the redelivery's fence = %v, %v", ok, err)
	}
	delivered := payment.DeliveryEnd{State: payment.DeliveryDelivered, Status: 204}
	if ok, _, err := s.FinishDelivery(ctx, d.EventID, ep.ID, fence, delivered, at); !ok || err != nil {
		t.Fatal(ok, err)
	}

	// Delivered, and sent again on request; its deliverer dies mid-try, and
	// once its lease has run out the operator sends it again: the dead
	// one's late end is fenced out.
	at = t0.Add(2 * time.Hour)
	rd, err = s.RedeliverDelivery(ctx, d.EventID, ep.ID, at)
	if err != nil || rd.State != payment.DeliveryPending || rd.Tries != 0 || rd.LastStatus != 204 {
		t.Fatalf("RedeliverDelivery of a delivered one = %+v, %v, want it pending, untried", rd, err)
	}
	dead, ok, err := s.ClaimDelivery(ctx, d.EventID, ep.ID, rd.Fence, at, at.Add(time.Minute))
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if rd, err = s.RedeliverDelivery(ctx, d.EventID, ep.ID, at.Add(2*time.Minute)); err != nil || rd.Fence <= dead || rd.Tries != 0 {
		t.Fatalf("RedeliverDelivery once the lease ran out = %+v, %v, want it under a fence past %d", rd, err, dead)
	}
	if ok, _, err := s.FinishDelivery(ctx, d.EventID, ep.ID, dead, delivered, at.Add(3*time.Minute)); ok || err != nil {
		t.Errorf("the dead deliverer's late end = %v, %v, want fenced out", ok, err)
	}

	for _, k := range [][2]string{{"evt_nope", ep.ID}, {d.EventID, "we_nope"}} {
		if _, err := s.RedeliverDelivery(ctx, k[0], k[1], at); payment.ErrorCode(err) != payment.ENOTFOUND {
			t.Errorf("RedeliverDelivery(%s, %s) = %v, want not found", k[0], k[1], err)
		}
	}
	if err := s.DisableEndpoint(ctx, ep.ID, "gone", at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RedeliverDelivery(ctx, d.EventID, ep.ID, at.Add(time.Hour)); payment.ErrorCode(err) != payment.EINVALID {
		t.Errorf("RedeliverDelivery to a disabled endpoint = %v, want invalid", err)
	}
	if list, _ := s.Deliveries(ctx, ep.ID, 10); len(list) != 1 || list[0].State != payment.DeliveryFailed {
		t.Errorf("deliveries of the disabled endpoint = %+v, want the one failed, untouched by the refused redelivery", list)
	}
}
